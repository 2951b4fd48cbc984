"""The pinned timing process: ``python -m sweeps.timing.child``, started by
:func:`sweeps.timing.stage.time_checkpoint_pinned`.

Reads one JSON request on stdin (``cpus``, ``checkpoint``, ``task``, ``kwargs`` for
:func:`~sweeps.timing.checkpoint.time_checkpoint`), pins itself to ``cpus`` before torch is imported
(so every thread torch starts keeps to them), times the checkpoint and prints the timing as one
line: ``TIMING {json}``.
"""
from __future__ import annotations

import json
import sys

from sweeps.timing.devices import pin  # the standard library only: torch is not loaded yet

PREFIX = "TIMING "


def main() -> None:
    request = json.loads(sys.stdin.read())
    pin(request["cpus"])
    from sweeps.timing.checkpoint import time_checkpoint

    timing = time_checkpoint(request["checkpoint"], request["task"], **request["kwargs"])
    print(PREFIX + json.dumps(timing.to_dict()))


if __name__ == "__main__":
    main()
