"""A sweep stopped from outside: SIGTERM (a scheduler preempting the job, ``scancel``, a spot
node's notice) or SIGUSR1 (SLURM's warning before the time limit, ``--signal=B:USR1@N``).

The launcher stops then as on Ctrl-C, through Ray Tune's own SIGINT handling: no trial starts,
the running ones stop at their last report's checkpoint, the experiment state is saved. What is
finished is written to results.csv and results.md, the unfinished trials with the status
``preempted`` (not failed, not counted against ``failure.max_failures``), and the launcher exits
with :data:`EXIT_PREEMPTED`, so a batch script knows to requeue the job and ``--resume``.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType

#: the launcher's exit status after a preemption (BSD's EX_TEMPFAIL: "try again later")
EXIT_PREEMPTED = 75
#: the signals that mean "you are being preempted", where the platform has them
SIGNAL_NAMES = ("SIGTERM", "SIGUSR1")


_received: str | None = None


def received() -> str | None:
    """The signal that is stopping the sweep in this process (the driver), or None."""
    return _received


class Preemption:
    """While active, SIGTERM and SIGUSR1 stop the sweep as Ctrl-C does; :attr:`signal` names the
    first one received (None: none came). Later ones are ignored: the sweep is already stopping,
    and a second SIGINT would make Tune stop without saving."""

    def __init__(self) -> None:
        self.signal: str | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> Preemption:
        global _received
        _received = None
        self.arm()
        return self

    def arm(self) -> None:
        """Take the signals (again). ``ray.init`` installs its own SIGTERM handler (exit at once,
        the trials killed with the driver, their W&B runs left running), so the launcher calls
        this once more after joining Ray."""
        for name in SIGNAL_NAMES:
            number = getattr(signal, name, None)
            if number is not None:
                previous = signal.signal(number, self._stop)
                self._previous.setdefault(number, previous)  # restored on exit: the first one

    def __exit__(self, *exc: object) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)  # type: ignore[arg-type]
        self._previous.clear()

    def _stop(self, number: int, frame: FrameType | None) -> None:
        if self.signal is not None:
            return
        global _received
        self.signal = _received = signal.Signals(number).name
        print(
            f"\n{self.signal}: preempted; stopping the trials at their last checkpoint and writing "
            "the results (the job's requeue, or --resume, continues the sweep)",
            file=sys.stderr,
            flush=True,
        )
        os.kill(os.getpid(), signal.SIGINT)  # Tune's handler: a graceful stop, state saved
