"""Early stopping inside a (cell, seed) only.

The comparison between grid cells is what a sweep measures, so a scheduler must never stop a
trial of one cell because another cell scores higher. :class:`PerUnitScheduler` keeps one
scheduler (ASHA) per (cell, seed) -- the unit Optuna searches -- and routes each trial's events to
its own: ASHA compares only the nuisance samples of one cell and seed. A unit of a single trial
(no ``parameters``, or ``num_samples: 1``) has nothing to compare, and its trials run to the end
(``--dry-run`` says so: :meth:`sweeps.spec.Sweep.early_stopping_note`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ray.tune.experiment import Trial
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler, TrialScheduler

from sweeps.schedulers.config_rungs import ConfigRungs
from sweeps.schedulers.lost_nodes import adopt
from sweeps.schedulers.pareto_rungs import pareto_rungs_factory
from sweeps.schedulers.placement import held_before_start, next_to_start
from sweeps.spec import Sweep, unit_key
from sweeps.spec.search_schema import configuration_rungs, reports_per_trial


class SweepFIFO(FIFOScheduler):
    """FIFO order; every trial it is given moves when its node is lost (:mod:`.lost_nodes`).

    ``comeback(trial_id)`` (the searcher's :meth:`~sweeps.search.base.SweepSearcher.comeback`)
    is asked before a trial starts: a student that failed for want of a teacher and runs again on
    ``--resume`` is held PAUSED until its teacher has ended, then starts with the new config the
    searcher gives it (Tune's ``Trial.set_config``, as population-based training sets one)."""

    def __init__(self, comeback: Callable[[str], Any] | None = None) -> None:
        super().__init__()
        self.comeback = comeback

    def on_trial_add(self, tune_controller, trial) -> None:
        adopt(trial)
        super().on_trial_add(tune_controller, trial)

    def held(self, tune_controller) -> set[str]:
        """The trials the searcher holds back now (PAUSED here: Tune starts every PENDING trial
        it can, but a PAUSED one only when the scheduler chooses it); a trial it lets go gets its
        config first."""
        if self.comeback is None:
            return set()
        out = set()
        for trial in tune_controller.get_trials():
            if trial.status not in (Trial.PENDING, Trial.PAUSED):
                continue
            verdict = self.comeback(trial.trial_id)
            if verdict is False:
                out.add(trial.trial_id)
                if trial.status == Trial.PENDING:
                    tune_controller._set_trial_status(trial, Trial.PAUSED)
                    held_before_start.add(trial.trial_id)
            elif verdict:
                trial.set_config(verdict)
        return out

    def choose_trial_to_run(self, tune_controller) -> Any | None:
        return next_to_start(tune_controller, self.held(tune_controller))


class PerUnitScheduler(SweepFIFO):
    """One scheduler per (cell, seed), made by ``factory(key)`` when the unit's first trial arrives.
    Trials are started in FIFO order; results, completions and removals go to the trial's own.

    ``store``: where the units' schedulers are kept, when they hold what they have seen (ASHA's
    rungs): the searcher's ``unit_schedulers``, which Tune saves with the experiment and a resume
    restores. Tune keeps no scheduler's state of its own: a resumed ASHA started with empty rungs,
    and let a trial through a rung at which the uninterrupted run had stopped it."""

    def __init__(
        self,
        factory: Callable[[tuple[str, Any]], TrialScheduler],
        metric: str,
        mode: str,
        comeback: Callable[[str], Any] | None = None,
        store: dict[Any, Any] | None = None,
    ) -> None:
        super().__init__(comeback)
        self.factory = factory
        self._metric, self._mode = metric, mode
        self.schedulers: dict[Any, TrialScheduler] = {} if store is None else store

    def set_search_properties(self, metric: str | None, mode: str | None, **spec) -> bool:
        return True  # built with its metric and mode

    def _of(self, trial) -> TrialScheduler:
        key = unit_key(trial.config)
        if key not in self.schedulers:
            self.schedulers[key] = self.factory(key)
        return self.schedulers[key]

    def on_trial_add(self, tune_controller, trial) -> None:
        adopt(trial)
        self._of(trial).on_trial_add(tune_controller, trial)

    def on_trial_error(self, tune_controller, trial) -> None:
        self._of(trial).on_trial_error(tune_controller, trial)

    def on_trial_result(self, tune_controller, trial, result: dict) -> str:
        return self._of(trial).on_trial_result(tune_controller, trial, result)

    def on_trial_complete(self, tune_controller, trial, result: dict) -> None:
        self._of(trial).on_trial_complete(tune_controller, trial, result)

    def on_trial_remove(self, tune_controller, trial) -> None:
        self._of(trial).on_trial_remove(tune_controller, trial)

    def choose_trial_to_run(self, tune_controller) -> Any | None:
        """A trial a rule promotes from where it waits (``promotions``: the Pareto rung rule with
        ``promotion: wait``) first, then FIFO's choice (:mod:`.placement`); a trial still waiting
        at a rung is never chosen (it is PAUSED until its rule promotes or stops it), nor one the
        searcher holds."""
        held = self.held(tune_controller)
        promoted = [
            t
            for s in list(self.schedulers.values())
            for t in getattr(s, "promotions", lambda _c: [])(tune_controller)
        ]
        if promoted:
            return promoted[0]
        waiting = {tid for s in self.schedulers.values() for tid in getattr(s, "waiting", {})}
        return next_to_start(tune_controller, waiting | held)

    def debug_string(self) -> str:
        count = sum(
            1 for key in self.schedulers if isinstance(key, tuple) and key[:1] == ("scheduler",)
        )
        return f"early stopping per (cell, seed): {count} scheduler(s)"


def unit_asha(
    metric: str, mode: str, max_t: int, grace_period: int, reduction_factor: float
) -> ASHAScheduler:
    """One unit's ASHA, its rungs in validation reports. ``max_t`` ends the rungs, not the trials
    (``stop_last_trials=False``): a trial that passes every rung trains to its own last step, as
    under configurations' rungs (:class:`~sweeps.schedulers.config_rungs.ConfigRungs`); Ray's
    default stopped every trial at ``max_t``, so a smoke run (``max_t: 2``) lengthened by ``--set``
    ended all its trials, the best included, at their second report."""
    return ASHAScheduler(
        metric=metric,
        mode=mode,
        time_attr="training_iteration",
        max_t=max_t,
        grace_period=grace_period,
        reduction_factor=reduction_factor,
        stop_last_trials=False,
    )


def make_scheduler(sweep: Sweep, searcher: Any = None) -> TrialScheduler:
    """FIFO, or ASHA per (cell, seed) (``early_terminate.type: asha``), or the Pareto rung rule
    per (cell, seed) (``pareto``: :mod:`sweeps.schedulers.pareto_rungs`, reading the objectives the way the
    multi-objective ``searcher`` does). One unit of ``grace_period``/``max_t`` is one validation report."""
    et = sweep.spec.early_terminate
    if et.type == "pareto":
        first = sweep.spec.objectives[0]
        factory = pareto_rungs_factory(
            sweep,
            searcher.reader,
            searcher.rung_log,
            reports_per_trial(sweep.spec),
            searcher.rung_state,
            searcher.samples_left,
        )
        return PerUnitScheduler(factory, first.name, "max" if first.goal == "maximize" else "min")
    metric, mode = sweep.spec.metric.name, sweep.spec.metric.mode
    comeback = getattr(searcher, "comeback", None)
    if et.type != "asha":
        return SweepFIFO(comeback)
    max_t = et.max_t or max(et.grace_period, reports_per_trial(sweep.spec))
    if sweep.spec.per_configuration and not configuration_rungs(sweep.spec):
        # no rung to compare configurations at (one a cell, or none before the end): the seeds
        # run to the end, as --dry-run says, and fused where the plan fused them; ConfigRungs
        # would pause a seed at a rung until its siblings came, which a fused group cannot
        return SweepFIFO(comeback)
    if sweep.spec.per_configuration:  # all of a configuration's seeds stopped together
        return ConfigRungs(
            metric,
            mode,
            len(sweep.spec.seed_values),
            min(et.grace_period, max_t),
            et.reduction_factor,
            max_t,
            sweep.spec.trainer.max_steps,
            searcher.rung_state,
        )

    def asha(_key: tuple[str, Any]) -> TrialScheduler:
        return unit_asha(metric, mode, max_t, min(et.grace_period, max_t), et.reduction_factor)

    store = getattr(searcher, "unit_schedulers", None)  # saved and restored with the searcher
    return PerUnitScheduler(asha, metric, mode, comeback, store)
