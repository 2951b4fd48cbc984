"""The decode probe's pinned process: ``python -m sweeps.timing.probe_child``, started by
:func:`sweeps.timing.probe.run_probe_process`.

Reads one JSON request on stdin (``cpus``, ``task``, ``seed``, ``models``, ``kwargs`` for
:func:`~sweeps.timing.probe_measure.time_models`), pins itself to ``cpus`` before torch is imported (as the
timing stage's child, :mod:`sweeps.timing.child`, does) and prints one line per model as it is
timed: ``PROBE {json}``.
"""

from __future__ import annotations

import json
import sys

from sweeps.exits import freeze_at_exit
from sweeps.timing.devices import pin
from sweeps.timing.probe import PREFIX  # the standard library only at import: torch loads later


def main() -> None:
    freeze_at_exit()
    request = json.loads(sys.stdin.read())
    pin(request["cpus"])
    from sweeps.timing.probe_measure import time_models  # torch, once pinned to its CPUs

    for entry in time_models(
        request["task"], request["seed"], request["models"], **request["kwargs"]
    ):
        print(PREFIX + json.dumps(entry), flush=True)


if __name__ == "__main__":
    main()
