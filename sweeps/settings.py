"""Typed, study-wide settings every trial of a study shares (what used to travel as the
untyped ``config["sweep"]`` dict). Built once by :mod:`sweeps.experiment`, handed to the trainables
through ``tune.with_parameters`` (so they are stored once, not in every trial's config)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from .study.grid import resolve_sections
from .convergence import StopWhenSpec
from .study.schema import ResourcesSpec, WandbSpec


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
    chaos_step: Optional[int] = None
    chaos_before_report: bool = False
    has_search: bool = False
    base: dict[str, Any] = field(default_factory=dict)
    grid_columns: dict[str, str] = field(default_factory=dict)
    param_columns: dict[str, str] = field(default_factory=dict)
    stop_when: Optional[StopWhenSpec] = None  # stop a trial whose metric converged (sweeps.convergence)

    def plan(self, config: dict[str, Any]) -> dict[str, Any]:
        """A trial's whole plan from its Tune config: ``cell``, ``seed``, ``grid`` and ``params``
        (dotted keys), ``config`` (the flat keys as Tune holds them) and the resolved ``task``,
        ``model`` and ``trainer`` sections."""
        flat = {k: _plain(v) for k, v in config.items()}
        grid = {key: flat[name] for name, key in self.grid_columns.items() if name in flat}
        params = {key: flat[name] for name, key in self.param_columns.items() if name in flat}
        # `set`: dotted settings replacing the cell's (a multi-objective study's baseline model, sweeps.moo.search)
        task, model, trainer = resolve_sections(self.base, {**grid, **params, **(flat.get("set") or {})})
        return {
            "cell": flat["cell"], "seed": int(flat["seed"]), "grid": grid, "params": params, "config": flat,
            "task": task, "model": model, "trainer": trainer,
        }


def _plain(value: Any) -> Any:
    """numpy scalars (Optuna's samples can be) as plain Python values."""
    return value.item() if hasattr(value, "item") else value
