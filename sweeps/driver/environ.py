"""Variables of this process's environment put back as they were, set or unset: what a launch
sets for its trials (:func:`sweeps.stages.pipeline.run_sweep`) and an MPS daemon's variables
(:mod:`sweeps.driver.mps`) do not outlive them in a process that goes on (a notebook, a test)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager


def restore_environ(before: Mapping[str, str | None]) -> None:
    """Each variable of ``before`` set to its value there, or unset where that is None."""
    for name, value in before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@contextmanager
def environ_restored(names: Iterable[str]) -> Iterator[None]:
    """``names`` in ``os.environ`` as they were before, set or unset, once the block ends."""
    before = {name: os.environ.get(name) for name in names}
    try:
        yield
    finally:
        restore_environ(before)
