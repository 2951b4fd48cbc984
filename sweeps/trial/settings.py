"""Typed, study-wide settings every trial of a study shares (what used to travel as the
untyped ``config["sweep"]`` dict). Built once by :mod:`sweeps.run.experiment`, handed to the trainables
through ``tune.with_parameters`` (so they are stored once, not in every trial's config)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sweeps.spec.grid import TrialPlan
from sweeps.spec.schema import ResourcesSpec, WandbSpec
from sweeps.trial.stop_when import StopWhenSpec


@dataclass(frozen=True)
class TrialSettings:
    """What a trainable needs besides its own plan.

    ``base`` holds the study's fixed task/model/trainer sections; ``grid_columns`` and
    ``param_columns`` map each flat config key of a trial (``attention``, ``K``, ``length``;
    ``lr``) to its dotted spec key, so a trial rebuilds its whole plan from its small config
    (:meth:`plan`).
    """

    name: str
    metric: str
    resources: ResourcesSpec  # the spec's, with the GPU share the cluster check settled on
    wandb: WandbSpec  # the spec's, with its mode resolved: online, offline or disabled
    wandb_dir: str
    chaos_dir: str
    train_storage: str  # DDP trials: where Ray Train keeps train-<trial id> runs
    keep_checkpoints: int = 2
    chaos_step: int | None = None
    chaos_before_report: bool = False
    has_search: bool = False
    cells: dict[str, TrialPlan] = field(
        default_factory=dict
    )  # cell name -> its plan, resolved by the spec
    grid_columns: dict[str, str] = field(default_factory=dict)
    param_columns: dict[str, str] = field(default_factory=dict)
    stop_when: StopWhenSpec | None = (
        None  # stop a trial whose metric converged (sweeps.trial.stop_when)
    )

    def plan(self, config: dict[str, Any]) -> TrialPlan:
        """A trial's plan from its Tune config: its cell's plan as the spec resolved it, with the
        seed and Optuna's samples (and a multi-objective study's baseline settings, ``set``:
        :mod:`sweeps.moo.search`) written in. Nothing of the grid is resolved again."""
        flat = {k: _plain(v) for k, v in config.items()}
        params = {key: flat[name] for name, key in self.param_columns.items() if name in flat}
        return self.cells[flat["cell"]].with_values(
            int(flat["seed"]), {**params, **(flat.get("set") or {})}, params, flat
        )


def _plain(value: Any) -> Any:
    """numpy scalars (Optuna's samples can be) as plain Python values."""
    return value.item() if hasattr(value, "item") else value
