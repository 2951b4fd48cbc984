"""The searcher of a sweep with fused trials: :class:`~sweeps.search.base.SweepSearcher`, handing
out whole groups (:mod:`sweeps.plan.fusion`), one member after another, so that a group's members
start together.

When a group's first member is suggested, Optuna is asked all of the group's trials at once (its
batched ask: several ``study.ask()`` before any ``tell``), and the rest are handed out next; each
member is its own Optuna trial, told its own value when it ends (:class:`SweepSearcher`'s
``on_trial_complete``), with the group's name as its user attribute ``fused_with``. Groups go out
longest first (:mod:`sweeps.plan.cost`), as the units of an unfused sweep. The asked-but-not-yet
handed-out members are saved with the searcher, and stay RUNNING in Optuna across a resume.
"""

from __future__ import annotations

import pickle
from typing import Any

from sweeps.plan.fusion import FUSED_WITH, Group
from sweeps.plan.units import Unit
from sweeps.search.base import SweepSearcher


class FusedSearcher(SweepSearcher):
    """Args (besides :class:`SweepSearcher`'s): ``groups``, every trial to train, fused groups and
    single trials alike."""

    def __init__(self, units: list[Unit], groups: list[Group], **kw: Any) -> None:
        super().__init__(units, **kw)
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
        self.next_group = 0
        # asked, not yet handed out: (unit index, extra config, Optuna number, storage id, params)
        self.queue: list[tuple[int, dict, int | None, int | None, dict]] = []

    def suggest(self, trial_id: str) -> dict | None:
        if not self.queue:
            if self.next_group >= len(self.groups):
                return SweepSearcher.FINISHED
            group = self.groups[self.next_group]
            self.next_group += 1
            for j, slot in enumerate(group.slots):  # Optuna's batched ask: the group at once
                number = storage_id = None
                params: dict = {}
                if self.space:
                    trial = self._study(slot.unit).ask(self.space)
                    number, storage_id, params = trial.number, trial._trial_id, dict(trial.params)
                self.queue.append((slot.unit, group.member_config(j), number, storage_id, params))
        i, extra, number, storage_id, params = self.queue.pop(0)
        if self.space:
            storage = self._get_storage()
            storage.set_trial_user_attr(storage_id, "ray_trial_id", trial_id)
            if self.wandb_enabled:
                storage.set_trial_user_attr(storage_id, "wandb_run_id", trial_id)
            if extra:
                storage.set_trial_user_attr(storage_id, FUSED_WITH, extra[FUSED_WITH])
        self.started[i] += 1
        self.live[trial_id] = (i, number, storage_id)
        return {**self.units[i].config, **params, **extra}

    def save(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "wb") as f:
            pickle.dump(
                {
                    "started": self.started,
                    "live": self.live,
                    "next_group": self.next_group,
                    "queue": self.queue,
                },
                f,
            )

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as f:
            state = pickle.load(f)
        self.started, self.live = state["started"], state["live"]
        self.next_group, self.queue = state["next_group"], state["queue"]
        self._fail_orphans()

    def _held_trials(self) -> set:
        """Members asked with their group but not handed out yet stay RUNNING in Optuna."""
        return {entry[3] for entry in self.queue if entry[3] is not None}
