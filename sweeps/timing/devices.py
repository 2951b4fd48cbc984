"""Where a timed computation runs: the torch device named on a command line, and the CPUs a timing
process is pinned to. Shared by the timing stage (:mod:`sweeps.timing`) and the benchmark scripts
(``benchmarks/``).

Standard library only at import (torch is imported when a device is resolved): the pinned timing
child (:mod:`sweeps.timing.child`) pins itself with :func:`pin` before torch starts any thread.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def resolve_device(name: str | torch.device) -> torch.device:
    """``cpu`` or ``cuda[:N]`` as a torch device; ValueError, naming the fix, for an unknown name or
    a CUDA device torch cannot see."""
    import torch

    try:
        device = torch.device(name)
    except RuntimeError:
        raise ValueError(f"unknown device {name!r}; use cpu or cuda[:N]") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!s} asked for, but torch sees no CUDA device; use cpu")
    return device


def cpu_model() -> str:
    """The CPU's marketing name from /proc/cpuinfo (Linux), else ``platform.processor()``."""
    import platform

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def device_name(device: str | torch.device) -> str:
    """What a timing ran on, by name: the GPU's (``NVIDIA H200``) or the CPU's model."""
    import torch

    device = torch.device(device)
    return torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model()


def highest_cpus(count: int, allowed: Iterable[int] | None = None) -> list[int]:
    """``count`` CPUs to pin a timing process to: the highest-numbered of ``allowed`` (default: this
    process's), away from CPU 0 where interrupts and system daemons tend to run. An unpinned
    single-threaded run migrates between cores and on a small VM lands in one of two speeds per
    process. ValueError when fewer than ``count`` are allowed."""
    pool = sorted(os.sched_getaffinity(0) if allowed is None else allowed)
    if count > len(pool):
        raise ValueError(f"threads={count} but only {len(pool)} CPU(s) are available here")
    return pool[-count:]


def pin(cpus: Iterable[int]) -> list[int]:
    """Pin the calling thread (and every thread it starts from now on) to ``cpus``; returns them sorted."""
    chosen = sorted(cpus)
    os.sched_setaffinity(0, set(chosen))
    return chosen


@contextmanager
def pinned(cpus: Iterable[int]) -> Iterator[list[int]]:
    """:func:`pin` for the block, the previous CPU affinity restored after it (so a caller, such as a
    test process that goes on to start Ray, is not left on one core)."""
    saved = os.sched_getaffinity(0)
    try:
        yield pin(cpus)
    finally:
        os.sched_setaffinity(0, saved)


def run_child(
    module: str,
    request: Mapping[str, Any],
    prefix: str,
    extra_env: Mapping[str, str] | None = None,
) -> tuple[int, list[str], str]:
    """``python -m module`` in a fresh process (this checkout on its PYTHONPATH), ``request`` as
    JSON on its stdin (the child pins itself to the CPUs the request names, as
    :mod:`sweeps.timing.child` does), ``extra_env`` added to its environment. Returns its exit code, the rest of every stdout line that
    starts with ``prefix``, and the last line of its stderr ("no output" when it has none)."""
    root = str(Path(__file__).resolve().parents[2])  # sweeps/, lightning_modules/, datamodules/
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])),
        **(extra_env or {}),
    }
    done = subprocess.run(
        [sys.executable, "-m", module],
        input=json.dumps(request, default=str),
        capture_output=True,
        text=True,
        env=env,
    )
    found = [ln[len(prefix) :] for ln in done.stdout.splitlines() if ln.startswith(prefix)]
    errors = [ln for ln in done.stderr.strip().splitlines() if ln.strip()]
    return done.returncode, found, errors[-1] if errors else "no output"
