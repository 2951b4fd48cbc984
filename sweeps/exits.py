"""How the project's own child processes end: without the interpreter's last garbage collections.

A process that has imported torch and Lightning holds millions of objects the garbage collector
tracks, and Python's shutdown walks them all again before it frees the modules: about a second of
CPU per process on the 2-core VM (benchmarks/README.md, "The test suite"). Nothing the project
needs happens in that walk: every file is closed by then, by the code or by the exit handlers,
which still run. :func:`freeze_at_exit` has :func:`gc.freeze` called first at exit, so the
collections that follow skip every object alive at that point; the modules are still freed, and
each object freed by reference counting still runs its ``__del__``.

Called by the entry points of the timing stage's processes (:mod:`sweeps.timing.child`), the
decode probe's (:mod:`sweeps.timing.probe_child`) and ``python -m sweeps.timing``. (Tune's trial
actors gain nothing from it: three trials of a function trainable that loaded Lightning used
6.25 CPU-seconds each with it as Ray's ``worker_process_setup_hook`` against 6.29 without.)

The standard library only.
"""

from __future__ import annotations

import atexit
import gc

_registered = False


def freeze_at_exit() -> None:
    """Have :func:`gc.freeze` run at interpreter exit, before the exit handlers registered
    earlier (once per process, however often it is called)."""
    global _registered
    if not _registered:
        atexit.register(gc.freeze)
        _registered = True


def freezes_at_exit() -> bool:
    """Whether :func:`freeze_at_exit` ran in this process."""
    return _registered
