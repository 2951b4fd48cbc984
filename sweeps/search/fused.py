"""The hand-outs of fused trials (:mod:`sweeps.plan.fusion`): a group's members go out one after
another, so that they start together.

- :class:`FusedGroups` (per-unit scope): the plan's groups, whole. When a group goes out, Optuna
  is asked all of its members at once (its batched ask: several ``study.ask()`` before any
  ``tell``; a multi-objective study asks again while a member repeats an earlier sample), and the
  rest are handed out next; each member is its own Optuna trial, told its own value (or vector,
  with its own constraints) when it ends, with the group's name as its user attribute
  ``fused_with``. Groups go out longest first (:mod:`sweeps.plan.cost`), as the units of an unfused
  sweep; a group the gates hold back (a student whose teacher has not ended, a unit whose baseline
  has not) waits until every member's unit is ready, and groups the gates send first (teachers)
  go first.
- :class:`SeedChunks` (configurations judged over seeds): each configuration's seeds, in fused
  chunks of at most the plan's cap (``<cell>#<number>``, ``.../2`` for a second chunk).

The members drawn but not yet handed out are saved with the searcher, and stay RUNNING in
Optuna across a resume.
"""

from __future__ import annotations

from typing import Any

from ray.tune.search import Searcher

from sweeps.plan.fusion import Group, configuration_member
from sweeps.plan.units import Unit
from sweeps.search.base import Draw
from sweeps.search.handout import OneAtATime


class FusedGroups:
    """Args: ``units`` (the sweep's), ``groups``: every trial to train, fused groups and single
    trials alike (:attr:`sweeps.plan.fusion.FusionPlan.groups`)."""

    def __init__(self, units: list[Unit], groups: list[Group]) -> None:
        # longest first, then the plan's order (a search's earlier samples before later ones)
        order = sorted(
            range(len(groups)),
            key=lambda g: (
                min(s.sample for s in groups[g].slots),
                -max(units[s.unit].cost for s in groups[g].slots),
                g,
            ),
        )
        self.groups = [groups[g] for g in order]
        self.sent: set[int] = set()  # groups handed out (their place in ``groups``)
        self.queue: list[Draw] = []  # drawn, not yet handed out

    def next(self, searcher: Any) -> Draw | str | None:
        if self.queue:
            return self.queue.pop(0)
        left = [g for g in range(len(self.groups)) if g not in self.sent]
        if not left:
            return Searcher.FINISHED
        ready = [g for g in left if all(searcher.ready(s.unit) for s in self.groups[g].slots)]
        if not ready:
            return None  # students wait for their teachers, samples for their baseline
        g = min(
            ready, key=lambda g: (not any(searcher.first(s.unit) for s in self.groups[g].slots), g)
        )
        self.sent.add(g)
        group = self.groups[g]
        for j, slot in enumerate(group.slots):  # Optuna's batched ask: the group at once
            draw = searcher.scope.draw(searcher, slot.unit)
            self.queue.append(draw.adding(group.member_config(j)))
        return self.queue.pop(0)

    def queued(self) -> set[int]:
        return {d.storage_id for d in self.queue if d.storage_id is not None}

    def state(self) -> dict[str, Any]:
        return {"sent": self.sent, "queue": self.queue}

    def load(self, state: dict[str, Any] | None) -> None:
        state = state or {}
        self.sent, self.queue = set(state.get("sent", ())), list(state.get("queue", []))


class SeedChunks(OneAtATime):
    """Configurations judged over seeds, each configuration's seeds fused in chunks of at most
    ``cap`` (:func:`sweeps.plan.fusion.configuration_member`)."""

    def __init__(self, cap: int) -> None:
        super().__init__()
        self.cap = cap

    def members(self, searcher: Any, draws: list[Draw]) -> list[Draw]:
        scope = searcher.scope
        out = []
        for k, draw in enumerate(draws):
            cell = searcher.units[draw.unit].index
            label = f"{scope.names[cell].split('/', 1)[-1]}#{draw.number}"
            keys = configuration_member(label, k, len(draws), self.cap)
            out.append(draw.adding(keys))
        return out
