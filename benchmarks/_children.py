"""A benchmark's child process (a launch, a benchmark phase) that ends when the benchmark is ended.

A bare ``subprocess.run`` leaves its child running when the benchmark alone gets the signal
(``kill PID``, a job runner, ``timeout``): the child, reparented to PID 1, goes on training on the
machine with its Ray instance. :func:`run_child` starts the child in its own session and passes
SIGTERM, SIGINT, SIGHUP and SIGUSR1 on to it (those this process does not ignore), waits for it to
stop, at most ``grace`` seconds, then kills its process group, and then lets the signal act on this
process as it would have without the child (the handler it had before: the default ends the
process, Python's SIGINT handler raises KeyboardInterrupt, a handler of the script's own runs).

The child's own session keeps Ctrl-C in a terminal from reaching it twice (once from the terminal,
once passed on): a second SIGINT stops a Tune run without saving its state.

Import it as the scripts import their other siblings (``from _children import run_child``, after
putting this folder on ``sys.path``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

#: the signals passed on to the child (where the platform has them)
PASSED = tuple(
    getattr(signal, name)
    for name in ("SIGTERM", "SIGINT", "SIGHUP", "SIGUSR1")
    if hasattr(signal, name)
)
#: seconds the child gets to stop after a signal (or its timeout) before its group is killed
GRACE_S = 30.0
#: how often the wait looks at the clock
POLL_S = 0.5


class Ran(subprocess.CompletedProcess):
    """``subprocess.CompletedProcess``, and whether the child ran past its ``timeout``."""

    timed_out: bool = False


def run_child(
    cmd: Sequence[str],
    *,
    grace: float = GRACE_S,
    timeout: float | None = None,
    signal_group: bool = False,
    **popen_kwargs: Any,
) -> Ran:
    """Run ``cmd`` as ``subprocess.run(cmd, **popen_kwargs)`` does (``capture_output``, ``text``,
    ``stdout=subprocess.PIPE`` and the like work; ``input`` and ``check`` are not taken), in its own
    session, and end it with this process (see the module's docstring).

    ``timeout``: past it the child gets SIGTERM, then ``grace`` seconds, then SIGKILL on its
    group (``Ran.timed_out`` says so). ``signal_group``: SIGTERM and the passed-on signals go to
    the child's whole process group (a benchmark with worker processes), not to the child alone
    (a launch: its Ray processes must not be signalled before it has stopped its trials)."""
    popen_kwargs["start_new_session"] = True
    if popen_kwargs.pop("capture_output", False):
        popen_kwargs["stdout"] = popen_kwargs["stderr"] = subprocess.PIPE
    proc: subprocess.Popen | None = None
    pending: list[int] = []  # signals that came before the child existed
    received: list[int] = []

    def send(number: int) -> None:
        assert proc is not None
        try:
            if signal_group:
                os.killpg(proc.pid, number)
            elif proc.poll() is None:
                proc.send_signal(number)
        except ProcessLookupError:
            pass

    def pass_on(number: int, _frame: object) -> None:
        received.append(number)
        if proc is None:
            pending.append(number)
        else:
            send(number)

    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for number in PASSED:
            handler = signal.getsignal(number)
            if handler is not signal.SIG_IGN and handler is not None:  # nohup's SIGHUP stays off
                previous[number] = signal.signal(number, pass_on)
    timed_out = False
    out = err = None
    try:
        proc = subprocess.Popen(list(cmd), **popen_kwargs)
        while pending:
            send(pending.pop(0))
        deadline = None if timeout is None else time.monotonic() + timeout
        kill_at: float | None = None
        while True:
            now = time.monotonic()
            if kill_at is None and deadline is not None and now >= deadline:
                timed_out = True
                send(signal.SIGTERM)
            if kill_at is None and (received or timed_out):
                kill_at = now + grace
            if kill_at is not None and now >= kill_at:
                _kill_group(proc)
            try:
                out, err = proc.communicate(timeout=POLL_S)
                break
            except subprocess.TimeoutExpired:
                continue
    finally:
        if proc is not None and proc.poll() is None:  # an error here: the child goes too
            _kill_group(proc)
            proc.wait()
        for number, handler in previous.items():
            signal.signal(number, handler)
    if received:
        name = signal.Signals(received[0]).name
        print(
            f"{name}: passed on to {_name(cmd)} (pid {proc.pid}), which ended with exit status "
            f"{proc.returncode}",
            file=sys.stderr,
            flush=True,
        )
        signal.raise_signal(received[0])  # now as it would have acted on this process
    done = Ran(proc.args, proc.returncode, out, err)
    done.timed_out = timed_out
    return done


def _name(cmd: Sequence[str]) -> str:
    """The script a command runs (``launch.py``), or its program."""
    scripts = [os.path.basename(str(part)) for part in cmd if str(part).endswith(".py")]
    return scripts[0] if scripts else os.path.basename(str(cmd[0]))


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
