"""A full disk, a quota or a read-only mount under a running sweep: one line, not a flood.

When the storage fills, every trial fails at its next checkpoint, W&B's service dies under it,
logging handlers fail in turn, and Tune retries each trial into the same wall. Left alone that is
tens of thousands of console lines and no word of the cause. Two halves keep it to one line:

- in the trial (:func:`short_storage_faults`): a storage fault becomes one short
  :class:`StorageFault` naming the path and what was being written, W&B is closed without its
  teardown tracebacks, and Python's logging stops printing its own failures;
- in the driver (:class:`StorageGuard`): a filter on Tune's trial-error log recognises the fault,
  keeps its traceback off the console and interrupts the experiment the way Ctrl-C does, so no
  trial is retried or started into a full disk, and the unfinished ones stay unfinished (a stop
  would mark them terminated, and ``--resume`` would not continue them). The launcher then says
  the one line (:meth:`StorageGuard.message`), keeps every finished result, and exits non-zero.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
from collections.abc import Iterator

from sweeps.errors import StorageFault  # noqa: F401 (raised here; importable from here too)

#: a full disk, an exceeded quota, a read-only file system: the storage, not the trial, is at fault
STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})
_TEXTS = ("No space left on device", "Disk quota exceeded", "Read-only file system")


def find_storage_fault(exc: BaseException | None) -> BaseException | None:
    """The storage fault inside ``exc`` (its causes, contexts and Ray's wrapped ``cause``), or None."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        inner = getattr(exc, "cause", None)  # Ray's RayTaskError: the worker's own exception
        if isinstance(inner, BaseException):
            exc = inner
            continue
        if isinstance(exc, StorageFault):
            return exc
        if isinstance(exc, OSError) and (
            exc.errno in STORAGE_ERRNOS or any(t in str(exc) for t in _TEXTS)
        ):
            return exc
        exc = getattr(exc, "cause", None) or exc.__cause__ or exc.__context__
    return None


def describe(fault: BaseException, what: str) -> str:
    """One line: the path when the error names one, the system's words for the fault, and ``what``."""
    if isinstance(fault, StorageFault):
        return str(fault)
    code = getattr(fault, "errno", None)
    reason = (
        os.strerror(code)
        if code in STORAGE_ERRNOS
        else next((t for t in _TEXTS if t in str(fault)), str(fault))
    )
    path = getattr(fault, "filename", None)
    return f"{reason}{f': {path}' if path else ''} ({what})"


@contextlib.contextmanager
def short_storage_faults(what: str) -> Iterator[None]:
    """Run a trial; a storage fault leaves it as one :class:`StorageFault` (``what``: the trial and
    where it writes), and from then on this process's logging stays silent about its own failures."""
    try:
        yield
    except BaseException as exc:
        fault = find_storage_fault(exc)
        if fault is None or isinstance(exc, StorageFault):
            raise
        logging.raiseExceptions = (
            False  # handlers writing to the full disk: no "--- Logging error ---" dumps
        )
        raise StorageFault(describe(fault, what)) from None


def quiet_close(close) -> None:
    """``close()`` (W&B's finish) on a storage that failed: its own errors are expected and dropped."""
    logging.raiseExceptions = False
    with (
        open(os.devnull, "w") as null,
        contextlib.redirect_stderr(null),
        contextlib.suppress(Exception),
    ):
        close()


#: Ray's loggers that print a storage fault with its traceback: Tune's "Trial task failed for trial
#: ...", its "Saving experiment state to storage ... failed", and Ray's "Unhandled error" of a
#: trial whose failure Tune never collected because the experiment stopped first
ERROR_LOGGERS = (
    "ray.tune.execution.tune_controller",
    "ray.tune.execution.experiment_state",
    "ray._private.worker",
)


class StorageGuard(logging.Filter):
    """Watches Tune's trial errors for a storage fault. As a log filter it keeps that traceback
    off the console, then interrupts the experiment (SIGINT to this process, which Tune's own
    handler turns into a saved, resumable stop): every other trial would fail on the same storage,
    and Tune's retries would repeat each failure."""

    def __init__(self, storage: str) -> None:
        super().__init__()
        self.storage = storage
        self.fault: str | None = None

    # logging.Filter
    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        fault = find_storage_fault(exc)
        if fault is None:
            # Ray's "Unhandled error" carries the failure as text only
            text = record.getMessage() if record.name == "ray._private.worker" else ""
            return not (StorageFault.__name__ in text or any(t in text for t in _TEXTS))
        if self.fault is None:
            self.fault = describe(fault, f"writing under {self.storage}")
            os.kill(os.getpid(), signal.SIGINT)  # Tune's loop runs in this (the main) thread
        return False

    def note(self, exc: BaseException) -> bool:
        """Record a storage fault the driver itself hit (Tune saving its state); True if it was one."""
        fault = find_storage_fault(exc)
        if fault is not None and self.fault is None:
            self.fault = describe(fault, f"saving the experiment state under {self.storage}")
        return fault is not None

    @contextlib.contextmanager
    def watching(self) -> Iterator[StorageGuard]:
        """While the experiment runs: the filter on Tune's error log."""
        loggers = [logging.getLogger(name) for name in ERROR_LOGGERS]
        for lg in loggers:
            lg.addFilter(self)
        try:
            yield self
        finally:
            for lg in loggers:
                lg.removeFilter(self)

    def results_after_fault(self, path: str, read):
        """The results after Tune ended on the failed storage: an error file Tune began there and
        could not write is left empty and makes Tune's own reader fail (``EOFError``), so the empty
        ones are removed (they hold nothing) and the results read again with ``read()``. None
        when even that fails: the launcher then keeps the previous results.csv as it was."""
        from pathlib import Path

        for empty in Path(path).glob("*/error.*"):
            with contextlib.suppress(OSError):
                if empty.stat().st_size == 0:
                    empty.unlink()
        try:
            return read()
        except Exception:  # noqa: BLE001 -- the saved state is cut short too: nothing more to read
            return None

    def message(self) -> str:
        return (
            f"storage failed: {self.fault}. The sweep stopped; finished trials keep their results and "
            f"checkpoints. Free space (or set --output / storage.path to a disk with room), then --resume."
        )
