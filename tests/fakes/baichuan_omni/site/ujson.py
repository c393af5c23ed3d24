"""Fake ujson (the Baichuan-Omni environment has the real one)."""

import json


def dumps(obj, ensure_ascii=True, **kwargs):
    return json.dumps(obj, ensure_ascii=ensure_ascii)
