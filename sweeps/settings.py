"""Typed, study-wide settings every trial of a study shares (what used to travel as the
untyped ``config["sweep"]`` dict). Built once by :mod:`sweeps.experiment`, handed to the trainables
through ``tune.with_parameters`` (so they are stored once, not in every trial's config)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass(frozen=True)
class Resources:
    """Per trial: CPUs and (fractional) GPUs of one process, or of each DDP worker when
    ``workers`` > 1."""

    cpu: float = 1.0
    gpu: float = 0.0
    workers: int = 1


@dataclass(frozen=True)
class WandbSettings:
    project: str = "memory-attention"
    entity: Optional[str] = None
    group: Optional[str] = None
    tags: tuple[str, ...] = ()
    mode: str = "offline"  # resolved: online, offline or disabled
    log_heatmaps: bool = True


@dataclass(frozen=True)
class TrialSettings:
    """What a trainable needs besides its own plan.

    ``base`` holds the study's fixed task/model/trainer sections and ``columns`` maps each flat
    config key of a trial (``attention``, ``K``, ``length``, ``lr``) to its dotted spec key, so a
    trial rebuilds its whole plan from its small config.
    """

    name: str
    metric: str
    resources: Resources
    wandb: WandbSettings
    wandb_dir: str
    chaos_dir: str
    train_storage: str  # DDP trials: where Ray Train keeps train-<trial id> runs
    keep_checkpoints: int = 2
    chaos_step: Optional[int] = None
    chaos_before_report: bool = False
    has_search: bool = False
    base: dict[str, Any] = field(default_factory=dict)
    columns: dict[str, str] = field(default_factory=dict)
