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


#: x86 microarchitectures by vendor, family and model range (/proc/cpuinfo's ``cpu family`` and
#: ``model``): a VM's model name often hides the generation ("AMD EPYC", "Intel(R) Xeon(R)
#: Processor"), and one name's generations time differently (Zen 3 and Zen 4 train about 1.6x apart)
_GENERATIONS: tuple[tuple[str, int, range, str], ...] = (
    ("AuthenticAMD", 0x17, range(0x00, 0x30), "Zen or Zen+"),
    ("AuthenticAMD", 0x17, range(0x30, 0x100), "Zen 2"),
    ("AuthenticAMD", 0x19, range(0x00, 0x10), "Zen 3"),
    ("AuthenticAMD", 0x19, range(0x10, 0x20), "Zen 4"),
    ("AuthenticAMD", 0x19, range(0x20, 0x60), "Zen 3"),
    ("AuthenticAMD", 0x19, range(0x60, 0x80), "Zen 4"),
    ("AuthenticAMD", 0x19, range(0xA0, 0xB0), "Zen 4"),
    ("AuthenticAMD", 0x1A, range(0x00, 0x100), "Zen 5"),
    ("GenuineIntel", 6, range(0x55, 0x56), "Skylake-SP or Cascade Lake"),
    ("GenuineIntel", 6, range(0x6A, 0x6D), "Ice Lake-SP"),
    ("GenuineIntel", 6, range(0x8F, 0x90), "Sapphire Rapids"),
    ("GenuineIntel", 6, range(0xAD, 0xAF), "Granite Rapids"),
    ("GenuineIntel", 6, range(0xCF, 0xD0), "Emerald Rapids"),
)


def cpu_model(cpuinfo: str | None = None) -> str:
    """The CPU's marketing name from /proc/cpuinfo (Linux), with its family and model and, where
    known, its microarchitecture in brackets (``AMD EPYC [Zen 3; family 25, model 1]``: the
    name goes into parentheses on the pages, "on CPU (...)"); elsewhere
    ``platform.processor()``. ``cpuinfo``: that file's text (default: read it)."""
    import platform

    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            if fields:  # the first processor's block is over
                break
            continue
        fields.setdefault(key.strip().lower(), value.strip())
    name = fields.get("model name")
    if not name:
        return platform.processor() or platform.machine() or "unknown CPU"
    try:
        family, model = int(fields["cpu family"]), int(fields["model"])
    except (KeyError, ValueError):
        return name
    generation = next(
        (
            what
            for vendor, fam, models, what in _GENERATIONS
            if vendor == fields.get("vendor_id") and fam == family and model in models
        ),
        None,
    )
    where = f"family {family}, model {model}"
    return f"{name} [{generation}; {where}]" if generation else f"{name} [{where}]"


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
