"""The offline LLM of the `bench` extra: parts found without configuration, joined once into the cache.
(benchmarks/real_model_e2e.py runs it on a handful of demo items in tests/test_benchmarks.py.)"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from cs3_tasks.build import offline_llm

REPO = Path(__file__).resolve().parents[1]


def _fake_parts(root: Path, blobs: list[bytes]) -> offline_llm.SplitModel:
    for i, blob in enumerate(blobs, start=1):
        data = root / f"fake_llm_part{i}" / "data"
        data.mkdir(parents=True)
        (data.parent / "__init__.py").write_text("")
        (data / f"part{i:02d}.bin").write_bytes(blob)
    return offline_llm.SplitModel(
        name="fake-llm",
        file_name="fake.gguf",
        packages=tuple(f"fake_llm_part{i}" for i in range(1, len(blobs) + 1)),
        part_files=tuple(f"part{i:02d}.bin" for i in range(1, len(blobs) + 1)),
        size=sum(len(b) for b in blobs),
        description="fake",
    )


def test_parts_are_joined_once_in_order(tmp_path, monkeypatch):
    monkeypatch.setenv("CS3_BENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    model = _fake_parts(tmp_path / "site", [b"GGUF-one-", b"two-", b"three"])
    monkeypatch.setitem(offline_llm.OFFLINE_LLMS, "fake", model)

    path = offline_llm.offline_llm("fake")
    assert path == tmp_path / "cache" / "models" / "fake-llm" / "fake.gguf"
    assert path.read_bytes() == b"GGUF-one-two-three"
    stamp = path.stat().st_mtime_ns
    assert offline_llm.offline_llm("fake") == path and path.stat().st_mtime_ns == stamp  # not joined again
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


def test_the_checkpoint_is_converted_once_and_appears_complete(tmp_path, monkeypatch):
    monkeypatch.setenv("CS3_BENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setitem(offline_llm.OFFLINE_LLMS, "fake", _fake_parts(tmp_path / "site", [b"GGUF", b"!"]))
    conversions = []

    def fake_convert(gguf: Path, out_dir: Path, loaded=None) -> None:
        conversions.append(gguf.read_bytes())
        (out_dir / "model.safetensors").write_bytes(b"weights")
        if len(conversions) == 1:
            raise KeyboardInterrupt  # killed half-way: nothing may look converted

    monkeypatch.setattr(offline_llm, "convert_gguf", fake_convert)
    with pytest.raises(KeyboardInterrupt):
        offline_llm.offline_llm_checkpoint("fake")
    models = tmp_path / "cache" / "models" / "fake-llm"
    assert sorted(p.name for p in models.iterdir()) == ["fake.gguf"]  # no half checkpoint, no staging left
    checkpoint = offline_llm.offline_llm_checkpoint("fake")
    assert checkpoint == models / "float32" and (checkpoint / "model.safetensors").read_bytes() == b"weights"
    assert offline_llm.offline_llm_model_args("fake") == f"pretrained={checkpoint}"
    assert conversions == [b"GGUF!", b"GGUF!"]  # converted again only after the killed attempt


def test_a_stale_join_is_replaced(tmp_path, monkeypatch):
    monkeypatch.setenv("CS3_BENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    model = _fake_parts(tmp_path / "site", [b"abc", b"def"])
    monkeypatch.setitem(offline_llm.OFFLINE_LLMS, "fake", model)
    target = tmp_path / "cache" / "models" / "fake-llm" / "fake.gguf"
    target.parent.mkdir(parents=True)
    target.write_bytes(b"ab")  # a join killed half-way by an older version
    assert offline_llm.offline_llm("fake").read_bytes() == b"abcdef"


def test_missing_or_wrong_parts_mean_not_installed(tmp_path, monkeypatch):
    monkeypatch.setenv("CS3_BENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    model = _fake_parts(tmp_path / "site", [b"abc", b"def"])
    missing = replace(
        model, packages=(*model.packages, "fake_llm_part_absent"), part_files=(*model.part_files, "x")
    )
    monkeypatch.setitem(offline_llm.OFFLINE_LLMS, "missing", missing)
    monkeypatch.setitem(offline_llm.OFFLINE_LLMS, "short", replace(model, size=99))
    assert offline_llm.offline_llm("missing") is None
    assert offline_llm.offline_llm("short") is None
