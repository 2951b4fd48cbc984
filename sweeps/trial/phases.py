"""Where a trial's wall time goes: named phases timed inside the trial process, written beside its
result.json as ``phases.json`` when the trial ends (read by ``benchmarks/sweep_overhead.py``).

Standard library only. One trial per process at a time (Tune runs one trainable per actor), so
the record is process-global; :func:`start` clears it for the next trial of a reused actor.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sweeps.layout import PHASES_FILE

_record: dict = {"phases": {}}


def start() -> None:
    """A new trial begins in this process: its entry time, and how long ago the process started
    (the worker's start-up: Ray's worker, the imports of torch, Lightning and the trainable)."""
    _record.clear()
    _record.update(phases={}, entered=time.time(), process_age_s=_process_age())


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Add the time spent in the block to phase ``name`` (phases may repeat: the reports)."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        add(name, time.perf_counter() - t0)


def add(name: str, seconds: float) -> None:
    phases = _record.setdefault("phases", {})
    phases[name] = phases.get(name, 0.0) + seconds


def dump(folder: str | None) -> None:
    """Write the record to ``folder/phases.json`` (nothing when the folder is not a local one)."""
    if not folder or not Path(folder).is_dir():
        return
    record = dict(_record, left=time.time())
    try:
        Path(folder, PHASES_FILE).write_text(json.dumps(record))
    except OSError:
        pass  # a measurement must never fail a trial


def _process_age() -> float | None:
    """Seconds since this process started (Linux: /proc), or None elsewhere."""
    try:
        start_ticks = int(
            Path(f"/proc/{os.getpid()}/stat").read_text().rsplit(")", 1)[1].split()[19]
        )
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
