"""Session-wide test settings.

Every test session gets its own cs3-bench cache (ASR transcripts, judge replies, joined offline model), so the
suite measures cold behaviour and never reads a developer's ~/.cache/cs3-bench. Set CS3_BENCH_CACHE yourself to
reuse a cache between runs.
"""

from __future__ import annotations

import os
import tempfile


def pytest_configure(config):
    if not os.environ.get("CS3_BENCH_CACHE"):
        os.environ["CS3_BENCH_CACHE"] = tempfile.mkdtemp(prefix="cs3-bench-test-cache-")
    # Never reach for the network: the Hub and model hosts are not reachable on CI machines.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
