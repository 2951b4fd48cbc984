"""When a fused group whose training is over ends its process (:meth:`FusedGroup._maybe_close
<sweeps.trial.fused.group.FusedGroup._maybe_close>`): once every member's trial is done with it.

A member's trial is done with its group when it says so (``release`` after its final report,
``leave`` when Tune stopped it). Tune ending the trial is not enough: Tune ends a member's trial on
its final report (a scheduler's ``max_t``, a stopper) or on a stop, while the trial's process, held
by ``FinishOnStop``, still asks the group for its attention heatmaps before it releases it. A group
that went then left that trial's W&B run without them.
"""

from __future__ import annotations

import time
from typing import Any

#: seconds a group that is done waits for a member whose trial Tune has ended but which has not
#: released it: longer than ``member.heatmaps_of`` waits (120 s); past it, the member's process is
#: taken for gone (its trial failed for good)
UNRELEASED_GRACE_S = 150.0


def seconds_to_close(
    members: dict[int, Any],
    ended: set[int],
    size: int,
    unreleased_since: dict[int, float],
    now: float | None = None,
) -> float | None:
    """When a group whose training is over may end: ``0`` now, ``None`` not while a member's trial
    may still come (it has not joined, or it runs and has not released the group), else the seconds
    left to wait for the members Tune has ended that have not released it. ``unreleased_since``
    remembers, across calls, since when each of those was seen so (``time.monotonic``)."""
    if len(members) + len(ended - set(members)) < size:
        return None
    waiting = [j for j, m in members.items() if not m.released]
    if any(j not in ended for j in waiting):
        return None
    now = time.monotonic() if now is None else now
    for j in waiting:
        unreleased_since.setdefault(j, now)
    return max((unreleased_since[j] + UNRELEASED_GRACE_S - now for j in waiting), default=0.0)


def states_spent(members: dict[int, Any], ended: set[int], size: int) -> bool:
    """Whether no member will resume from the group's saved states, so they may go: each member's
    trial handed its final report to Tune (``taken``: a ``release``), or left on a stop that Tune
    ended it with (``left``, in ``ended``: a scheduler's stop). A member whose final report the
    group published but whose trial was stopped before handing it over (a Ctrl-C in between) is
    neither: it resumes, from the states."""
    return all(
        j in members and (members[j].taken or (members[j].left and j in ended)) for j in range(size)
    )
