"""The sweep's searcher, put together from the launch's plan
(:class:`sweeps.plan.sweep_plan.SweepPlan`): one :class:`~sweeps.search.base.SweepSearcher` and,
for each of its parts, the one the sweep file asks for. Every combination is the same searcher:

- objective kind: one ``metric``, :class:`~sweeps.search.objective.SingleObjective`;
  ``objectives`` (and ``constraints``), :class:`~sweeps.search.moo.MultiObjective`;
- scope: :class:`~sweeps.search.per_unit.PerUnit`; with ``seeds: {per_configuration: true}``,
  :class:`~sweeps.search.over_seeds.OverSeeds`;
- hand-out: :class:`~sweeps.search.handout.OneAtATime`; with fused groups in the plan,
  :class:`~sweeps.search.fused.FusedGroups` (over seeds, :class:`~sweeps.search.fused.SeedChunks`);
- gates: a grid variant's ``teacher:``, :class:`~sweeps.search.teachers.TeacherBook`; a
  constraint's ``of:``, :class:`~sweeps.search.baselines.Baselines`;
- ``warm_start:``, given to all of them by :func:`~sweeps.search.warm_start.apply_warm_start`.

What cannot be combined is refused before Ray starts, where the plan is made (the spec's checks,
and :func:`sweeps.plan.fusion.sweep_off` for what does not fuse), and ``--dry-run`` says why.
"""

from __future__ import annotations

import os
from typing import Any

from sweeps.layout import OPTUNA_JOURNAL
from sweeps.plan.sweep_plan import SweepPlan
from sweeps.search.base import SweepSearcher
from sweeps.search.baselines import Baselines
from sweeps.search.fused import FusedGroups, SeedChunks
from sweeps.search.handout import OneAtATime
from sweeps.search.moo import MultiObjective, ObjectiveReader
from sweeps.search.objective import SingleObjective
from sweeps.search.over_seeds import OverSeeds, cell_study_name
from sweeps.search.per_unit import PerUnit
from sweeps.search.teachers import TeacherBook
from sweeps.search.warm_start import apply_warm_start
from sweeps.spec.objectives import PROBED, baseline_of
from sweeps.spec.search_space import optuna_distributions
from sweeps.timing.probe import build_estimates


def make_searcher(plan: SweepPlan, wandb_mode: str) -> SweepSearcher:
    """The searcher of ``plan``'s sweep (module docstring): every (cell, seed) x ``num_samples``
    trials; with ``parameters``, Optuna studies in ``<output>/<name>/optuna.journal``; the plan's
    warm start given to it."""
    units = list(plan.units)
    baselines = _baselines(plan)
    objective = _objective(plan, baselines)
    scope = _scope(plan, objective)
    book = TeacherBook.of(units, scope.budget, objective.metric, objective.mode)
    searcher = SweepSearcher(
        units, scope, _handout(plan), [book, baselines], wandb_enabled=wandb_mode != "disabled"
    )
    apply_warm_start(searcher, plan.warm)  # warm_start: reused and told trials
    return searcher


def per_unit_searcher(
    units: list[Any],
    num_samples: int,
    metric: str,
    mode: str,
    space: dict[str, Any] | None = None,
    journal: str | None = None,
    sampler: str = "tpe",
    sampler_seed: int = 0,
    wandb_enabled: bool = False,
) -> SweepSearcher:
    """The searcher of ``units`` alone, without a plan (the confirm stage's retrained trials, a
    test's units): one metric, per unit, one trial at a time, the teachers the units name."""
    scope = PerUnit(
        units, SingleObjective(metric, mode, sampler), num_samples, space, journal, sampler_seed
    )
    book = TeacherBook.of(units, num_samples, metric, mode)
    return SweepSearcher(units, scope, OneAtATime(), [book], wandb_enabled=wandb_enabled)


def _baselines(plan: SweepPlan) -> Baselines | None:
    """The baseline models of relative constraints (``of:``), one per unit, or None."""
    settings = baseline_of(plan.spec) if plan.spec.objectives else None
    return Baselines(list(plan.units), settings) if settings else None


def _objective(plan: SweepPlan, baselines: Baselines | None) -> Any:
    """One metric, or several: then the probe stage first, where an objective or a constraint
    names one of its figures (:func:`sweeps.timing.probe.build_estimates`)."""
    sweep, spec = plan.sweep, plan.spec
    if not spec.objectives:
        return SingleObjective(spec.metric.name, spec.metric.mode, spec.search.sampler)
    plan.out_dir.mkdir(parents=True, exist_ok=True)
    # Tune keeps one trial pending at a time for a search algorithm: the cores idle between trials
    os.environ.setdefault(
        "TUNE_MAX_PENDING_TRIALS_PG", str(max(2, spec.max_concurrent_trials or 2))
    )
    named = {o.name for o in spec.objectives} | {c.name for c in spec.constraints}
    estimates = build_estimates(sweep, plan.out_dir) if named & set(PROBED) else None
    return MultiObjective(
        sweep,
        ObjectiveReader(sweep, estimates),
        spec.num_samples,
        dedupe=not spec.per_configuration,  # over seeds, a repeat trains on other seeds
        baselines=baselines,
    )


def _scope(plan: SweepPlan, objective: Any) -> PerUnit | OverSeeds:
    sweep, spec = plan.sweep, plan.spec
    space = journal = None
    if sweep.has_search:
        space = optuna_distributions(spec.parameters, sweep.param_columns)
        plan.out_dir.mkdir(parents=True, exist_ok=True)
        journal = str(plan.out_dir / OPTUNA_JOURNAL)
    if spec.per_configuration:  # one study per cell, configurations judged over seeds
        studies = [cell_study_name(sweep.name, c.slug) for c in sweep.cells]
        return OverSeeds(
            list(plan.units),
            objective,
            spec.num_samples,
            space,
            journal,
            studies,
            how=spec.seeds.objective,
            sampler_seed=spec.search.seed,
        )
    samples = spec.num_samples if sweep.has_search else 1
    return PerUnit(list(plan.units), objective, samples, space, journal, spec.search.seed)


def _handout(plan: SweepPlan) -> Any:
    fusion = plan.fusion
    if plan.spec.per_configuration:
        return SeedChunks(fusion.cap) if fusion.active else OneAtATime()
    if fusion.active:  # whole groups, one member after another
        return FusedGroups(list(plan.units), list(fusion.groups))
    return OneAtATime()
