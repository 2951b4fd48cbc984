"""Typed, sweep-wide settings every trial of a sweep shares. Built once by
:func:`sweeps.stages.train.make_settings`, handed to the trainables through
``tune.with_parameters`` (so they are stored once, not in every trial's config).

The trial reads the sweep file's own sections (``settings.spec.storage``, ``settings.spec.chaos``,
``settings.spec.stop_when`` ...), as the spec resolved them, so a new key in a section reaches the
trial with no code between the schema and the line that reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sweeps.spec.grid import TrialPlan
from sweeps.spec.schema import ResourcesSpec, SweepSpec, WandbSpec
from sweeps.spec.search_schema import StopWhenSpec


@dataclass(frozen=True)
class TrialSettings:
    """What a trainable needs besides its own plan.

    ``spec`` is the sweep file as loaded, with what the launch settled on written in: the GPU
    share the cluster check chose (``resources.gpu``) and the W&B mode resolved to online,
    offline or disabled (``wandb.mode``). ``cells``, ``grid_columns`` and ``param_columns`` let a
    trial rebuild its whole plan from its small Tune config (:meth:`plan`).
    """

    spec: SweepSpec
    wandb_dir: str
    chaos_dir: str
    train_storage: str  # DDP trials: where Ray Train keeps train-<trial id> runs
    has_search: bool = False
    cells: dict[str, TrialPlan] = field(default_factory=dict)  # cell name -> its resolved plan
    grid_columns: dict[str, str] = field(default_factory=dict)
    param_columns: dict[str, str] = field(default_factory=dict)
    # the roster actor of a sweep with fused trials (sweeps.trial.fused.roster), None without fusion
    fusion_roster: str | None = None
    # what a trial that trains alone reserves in a sweep with fused groups, where the plan's GPU
    # arrangement gives it another share than a group's (resources.gpu: auto); None: a group's
    lone: dict[str, float] | None = None
    # the sweep's id from its launch.json (sweeps.spec.launch_record.sweep_id), in every W&B run's
    # config; None for a sweep that recorded none
    sweep_id: str | None = None

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def metric(self) -> str:
        return self.spec.metric.name

    @property
    def resources(self) -> ResourcesSpec:
        return self.spec.resources

    @property
    def wandb(self) -> WandbSpec:
        return self.spec.wandb

    @property
    def stop_when(self) -> StopWhenSpec | None:
        """Stop a trial whose metric converged (:mod:`sweeps.trial.stop_when`)."""
        return self.spec.stop_when

    def plan(self, config: dict[str, Any]) -> TrialPlan:
        """A trial's plan from its Tune config: its cell's plan as the spec resolved it, with the
        seed and Optuna's samples (and a multi-objective sweep's baseline settings, ``set``:
        :mod:`sweeps.search.baselines`) and a student's ``teacher_checkpoint`` written in. Nothing of
        the grid is resolved again."""
        flat = {k: _plain(v) for k, v in config.items()}
        params = {key: flat[name] for name, key in self.param_columns.items() if name in flat}
        # a student's teacher, chosen when its trial was suggested (sweeps.search.teachers)
        taught = (
            {"model.teacher_checkpoint": flat["teacher_checkpoint"]}
            if flat.get("teacher_checkpoint")
            else {}
        )
        return self.cells[flat["cell"]].with_values(
            int(flat["seed"]), {**params, **(flat.get("set") or {}), **taught}, params, flat
        )


def _plain(value: Any) -> Any:
    """numpy scalars (Optuna's samples can be) as plain Python values."""
    return value.item() if hasattr(value, "item") else value
