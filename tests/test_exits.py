"""The project's child processes end without Python's last garbage collections
(sweeps/exits.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: registers a handler that reports gc's frozen objects at exit, then (argv[1] == "on") asks for
#: the freeze, twice: exit handlers run last-registered first, so the report comes after it
REPORT = r"""
import atexit, gc, sys
atexit.register(lambda: print("frozen", gc.get_freeze_count(), flush=True))
from sweeps.exits import freeze_at_exit, freezes_at_exit
if sys.argv[1] == "on":
    freeze_at_exit()
    freeze_at_exit()
print("asked", freezes_at_exit(), flush=True)
kept = [[i] for i in range(1000)]
"""


def frozen_at_exit(mode: str) -> tuple[str, int]:
    done = subprocess.run(
        [sys.executable, "-c", REPORT, mode], capture_output=True, text=True, cwd=ROOT, check=True
    )
    asked, frozen = done.stdout.split("\n")[:2]
    return asked, int(frozen.split()[1])


def test_a_process_that_asks_freezes_its_objects_at_exit_and_one_that_does_not_never():
    asked, frozen = frozen_at_exit("on")
    assert asked == "asked True" and frozen >= 1000  # the list's lists, at least
    asked, frozen = frozen_at_exit("off")
    assert asked == "asked False" and frozen == 0


def test_the_timing_and_probe_processes_ask_for_it_before_their_work():
    """Their entry points call it first: read from their source, as running them needs a
    checkpoint and seconds of measuring (tests/sweeps/timing runs them)."""
    import inspect

    from sweeps.timing import child, probe_child

    for module in (child, probe_child):
        body = inspect.getsource(module.main).split("\n")
        assert body[1].strip() == "freeze_at_exit()", module.__name__
    main = (ROOT / "sweeps" / "timing" / "__main__.py").read_text()
    assert main.index("freeze_at_exit()") < main.index("sys.exit(main())")
