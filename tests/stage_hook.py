"""Test-only: send a launcher a signal at a chosen point of a stage, instead of racing it from outside.

The launcher tells the functions named in ``SWEEPS_STAGE_CALLBACKS`` (``module.function``) of each
stage event (:mod:`sweeps.stages.launch_state`): a stage beginning (``training``, ``timing``,
``heldout``, ``reports`` ...), the timing or held-out stage starting work on its next models
(``timing:start``: a batch, ``heldout:start``: one evaluation) and each model a stage finished
(``timing:done``, ``heldout:done``, told once its record is written). A test that runs the
launcher with

    SWEEPS_STAGE_CALLBACKS=stage_hook.signal_at  STAGE_SIGNAL_AT=timing:done@1
    [STAGE_SIGNAL=SIGTERM]  STAGE_RECORD=<a file>

gets a real SIGTERM to the launcher's process the moment the first model's timing record is
written (``EVENT@N``: the N-th time the event is told; ``EVENT`` alone: the first), at the same
point on a fast machine or a loaded one. The hook writes the event and the time it fired
(``time.time()``) to ``STAGE_RECORD`` first.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from pathlib import Path

ENV_AT = "STAGE_SIGNAL_AT"
ENV_SIGNAL = "STAGE_SIGNAL"
ENV_RECORD = "STAGE_RECORD"

_seen: Counter = Counter()
_fired: set[str] = set()


def signal_at(event: str) -> None:
    at = os.environ.get(ENV_AT, "")
    target, _, count = at.partition("@")
    _seen[event] += 1
    if event != target or _seen[event] != int(count or 1) or at in _fired:
        return
    _fired.add(at)
    name = os.environ.get(ENV_SIGNAL, "SIGTERM")
    Path(os.environ[ENV_RECORD]).write_text(
        json.dumps({"event": event, "signal": name, "at": time.time()})
    )
    os.kill(os.getpid(), getattr(signal, name))


def hook_env(record: Path, at: str, signal_name: str = "SIGTERM") -> dict[str, str]:
    """The environment under which a launcher in this process gets ``signal_name`` at ``at``.
    Each launcher run starts counting afresh (:func:`reset`)."""
    reset()
    return {
        "SWEEPS_STAGE_CALLBACKS": "stage_hook.signal_at",
        ENV_AT: at,
        ENV_SIGNAL: signal_name,
        ENV_RECORD: str(record),
    }


def reset() -> None:
    _seen.clear()
    _fired.clear()


def timing_processes() -> list[int]:
    """Live timing processes (``python -m sweeps.timing.child``) below this process (its local
    Ray's workers start them), zombies left out: they have ended."""
    parents, commands = {}, {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        state, parent = stat[stat.rindex(")") + 2 :].split()[:2]
        if state != "Z":
            parents[int(entry.name)], commands[int(entry.name)] = int(parent), command
    me, found = os.getpid(), []
    for pid, command in commands.items():
        up = pid
        while up in parents and up != me:
            up = parents[up]
        if up == me and "sweeps.timing.child" in command:
            found.append(pid)
    return found
