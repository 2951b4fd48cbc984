"""The objective kind of a sweep with one metric (``metric: {name, goal}``): the Optuna studies'
direction and sampler, what a trial's report is worth, and how Optuna is told.

:class:`SingleObjective` and the multi-objective kind (:class:`sweeps.search.moo.MultiObjective`)
answer the same questions, so the scopes that use them (:mod:`.per_unit`, :mod:`.over_seeds`)
are written once for both:

- ``new_study``: a study of this kind, with its sampler;
- ``ask``: a sample (the multi-objective kind asks again while a sample repeats an earlier one);
- ``value``: what a report is worth (a float, or a vector), None while it is not known;
- ``aggregate``: a configuration's value over its seeds;
- ``report``: a report's value as the trial's intermediate value (or its curve);
- ``violations``: each constraint's violation (none here);
- ``complete``: tell Optuna a finished trial's value;
- ``told``: after a trial was told (the multi-objective kind's repeats are told with it).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import optuna

from sweeps.report.selection import aggregate
from sweeps.search.journal import Journal
from sweeps.search.seeding import PerTrial
from sweeps.spec.search_space import optuna_sampler


class SingleObjective:
    """One metric, maximised (``mode`` ``max``) or minimised (``min``); ``sampler``: the sweep's
    ``search.sampler`` (``tpe`` or ``random``)."""

    def __init__(self, metric: str, mode: str, sampler: str = "tpe") -> None:
        self.metric, self.mode = metric, mode
        self.sampler = sampler
        self.names = [metric]

    @property
    def directions(self) -> list[str]:
        return ["maximize" if self.mode == "max" else "minimize"]

    def new_study(self, storage: Any, name: str, seed_of: Callable[[int], int]) -> Any:
        """Open (or create) study ``name``; its sampler draws its k-th trial seeded with
        ``seed_of(k)`` (:class:`sweeps.search.seeding.PerTrial`)."""
        study = optuna.create_study(
            study_name=name, storage=storage, direction=self.directions[0], load_if_exists=True
        )
        study.sampler = PerTrial(functools.partial(optuna_sampler, self.sampler), seed_of)
        return study

    def ask(self, study: Any, space: dict[str, Any], key: Any) -> Any:
        return study.ask(space)

    def on_ask(self, trial: Any, config: dict[str, Any]) -> None:
        """What an asked trial records before it trains (nothing here)."""

    def value(self, config: dict[str, Any], result: dict[str, Any] | None) -> float | None:
        value = (result or {}).get(self.metric)
        return None if value is None else float(value)

    def aggregate(self, values: list[Any], how: str) -> float:
        return aggregate(list(values), how, self.mode)

    def as_result(self, value: Any, step: int) -> dict[str, Any]:
        """A report holding ``value`` at ``step`` (a trial's last report, rebuilt)."""
        return {self.metric: value, "step": step}

    def report(
        self, journal: Journal, storage_id: int, step: int, value: Any, curve: dict[str, Any]
    ) -> None:
        """A report's value: the trial's intermediate value at ``step`` (Optuna's learning
        curves, ``plot_intermediate_values``)."""
        journal.set_intermediate(storage_id, step, float(value))

    def violations(self, unit: int, config: dict[str, Any], result: dict[str, Any]) -> dict:
        return {}

    def complete(
        self, study: Any, number: int, storage_id: int, value: Any, violations: dict
    ) -> None:
        study.tell(number, float(value), skip_if_finished=True)

    def record_steps(self, journal: Journal, storage_id: int, step: int) -> None:
        """The training steps a trial spent (the multi-objective kind keeps them)."""

    def told(self, study: Any, key: Any, number: int) -> None:
        """Trial ``number`` of ``study`` was told its outcome."""

    def held(self, live: set[tuple[Any, int]]) -> set[int]:
        """Storage ids of Optuna trials kept RUNNING on purpose besides the live ones (none)."""
        return set()

    def state(self) -> dict[str, Any]:
        return {}

    def load(self, state: dict[str, Any] | None) -> None:
        pass
