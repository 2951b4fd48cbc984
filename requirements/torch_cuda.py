"""After `make venv` on a node with an NVIDIA driver: the venv's torch can use the GPU, or the one
command that installs a build that can (or, where the installed build is one the driver runs, what
to check: the GPU is then out of this process's reach, and no reinstall brings it).

    .venv/bin/python requirements/torch_cuda.py          # exit 0: it can; 2: it cannot (says why)

On such a node the Makefile takes torch from the public index, whose Linux wheel is a CUDA build
(torch 2.13.0: CUDA 13.0, which needs a driver for CUDA 13.0 or newer). A driver for an older CUDA
cannot run it: this names PyTorch's index of the newest CUDA build the driver runs (from the CUDA
version ``nvidia-smi`` reports) and the command that installs it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

#: the CUDA builds PyTorch's indexes serve for torch 2.13 (https://download.pytorch.org/whl/cuXYZ)
CUDA_BUILDS = ("12.6", "12.8", "13.0")
INDEX = "https://download.pytorch.org/whl/cu{}"


def driver_cuda() -> str | None:
    """The newest CUDA version the node's driver runs (``nvidia-smi``'s header), or None."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"CUDA Version:\s*(\d+\.\d+)", out)
    return m.group(1) if m else None


def _version(cuda: str) -> tuple[int, ...]:
    return tuple(int(x) for x in cuda.split("."))


def build_for(cuda: str | None) -> str | None:
    """The newest CUDA build of :data:`CUDA_BUILDS` a driver for ``cuda`` runs, or None."""
    if cuda is None:
        return None
    fitting = [b for b in CUDA_BUILDS if _version(b) <= _version(cuda)]
    return fitting[-1] if fitting else None


def advice(version: str, built_for: str | None, cuda: str | None) -> str:
    """The line that says why torch cannot use the GPU, and the command that fixes it; where the
    driver runs the installed build already, what to check instead (no reinstall fixes that)."""
    build = build_for(cuda)
    why = (
        f"torch {version} is a CPU build"
        if built_for is None
        else f"torch {version} is built for CUDA {built_for}"
    )
    driver = f"the driver runs CUDA {cuda} at most" if cuda else "nvidia-smi names no CUDA version"
    if built_for is not None and cuda is not None and _version(built_for) <= _version(cuda):
        return (
            f"error: torch {version} is built for CUDA {built_for}, which the NVIDIA driver here "
            f"runs (CUDA {cuda} at most): the build is right, but torch cannot reach the GPU from "
            "this process (torch.cuda.is_available() is False); check CUDA_VISIBLE_DEVICES (empty "
            "or a wrong index hides the GPU), that you may open /dev/nvidia* (a container needs "
            "the GPU passed in), and `nvidia-smi` (the GPU listed, not busy in exclusive-process "
            "mode)"
        )
    if build is None:
        return (
            f"error: an NVIDIA driver is here, but {why} and {driver}: no CUDA build of torch 2.13 "
            f"runs on it (the oldest is CUDA {CUDA_BUILDS[0]}); update the driver, or train on the "
            "CPU: rm -rf .venv && make venv TORCH_INDEX=https://download.pytorch.org/whl/cpu"
        )
    return (
        f"error: an NVIDIA driver is here, but {why} and {driver}. Install the CUDA {build} build "
        f"the driver runs: rm -rf .venv && make venv TORCH_INDEX={INDEX.format(build.replace('.', ''))}"
    )


def main() -> int:
    import torch

    if torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
        print(f"torch {torch.__version__} uses the GPU ({name}, CUDA {torch.version.cuda})")
        return 0
    print(advice(torch.__version__, torch.version.cuda, driver_cuda()), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
