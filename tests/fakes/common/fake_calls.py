"""Shared by the fakes: record official calls, and misbehave on request (crash / hang)."""

import json
import os
import sys
import time


def record(name, **data):
    path = os.environ.get("CS3_FAKE_CALLS")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"call": name, **data}, ensure_ascii=False, default=repr) + "\n")


def misbehave(audio_path):
    """A query named *crash* kills the process mid-run; one named *hang* never returns."""
    name = os.path.basename(str(audio_path))
    if "crash" in name:
        print(f"fake: crashing on {name}", file=sys.stderr, flush=True)
        os._exit(17)
    if "hang" in name:
        time.sleep(3600)


def duration_tokens(audio_path, per_second=25):
    """A stand-in for speech tokens: one per 1/per_second s of the query."""
    import soundfile as sf

    info = sf.info(str(audio_path))
    return [i % 997 for i in range(max(1, int(info.frames / info.samplerate * per_second)))]
