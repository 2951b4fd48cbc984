"""The sweep's units, each a cell and a seed, as the searchers hand them out: the Optuna study
each one is searched in, its place in the grid, its Tune config, its expected length (the order
the longest go out first: :mod:`sweeps.plan.cost`) and the unit that teaches it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Unit:
    """One (cell, seed): its Optuna study name, its position in the grid and its base config."""

    name: str
    index: int
    seed: int
    config: dict[str, Any]
    max_steps: int | None = None  # a trial that ends before it was stopped by the scheduler
    cost: float = 0.0  # expected length of its trials (sweeps.plan.cost): the longest start first
    teacher: int | None = None  # the unit whose trials teach this one's (sweeps.search.teachers)


def sweep_units(sweep: Any, cost: Callable[[Any], float] | None = None) -> list[Unit]:
    """The sweep's units, in grid order: each plan's Optuna study name (``<sweep>/<unit>``), its
    cell's position, seed, Tune config and ``max_steps``; ``cost(plan)`` its expected length
    (:mod:`sweeps.plan.cost`), 0 without one."""
    index = {c.slug: i for i, c in enumerate(sweep.cells)}
    return [
        Unit(
            f"{sweep.name}/{p.unit}",
            index[p.cell.slug],
            p.seed,
            p.trial_config(sweep.grid_columns),
            p.trainer.get("max_steps"),
            cost(p) if cost is not None else 0.0,
            sweep.teacher_index(i) if getattr(sweep, "teachers", None) else None,
        )
        for i, p in enumerate(sweep.plans)
    ]
