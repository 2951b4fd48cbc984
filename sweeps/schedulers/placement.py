"""Which waiting trial Tune starts next: FIFO order, with fused groups kept whole.

A fused group trains once every member runs, and each member holds 1/n of the group's resources
(:mod:`sweeps.plan.fusion`). The searcher hands a group's members out one after another and Tune
places one trial at a time (:func:`sweeps.stages.train.one_pending`), so that at most one group is
partly placed. A resume breaks that order: Tune brings back every unfinished member at once, in
the order they were created, and a group whose last members were still in the searcher's queue
when the sweep stopped has only some of its members in Tune. Started in creation order, the first
members of two groups held every CPU while their partners waited for one, for good.

The order here: the members of a group already partly running first, then trials that need no
one else (trials alone, and groups all of whose members Tune holds), then the members of groups
some of whose members the searcher has yet to hand out, last: those it hands out once these have
started."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ray.tune.experiment import Trial

from sweeps.plan.fusion import member_of


def placement_order(trials: Iterable[Any]) -> list[Any]:
    """``trials`` (Tune's, in creation order) in the order they should be started (module
    docstring); the order among equals is kept."""
    trials = list(trials)
    present: dict[str, list[Any]] = {}
    for trial in trials:
        found = member_of(trial.config or {})
        if found is not None:
            present.setdefault(found[0], []).append(trial)

    def rank(trial: Any) -> int:
        found = member_of(trial.config or {})
        if found is None:
            return 1
        members = present[found[0]]
        if any(m.status == Trial.RUNNING for m in members):
            return 0
        return 1 if len(members) >= found[2] else 2

    return sorted(trials, key=rank)


def next_to_start(tune_controller: Any, skip: Iterable[str] = ()) -> Any | None:
    """FIFO's choice (a PENDING trial, else a PAUSED one) in :func:`placement_order`, passing
    over the trials ``skip`` names (those waiting at a rung, or held by the searcher)."""
    skip = set(skip)
    order = placement_order(tune_controller.get_trials())
    for status in (Trial.PENDING, Trial.PAUSED):
        for trial in order:
            if trial.status == status and trial.trial_id not in skip:
                return trial
    return None
