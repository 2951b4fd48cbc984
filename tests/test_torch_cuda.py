"""On a node with an NVIDIA driver `make venv` takes a CUDA build of torch and checks that it can
use the GPU, or stops with the one command that installs a build the driver runs
(requirements/torch_cuda.py). Here with a stand-in `nvidia-smi` on the PATH: no GPU is needed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "requirements"))
import torch_cuda  # noqa: E402

SMI = """#!/bin/sh
if [ "$1" = "-L" ]; then echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)"; exit 0; fi
echo "| NVIDIA-SMI 560.35.03   Driver Version: 560.35.03   CUDA Version: {cuda}     |"
"""


@pytest.fixture
def driver(tmp_path, monkeypatch):
    def install(cuda: str) -> Path:
        smi = tmp_path / "nvidia-smi"
        smi.write_text(SMI.format(cuda=cuda))
        smi.chmod(0o755)
        monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
        return tmp_path

    return install


def test_the_newest_cuda_build_the_driver_runs_is_named(driver):
    driver("12.9")
    assert torch_cuda.driver_cuda() == "12.9"
    assert torch_cuda.build_for("12.9") == "12.8"
    assert torch_cuda.build_for("13.0") == "13.0" and torch_cuda.build_for("12.4") is None
    line = torch_cuda.advice("2.13.0+cu130", "13.0", "12.9")
    assert "built for CUDA 13.0 and the driver runs CUDA 12.9 at most" in line
    assert line.endswith(
        "rm -rf .venv && make venv TORCH_INDEX=https://download.pytorch.org/whl/cu128"
    )
    assert "update the driver" in torch_cuda.advice("2.13.0", "13.0", "11.8")
    assert "is a CPU build" in torch_cuda.advice("2.13.0+cpu", None, "13.0")


def test_a_build_the_driver_runs_is_not_reinstalled_when_the_gpu_is_out_of_reach():
    """torch.cuda.is_available() False with a build the driver runs (CUDA_VISIBLE_DEVICES empty,
    no device permission, a container without the device): reinstalling it would fail alike, so
    the line says what to check."""
    for built_for, cuda in (("13.0", "13.0"), ("12.8", "13.0"), ("12.6", "12.9")):
        line = torch_cuda.advice(f"2.13.0+cu{built_for.replace('.', '')}", built_for, cuda)
        assert "make venv" not in line and "the build is right" in line, line
        assert "CUDA_VISIBLE_DEVICES" in line and "`nvidia-smi`" in line
    assert torch_cuda.advice("2.13.0+cu130", "13.0", "13.0") == (
        "error: torch 2.13.0+cu130 is built for CUDA 13.0, which the NVIDIA driver here runs "
        "(CUDA 13.0 at most): the build is right, but torch cannot reach the GPU from this "
        "process (torch.cuda.is_available() is False); check CUDA_VISIBLE_DEVICES (empty or a "
        "wrong index hides the GPU), that you may open /dev/nvidia* (a container needs the GPU "
        "passed in), and `nvidia-smi` (the GPU listed, not busy in exclusive-process mode)"
    )


@pytest.mark.train  # a fresh process that imports torch, 2 s
def test_this_machine_s_cpu_torch_is_refused_where_a_driver_is(driver):
    """This machine's torch is a CPU build: with a driver on the PATH the check stops, naming the
    command; the stand-in driver runs CUDA 13.0, so the public index's build is the one."""
    path = driver("13.0")
    env = {**os.environ, "PATH": f"{path}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        [sys.executable, str(ROOT / "requirements" / "torch_cuda.py")],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    assert "TORCH_INDEX=https://download.pytorch.org/whl/cu130" in done.stderr


def test_make_venv_takes_the_public_index_s_cuda_build_where_a_driver_is(driver):
    """With a GPU listed, the Makefile adds no CPU index and runs the CUDA check after the
    install; without one, the CPU index (on Linux x86-64) and no check."""
    path = driver("13.0")
    env = {**os.environ, "PATH": f"{path}{os.pathsep}{os.environ['PATH']}"}
    plan = subprocess.run(
        ["make", "-n", "-B", "venv", "VENV=/tmp/no-such-venv"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    ).stdout  # fmt: skip
    assert "requirements/torch_cuda.py" in plan and "whl/cpu" not in plan
    bare = {**os.environ, "PATH": os.defpath}
    plan = subprocess.run(
        ["make", "-n", "-B", "venv", "VENV=/tmp/no-such-venv"],
        cwd=ROOT, env=bare, capture_output=True, text=True, timeout=60,
    ).stdout  # fmt: skip
    assert "requirements/torch_cuda.py" not in plan
