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
started.

Order alone does not keep a group whole. Tune starts any PENDING trial on its own (the
scheduler's choice is only the first it places), and asks the searcher for a trial only while
none is PENDING. A resumed memory_distill sweep on one CPU brought back the first member of one
group and the whole of another: Tune started the first member of each, each held half the CPU,
and neither partner could ever start (one was still in the searcher's queue, which was never
asked). So in a fused sweep every PENDING trial but the chosen one is held PAUSED
(:func:`next_to_start`), and while a running group waits for members the searcher has yet to hand
out no trial is chosen (:func:`held_for_partners`): Tune then asks the searcher for them, and the
held trials start, one at a time, in the order above."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ray.tune.experiment import Trial

from sweeps.plan.fusion import member_of

#: The trials held PAUSED before they start (for the order above, or by the searcher): the
#: console calls them pending, not waiting at a rung.
held_before_start: set[str] = set()


def _groups(trials: list[Any]) -> dict[str, tuple[int, list[Any]]]:
    """Each group's size and the members of it Tune holds."""
    out: dict[str, tuple[int, list[Any]]] = {}
    for trial in trials:
        found = member_of(trial.config or {})
        if found is not None:
            out.setdefault(found[0], (found[2], []))[1].append(trial)
    return out


def _rank(trial: Any, groups: dict[str, tuple[int, list[Any]]]) -> int:
    """0: a member of a group partly running; 1: alone, or of a group Tune holds whole; 2: of a
    group some of whose members the searcher has yet to hand out."""
    found = member_of(trial.config or {})
    if found is None:
        return 1
    size, members = groups[found[0]]
    if any(m.status == Trial.RUNNING for m in members):
        return 0
    return 1 if len(members) >= size else 2


def placement_order(trials: Iterable[Any]) -> list[Any]:
    """``trials`` (Tune's, in creation order) in the order they should be started (module
    docstring); the order among equals is kept."""
    trials = list(trials)
    groups = _groups(trials)
    return sorted(trials, key=lambda t: _rank(t, groups))


def waiting_for_partners(groups: dict[str, tuple[int, list[Any]]]) -> set[str]:
    """The groups (of :func:`_groups`) with a member running and members that are not in Tune
    yet (still in the searcher's queue)."""
    return {
        group
        for group, (size, members) in groups.items()
        if len(members) < size and any(m.status == Trial.RUNNING for m in members)
    }


def _hold(tune_controller: Any, trial: Any) -> None:
    """Set a PENDING trial PAUSED, to start when :func:`next_to_start` chooses it."""
    tune_controller._set_trial_status(trial, Trial.PAUSED)
    held_before_start.add(trial.trial_id)


def held_for_partners(trials: list[Any], groups: dict[str, tuple[int, list[Any]]]) -> set[str]:
    """While a running group waits for members the searcher has yet to hand out, every trial of
    another group, or alone, waits: the ids of the waiting trials held so."""
    waiting = waiting_for_partners(groups)
    return {
        t.trial_id
        for t in trials
        if waiting
        and t.status in (Trial.PENDING, Trial.PAUSED)
        and (member_of(t.config or {}) or ("",))[0] not in waiting
    }


def next_to_start(tune_controller: Any, skip: Iterable[str] = ()) -> Any | None:
    """The first trial in :func:`placement_order` waiting to start (PENDING before PAUSED among
    equals: the choice of the step before, still waiting for its resources, stays chosen),
    passing over the trials ``skip`` names (those waiting at a rung, or held by the searcher) and
    those :func:`held_for_partners` holds. In a fused sweep every other PENDING trial is held
    PAUSED, so that Tune starts no other (module docstring)."""
    trials = list(tune_controller.get_trials())
    groups = _groups(trials)
    skip = set(skip) | held_for_partners(trials, groups)
    waiting = [t for t in trials if t.status in (Trial.PENDING, Trial.PAUSED)]
    order = sorted(waiting, key=lambda t: (_rank(t, groups), t.status != Trial.PENDING))
    chosen = next((t for t in order if t.trial_id not in skip), None)
    if groups:
        for trial in waiting:
            if trial is not chosen and trial.status == Trial.PENDING:
                _hold(tune_controller, trial)
    if chosen is not None:
        held_before_start.discard(chosen.trial_id)
    return chosen
