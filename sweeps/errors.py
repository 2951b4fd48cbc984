"""Every exception the sweeps package raises, in one place. Each message is written for the user:
what is wrong, where, and what to do. The modules that raise them import them from here.

- :class:`SpecError`: a sweep file or ``--set`` value is wrong (exit status 2, before Ray starts).
- :class:`AssignmentError`: one bad ``KEY=VALUE`` item on a command line.
- :class:`LaunchError`: a problem outside the spec: cluster, credentials, storage (exit status 2).
- :class:`StorageFault`: a trial stopped because its storage cannot be written.
- :class:`TimingError`: bad input to the decode-timing measurement, stage or command.
- :class:`RunLogError`: a W&B offline run log that cannot be read to its end.
- :class:`ChaosError`: the failure a sweep's ``chaos`` block injects to exercise retries.
- :class:`NotRetried`: a trial's failure that a retry would only repeat (not retried).
- :class:`TeacherFailed`: a student trial whose teacher failed (it trains on ``--resume``).
- :class:`GpuTorchError`: a trial holds a GPU its node's torch cannot use.
- :class:`CpuPrecisionError`: a trial on the CPU asks for float16 mixed precision.
"""

from __future__ import annotations


class SpecError(ValueError):
    """A problem in a sweep file. ``str(err)`` is a complete, user-facing message."""

    def __init__(self, path: str, message: str, source: str | None = None) -> None:
        self.path = path
        self.message = message
        self.source = source
        where = f"{source}: " if source else ""
        super().__init__(f"{where}{path}: {message}" if path else f"{where}{message}")


class AssignmentError(ValueError):
    """One bad item: ``item`` as written, ``key`` (stripped, "" when there is none) and ``value``
    (the text after ``=``, None when there is no ``=``), ``problem`` (why the value was refused,
    "" for no value). Each command words its own message."""

    def __init__(
        self, item: str, key: str, value: str | None, reason: str, problem: str = ""
    ) -> None:
        super().__init__(f"{item!r}: {reason}")
        self.item, self.key, self.value, self.reason = item, key, value, reason
        self.problem = problem


class LaunchError(RuntimeError):
    """A problem outside the spec (cluster, credentials, storage): message says what to do."""


class StorageFault(RuntimeError):
    """A trial stopped because its storage cannot be written: ``str()`` is the whole story."""


class TimingError(ValueError):
    """Bad input to the timing measurement, stage or command; the message names the fix."""


class RunLogError(ValueError):
    """A ``.wandb`` transaction log that cannot be read to its end."""


class ChaosError(RuntimeError):
    """The failure a sweep's ``chaos`` block injects to exercise retries."""


class NotRetried(RuntimeError):
    """A trial's failure that a retry would only repeat: the trial ends before it trains, for a
    reason its next attempt meets again (the same config on the same resources). Tune does not
    retry it, and ``failure.max_failures`` is not spent on it
    (:class:`sweeps.schedulers.lost_nodes.MovableTrial`); ``--resume`` runs the trial again."""


class TeacherFailed(NotRetried):
    """A student trial cannot train: every trial of its teacher unit failed. The message is the
    reason, one line; the trial ends as an error, so that ``--resume`` runs it again."""


class GpuTorchError(RuntimeError):
    """A trial holds a GPU that its node's torch cannot use (a CPU-only build): one line naming the
    build and the fix. Raised before the trial builds or trains anything. Retried like any
    failure: its next attempt may be placed on a node whose torch can use its GPU."""


class CpuPrecisionError(NotRetried):
    """A trial on the CPU asks for float16 mixed precision, which Lightning would swap for
    bf16-mixed while the trial's records named float16: one line with the fix. Raised before the
    trial builds or trains anything."""
