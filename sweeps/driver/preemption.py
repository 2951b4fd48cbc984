"""A sweep stopped from outside: SIGTERM (a scheduler preempting the job, ``scancel``, a spot
node's notice), SIGUSR1 (SLURM's warning before the time limit, ``--signal=B:USR1@N``) or Ctrl-C.

Every stage of a launch honours the stop (:mod:`sweeps.stages.pipeline`), each in the way its work
allows, named by :meth:`Preemption.during`:

- ``tune``: the Tune run stops through Ray Tune's own SIGINT handling: no trial starts, the
  running ones stop at their last report's checkpoint, the experiment state is saved. SIGTERM and
  SIGUSR1 become a SIGINT to the launcher.
- ``poll``: a stage that waits on Ray tasks (the timing and held-out stages) or writes the
  reports: the signal only sets :attr:`Preemption.signal` (or :attr:`~Preemption.interrupted`),
  which the stage polls between its steps and answers by ending its running tasks.
- ``raise``: plain work in this process (checks, data preparation, joining Ray): the signal
  raises :class:`StopRequested` where the work is, and the launcher goes on to the reports.

What is finished is written to results.csv and results.md, the unfinished trials with the status
``preempted`` (not failed, not counted against ``failure.max_failures``), and the launcher exits
with :data:`EXIT_PREEMPTED`, so a batch script knows to requeue the job and ``--resume``. A
sweep whose every stage had finished when the signal came exits 0: there is nothing to requeue.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from types import FrameType

#: the launcher's exit status after a preemption (BSD's EX_TEMPFAIL: "try again later")
EXIT_PREEMPTED = 75
#: the launcher's exit status after Ctrl-C
EXIT_INTERRUPTED = 130
#: the signals that mean "you are being preempted", where the platform has them
SIGNAL_NAMES = ("SIGTERM", "SIGUSR1")
#: how a stage takes a stop request (see the module's docstring)
MODES = ("tune", "poll", "raise")


class StopRequested(KeyboardInterrupt):
    """Raised where a ``raise`` stage's work is when a stop request arrives (a KeyboardInterrupt,
    so whatever stops on Ctrl-C stops on it too)."""


_received: str | None = None


def received() -> str | None:
    """The signal that is stopping the sweep in this process (the driver), or None."""
    return _received


_ACTIVE: Preemption | None = None
#: whether the launcher itself stopped the Tune run (a preemption signal, a spent budget), by the
#: SIGINT of :func:`stop_tune`: Tune's "Stop signal received (e.g. via SIGINT/Ctrl+C) ... Press
#: CTRL+C ... to skip" then speaks of a Ctrl-C nobody pressed (:mod:`sweeps.driver.console`)
_launcher_stopped = False


def stop_tune() -> None:
    """Stop the Tune run as Ctrl-C does, through Tune's own SIGINT handler (a graceful stop: no
    trial starts, the running ones stop at their last checkpoint, the state is saved)."""
    global _launcher_stopped
    _launcher_stopped = True
    os.kill(os.getpid(), signal.SIGINT)


def launcher_stopped() -> bool:
    """Whether the Tune run of the launch in progress was stopped by :func:`stop_tune`."""
    return _launcher_stopped


def active() -> Preemption | None:
    """The launch's :class:`Preemption` while one is entered in this process, else None."""
    return _ACTIVE


class Preemption:
    """While active, SIGTERM and SIGUSR1 stop the sweep (:attr:`signal` names the first one
    received; None: none came), and Ctrl-C outside the Tune run sets :attr:`interrupted`. Later
    signals are ignored: the sweep is already stopping, and a second SIGINT would make Tune stop
    without saving."""

    def __init__(self) -> None:
        self.signal: str | None = None
        self.interrupted = False
        self.mode = "raise"
        self._previous: dict[int, object] = {}

    def __enter__(self) -> Preemption:
        global _received, _ACTIVE, _launcher_stopped
        _received, _ACTIVE, _launcher_stopped = None, self, False
        self.arm()
        return self

    def arm(self) -> None:
        """Take the signals (again). ``ray.init`` installs its own SIGTERM handler (exit at once,
        the trials killed with the driver, their W&B runs left running) and a Tune run leaves its
        SIGINT and SIGUSR1 handlers behind after it ends (they then only set an event nobody
        reads), so the launcher calls this after joining Ray and after each Tune run; the Tune
        run's own callback calls it once Tune has installed its handlers
        (:class:`sweeps.driver.budget_clock.BudgetClock`), and SIGINT is then left to Tune."""
        names = SIGNAL_NAMES if self.mode == "tune" else (*SIGNAL_NAMES, "SIGINT")
        for name in names:
            number = getattr(signal, name, None)
            if number is not None:
                previous = signal.signal(number, self._stop)
                self._previous.setdefault(number, previous)  # restored on exit: the first one

    def __exit__(self, *exc: object) -> None:
        global _ACTIVE
        for number, handler in self._previous.items():
            signal.signal(number, handler)  # type: ignore[arg-type]
        self._previous.clear()
        _ACTIVE = None

    @contextlib.contextmanager
    def during(self, mode: str) -> Iterator[None]:
        """Take stop requests in ``mode`` (one of :data:`MODES`) for the block. A request that came
        before a ``raise`` block raises at its start."""
        if mode not in MODES:
            raise ValueError(f"unknown stop mode {mode!r}; one of {', '.join(MODES)}")
        before, self.mode = self.mode, mode
        try:
            self.arm()
            if mode == "raise" and self.requested():
                raise StopRequested
            yield
        finally:
            self.mode = before
            self.arm()  # the handlers a Tune run leaves behind are replaced

    def note(self, name: str) -> bool:
        """Record the preemption signal ``name`` (the first one only: True when it was)."""
        global _received
        if self.signal is not None:
            return False
        self.signal = _received = name
        return True

    def requested(self) -> bool:
        """Whether a signal or Ctrl-C has asked the sweep to stop."""
        return self.signal is not None or self.interrupted

    def _stop(self, number: int, frame: FrameType | None) -> None:
        name = signal.Signals(number).name
        if name == "SIGINT":
            if self.mode == "tune":  # before Tune took SIGINT, or a second Ctrl-C: "stop now"
                self.interrupted = True
                raise KeyboardInterrupt
            if self.requested():
                return
            self.interrupted = True
            print(
                "\ninterrupted (Ctrl-C): stopping the running stage and writing the results",
                file=sys.stderr,
                flush=True,
            )
        else:
            if not self.note(name):
                return
            print(
                f"\n{self.signal}: preempted; stopping the trials at their last checkpoint (or the "
                "stage running after them) and writing the results (the job's requeue, or "
                "--resume, continues the sweep)",
                file=sys.stderr,
                flush=True,
            )
            if self.mode == "tune":
                stop_tune()
                return
        if self.mode == "raise":
            raise StopRequested
