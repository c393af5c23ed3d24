"""A GPU the ASR engine cannot use, on a machine without one: the simulated CUDA 13 machine
(tests/fakes/cuda13, where CTranslate2 counts a GPU whose first encode fails with "Library libcublas.so.12 is
not found or cannot be loaded", as measured on one). The default stays on the CPU (README's numbers:
tests/test_reproducible.py runs the demo there); a GPU asked for is tried once before any work and refused in
one line naming the library and the ways out, exit 2, nothing written: through ``cs3-bench score``, ``demo``,
$CS3_ASR_DEVICE, lm_eval's ``--metadata`` and every rank of a launch. Also the parts that need no machine: the
CUDA libraries named by package, pip's library folders, a machine fault mid-run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cs3_tasks.asr import AsrConfig, gpu, transcribe
from cs3_tasks.asr import process as asr_process
from cs3_tasks.cli import evaluate

REPO = Path(__file__).resolve().parents[1]
SIMULATED_CUDA13 = REPO / "tests" / "fakes" / "cuda13"
STRONG = evaluate.DEMO_RESPONSES / "demo-strong"


def simulated(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """``python ARGS`` on the simulated CUDA 13 machine."""
    environ = {k: v for k, v in os.environ.items() if k != "CS3_ASR_DEVICE"}
    environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(SIMULATED_CUDA13), str(REPO), os.environ.get("PYTHONPATH")) if p
    )
    environ.update(env)
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=environ, capture_output=True, text=True, timeout=600
    )


def assert_one_cublas_refusal(result: subprocess.CompletedProcess, *more: str) -> str:
    assert result.returncode == 2, (result.returncode, result.stderr[-3000:])
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr[-3000:]
    for needle in ("libcublas.so.12", "CUDA 12", "nvidia-cublas-cu12", "transformers", *more):
        assert needle in errors[0], (needle, errors[0])
    assert "asr_error" not in result.stderr and "batched ASR failed" not in result.stderr
    return errors[0]


def test_the_simulated_machine_counts_a_gpu_and_the_default_stays_on_the_cpu(tmp_path):
    code = (
        "from cs3_tasks.asr import AsrConfig\n"
        "from cs3_tasks.asr.device import asr_device, cuda_device_count\n"
        "from cs3_tasks.asr.device import default_device_note\n"
        "print(cuda_device_count(), asr_device(), asr_device('cuda'), bool(default_device_note(AsrConfig())))"
    )
    result = simulated("-c", code, cwd=tmp_path)
    assert result.stdout.split() == ["1", "cpu", "cuda", "True"], result.stderr[-2000:]


@pytest.mark.parametrize("how", ["option", "environment"])
def test_score_on_a_gpu_that_cannot_run_is_one_line_before_any_work(tmp_path, how):
    out = tmp_path / "results"
    args = ["-m", "cs3_tasks.cli", "score", "--outputs", str(STRONG), "--set", "knowledge", "--out", str(out)]
    args += ["--dataset", "demo", "--no-judge"]
    if how == "option":
        result = simulated(*args, "--asr-device", "cuda", cwd=tmp_path)
    else:
        result = simulated(*args, cwd=tmp_path, CS3_ASR_DEVICE="cuda")
    assert_one_cublas_refusal(result, "--asr-device cpu")
    assert not out.exists()  # nothing written


def test_the_demo_on_a_gpu_that_cannot_run_is_one_line_and_writes_nothing(tmp_path):
    result = simulated("-m", "cs3_tasks.cli", "demo", "--asr-device", "cuda", cwd=tmp_path)
    assert_one_cublas_refusal(result)
    assert list(tmp_path.iterdir()) == []  # no ./cs3_demo


@pytest.mark.slow
def test_lm_eval_and_a_launch_on_a_gpu_that_cannot_run_is_one_line_in_metadata_words(tmp_path):
    from test_data_parallel import _free_port

    run = [
        "run",
        "--model",
        "cs3-precomputed",
        "--model_args",
        f"outputs={STRONG}",
        "--tasks",
        "cs3_knowledge",
    ]
    run += ["--metadata", json.dumps({"dataset": "demo", "judge": "none", "asr_device": "cuda"})]
    single = simulated("-m", "lm_eval", *run, "--output_path", str(tmp_path / "one"), cwd=tmp_path)
    line = assert_one_cublas_refusal(single, '"asr_device"')
    assert "--asr-device" not in line and not (tmp_path / "one").exists()
    launcher = ["-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", str(_free_port())]
    launched = simulated(
        *launcher,
        "-m",
        "lm_eval",
        *run,
        "--output_path",
        str(tmp_path / "two"),
        cwd=tmp_path,
        OMP_NUM_THREADS="1",
    )
    assert_one_cublas_refusal(launched, '"asr_device"')  # every rank refused; the first one said why
    assert not (tmp_path / "two").exists()


def test_a_machine_fault_mid_run_stops_the_run_instead_of_failing_each_clip(tmp_path, monkeypatch):
    import numpy as np

    class BrokenGpu:
        def transcribe(self, audio, language):
            raise RuntimeError("Library libcublas.so.12 is not found or cannot be loaded")

        def transcribe_many(self, audios, language):
            raise RuntimeError("Library libcublas.so.12 is not found or cannot be loaded")

    monkeypatch.setenv("CS3_BENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(transcribe, "cached_runner", lambda *args: BrokenGpu())
    clips = [(0.1 * np.sin(np.arange(16_000 * k) / 9)).astype(np.float32) for k in (1, 2)]
    with pytest.raises(gpu.AsrDeviceError, match="not on a clip"):
        transcribe.transcribe_batch(clips, asr=AsrConfig(model="fake-model"), progress=False)
    # an ordinary clip failure is still the clip's own
    assert not gpu.is_machine_fault(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))


def test_the_cuda_libraries_are_named_by_package_never_by_path(monkeypatch, tmp_path):
    pip_lib = tmp_path / "site-packages" / "nvidia" / "cublas" / "lib"
    monkeypatch.setattr(gpu, "_pip_library_owners", lambda: {str(pip_lib): "nvidia-cublas-cu12 12.4.5.8"})
    maps = "\n".join(
        [
            f"7f0000000000-7f0000001000 r-xp 00000000 08:01 1 {pip_lib}/libcublas.so.12",
            f"7f0000002000-7f0000003000 r--p 00001000 08:01 1 {pip_lib}/libcublas.so.12",
            "7f0000004000-7f0000005000 r-xp 00000000 08:01 2 /usr/lib/x86_64-linux-gnu/libcudnn.so.9.1.0",
            "7f0000006000-7f0000007000 r-xp 00000000 08:01 3 /usr/lib/x86_64-linux-gnu/libc.so.6",
            "7f0000008000-7f0000009000 rw-p 00000000 00:00 0 [heap]",
        ]
    )
    assert gpu.loaded_cuda_libraries(maps) == {
        "libcublas.so.12": "nvidia-cublas-cu12 12.4.5.8",
        "libcudnn.so.9.1.0": "system",
    }


def test_a_gpu_child_finds_pips_cuda_libraries_without_ld_library_path(monkeypatch):
    monkeypatch.setattr(
        gpu, "pip_cuda_library_dirs", lambda: ["/sp/nvidia/cublas/lib", "/sp/nvidia/cudnn/lib"]
    )
    monkeypatch.delenv(asr_process.IN_PROCESS_ENV, raising=False)
    env = asr_process.child_environment({"LD_LIBRARY_PATH": "/opt/mine", "PATH": "/bin"}, device="cuda:0")
    assert env["LD_LIBRARY_PATH"].split(os.pathsep) == [
        "/sp/nvidia/cublas/lib",
        "/sp/nvidia/cudnn/lib",
        "/opt/mine",
    ]
    assert "GLIBC_TUNABLES" not in env  # CUDA's allocator, not glibc's settings
    cpu = asr_process.child_environment({"PATH": "/bin"}, device="cpu")
    assert "LD_LIBRARY_PATH" not in cpu and "GLIBC_TUNABLES" in cpu
    assert asr_process.runs_in_own_process("cuda:0") == (sys.platform == "linux")
    monkeypatch.setattr(gpu, "pip_cuda_library_dirs", lambda: [])
    assert gpu.library_path_environment({"LD_LIBRARY_PATH": "/opt/mine"}) == {}


def test_the_cascade_asked_for_a_gpu_that_cannot_run_refuses_when_it_loads(tmp_path):
    code = (
        "from cs3_tasks.models.cascade import CascadeLM\n"
        "try:\n"
        "    CascadeLM(llm_base_url='http://127.0.0.1:9', llm_model='m', asr_device='cuda', "
        f"output_dir={str(tmp_path / 'out')!r})\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    result = simulated("-c", code, cwd=tmp_path)
    assert result.stdout.startswith("AsrDeviceError --asr-device cuda: faster-whisper cannot run"), (
        result.stderr
    )
    assert "libcublas.so.12" in result.stdout and not (tmp_path / "out").exists()


def test_pips_cuda_12_libraries_are_found_and_named_by_package(tmp_path):
    """An installed nvidia-cublas-cu12 (a distribution with its RECORD, as pip leaves it): its lib folder goes
    on the GPU child's LD_LIBRARY_PATH, and a library loaded from it is named by package and version."""
    site = tmp_path / "site"
    lib = site / "nvidia" / "cublas" / "lib"
    lib.mkdir(parents=True)
    (lib / "libcublas.so.12").write_bytes(b"")
    info = site / "nvidia_cublas_cu12-12.4.5.8.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: nvidia-cublas-cu12\nVersion: 12.4.5.8\n")
    (info / "RECORD").write_text("nvidia/cublas/lib/libcublas.so.12,,\n")
    code = (
        "import json\n"
        "from cs3_tasks.asr import gpu, process\n"
        "env = process.child_environment({'LD_LIBRARY_PATH': '/opt/mine'}, device='cuda')\n"
        f"maps = '7f00-7f01 r-xp 0 08:01 1 {lib}/libcublas.so.12'\n"
        "print(json.dumps([env['LD_LIBRARY_PATH'], gpu.loaded_cuda_libraries(maps)]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO)])},
        capture_output=True,
        text=True,
        timeout=300,
    )
    path, named = json.loads(result.stdout)
    assert path.split(os.pathsep) == [str(lib), "/opt/mine"], result.stderr
    assert named == {"libcublas.so.12": "nvidia-cublas-cu12 12.4.5.8"}
