"""The multi-objective searcher: one Optuna multi-objective study per (cell, seed), sampled
through Ray Tune.

:class:`MooSearcher` is :class:`sweeps.search.base.SweepSearcher` with two directions and:

- **objective values** from each report: the trained metrics as reported, ``decode_seconds`` from
  the decode probe (:mod:`.probe`) -- known before training, so the sampler and the rung rule
  (:mod:`.rungs`) have both objectives at every report;
- **intermediate values**: a multi-objective ``trial.report`` raises in Optuna, so each report's
  vector is kept in the trial's user attribute ``intermediate`` (``{step: [v1, v2]}``). Not as
  Optuna's own intermediate values: Optuna 5's TPE ranks PRUNED trials by their last intermediate
  value through ``study.direction``, which raises in a multi-objective study (seen here);
- **constraints** (``trial.set_constraint``, which Optuna 5's TPE and NSGA-II read; their
  ``constraints_func`` argument is deprecated): absolute bounds, and bounds relative to a baseline
  model trained once per (cell, seed) before that unit's search trials start (Tune trial config
  ``set: {model.attention: bahdanau}``; its metrics go on the study as the ``baseline`` user attribute);
- **PRUNED** trials: stopped by the rung rule, told ``TrialState.PRUNED``, with the rung decision in
  the user attribute ``rung``;
- **no retraining of a sample**: a (cell, seed) trains with one seed, so a sample whose parameters
  repeat an earlier trial's would train the same model again; it is told the earlier trial's outcome
  (user attribute ``duplicate_of``) and Optuna is asked again. When the earlier trial is still
  running (or waiting at a rung), the repeat stays RUNNING in Optuna and is told the same outcome
  when the earlier one ends, so the journal holds no FAIL for a sample that never failed.

``steps`` (training steps spent) is on every trial, for the hypervolume-against-compute history.
The Optuna and baseline bookkeeping behind these lives in :mod:`sweeps.search.moo_studies`.
"""

from __future__ import annotations

import pickle
from typing import Any

from sweeps.layout import OPTUNA_JOURNAL
from sweeps.plan.units import Unit
from sweeps.search.base import SweepSearcher
from sweeps.search.moo_studies import ObjectiveReader, StudyBook
from sweeps.spec import unit_key
from sweeps.spec.objectives import PROBED, baseline_of
from sweeps.spec.search_space import optuna_distributions


class MooSearcher(StudyBook, SweepSearcher):
    """Multi-objective :class:`SweepSearcher` (see the module docstring)."""

    def __init__(
        self,
        units: list[Unit],
        num_samples: int,
        sweep: Any,
        space: dict[str, Any],
        journal: str,
        reader: ObjectiveReader,
        wandb_enabled: bool,
        rung_log: dict | None = None,
    ) -> None:
        spec = sweep.spec
        first = spec.objectives[0]
        super().__init__(
            units,
            num_samples,
            first.name,
            "max" if first.goal == "maximize" else "min",
            space=space,
            journal=journal,
            sampler=spec.search.sampler,
            sampler_seed=spec.search.seed,
            wandb_enabled=wandb_enabled,
        )
        self.directions = [o.goal for o in spec.objectives]
        self.constraints = list(spec.constraints)
        self.baseline = baseline_of(spec)
        self.reader = reader
        self.rung_log = rung_log if rung_log is not None else {}
        # the Pareto rung rule's state per (cell, seed) (sweeps.schedulers.pareto_rungs), saved and restored here
        self.rung_state: dict[Any, dict] = {}
        # per unit: None (not started), "running", "failed", or the baseline's metrics
        self.baseline_state: list[Any] = [None] * len(units)
        self.baseline_ids: dict[str, int] = {}
        self.configs: dict[str, dict] = {}
        self.curves: dict[str, dict[str, list[float]]] = {}
        self.max_concurrent = 0  # 0: no cap (Tune's max_concurrent_trials sets it)
        # (unit, Optuna number of a trial still running) -> its repeats asked meanwhile: (number, storage id)
        self.repeats: dict[tuple[int, int], list[tuple[int, int]]] = {}

    # -- concurrency: trials waiting at a rung (PAUSED) hold no slot -----------------------------

    def set_max_concurrency(self, max_concurrent: int) -> bool:
        """Cap the trials running at once here, rather than in Tune's ``ConcurrencyLimiter``, which
        counts a trial paused at a rung (``promotion: wait``) as running: with every slot's trial
        waiting for the rung to fill, nothing would start the trials that fill it."""
        self.max_concurrent = int(max_concurrent or 0)
        return True

    def waiting(self) -> set[str]:
        return {tid for state in self.rung_state.values() for tid in state.get("waiting", {})}

    def samples_left(self, key: Any) -> bool:
        """Whether this searcher will start more trials of the (cell, seed) ``key``."""
        return any(
            unit_key(u.config) == tuple(key) and self.started[i] < self.num_samples
            for i, u in enumerate(self.units)
        )

    # -- Tune's Searcher interface -----------------------------------------------------------

    def suggest(self, trial_id: str) -> dict | None:
        if (
            self.max_concurrent
            and len(set(self.live) | set(self.baseline_ids)) - len(self.waiting())
            >= self.max_concurrent
        ):
            return None
        if self.baseline:
            waiting = [i for i, s in enumerate(self.baseline_state) if s is None]
            if waiting:
                i = min(waiting, key=lambda j: (self.started[j], j))
                self.baseline_state[i] = "running"
                self.baseline_ids[trial_id] = i
                return {**self.units[i].config, "set": dict(self.baseline)}
        open_units = [i for i, n in enumerate(self.started) if n < self.num_samples]
        if not open_units:
            return SweepSearcher.FINISHED
        ready = [
            i
            for i in open_units
            if not self.baseline or self.baseline_state[i] not in (None, "running")
        ]
        if not ready:
            return None  # the baselines of the open units are still training: ask again later
        i = min(ready, key=lambda j: (self.started[j], j))
        trial = self._ask_new(i)
        trial.set_user_attr("ray_trial_id", trial_id)
        if self.wandb_enabled:
            trial.set_user_attr("wandb_run_id", trial_id)
        config = {**self.units[i].config, **trial.params}
        for name in PROBED:  # the probe's figures for this architecture, where it measured them
            estimate = self.reader.estimate(config, name)
            if estimate is not None:
                trial.set_user_attr(f"{name}_estimate", estimate)
        self.started[i] += 1
        self.live[trial_id] = (i, trial.number, trial._trial_id)
        self.configs[trial_id] = config
        return config

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        entry = self.live.get(trial_id)
        values = self.reader(self.configs.get(trial_id, {}), result) if entry else None
        if values is None:
            return
        step = int(result.get("step", result.get("training_iteration", 0)))
        curve = self.curves.setdefault(trial_id, {})
        curve[str(step)] = values
        storage = self._get_storage()
        try:  # not set_trial_intermediate_value: TPE ranks PRUNED trials by it with study.direction (raises here)
            storage.set_trial_user_attr(entry[2], "intermediate", dict(curve))
        except RuntimeError:
            pass  # already finished

    def on_trial_complete(
        self, trial_id: str, result: dict | None = None, error: bool = False
    ) -> None:
        if trial_id in self.baseline_ids:
            self._baseline_done(self.baseline_ids.pop(trial_id), result, error)
            return
        if not error and result:
            self.on_trial_result(trial_id, result)
        entry = self.live.pop(trial_id, None)
        config = self.configs.pop(trial_id, {})
        curve = self.curves.pop(trial_id, None)
        if entry is None:
            return
        if not error and not result and self.rung_log.get(trial_id, {}).get("waited"):
            result = self._last_report(
                curve, entry[2]
            )  # stopped while it waited at a rung: Tune gives no result
        import optuna

        i, number, storage_id = entry
        study = self._study(i)
        storage = self._get_storage()
        result = result or {}
        values = None if error else self.reader(config, result)
        max_steps = self.units[i].max_steps
        state = optuna.trial.TrialState
        try:
            if "step" in result:
                storage.set_trial_user_attr(storage_id, "steps", int(result["step"]))
            if trial_id in self.rung_log:
                storage.set_trial_user_attr(storage_id, "rung", self.rung_log[trial_id])
        except RuntimeError:
            pass
        if values is None:
            study.tell(number, state=state.FAIL, skip_if_finished=True)
        elif (
            max_steps is not None
            and int(result.get("step", max_steps)) < max_steps
            and not result.get("converged")
        ):
            study.tell(
                number, state=state.PRUNED, skip_if_finished=True
            )  # (a stop_when convergence is COMPLETE)
        else:
            trial = optuna.trial.Trial(study, storage_id)
            for name, violation in self.violations(i, config, result).items():
                try:
                    trial.set_constraint(name, violation)
                except RuntimeError:
                    pass
            study.tell(number, values, skip_if_finished=True)
        self._tell_repeats(i, number)

    def save(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "wb") as f:
            pickle.dump(
                {
                    "started": self.started,
                    "live": self.live,
                    "baseline_state": self.baseline_state,
                    "baseline_ids": self.baseline_ids,
                    "configs": self.configs,
                    "rung_state": self.rung_state,
                    "rung_log": self.rung_log,
                    "repeats": self.repeats,
                },
                f,
            )

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as f:
            state = pickle.load(f)
        self.started, self.live = state["started"], state["live"]
        self.baseline_state = [
            None if s == "running" else s for s in state.get("baseline_state", self.baseline_state)
        ]
        self.baseline_ids, self.configs = {}, state.get("configs", {})
        self.repeats = state.get("repeats", {})
        # in place: the scheduler's rules hold these very dicts (both came out of one tuner.pkl)
        for key, saved in state.get("rung_state", {}).items():
            mine = self.rung_state.setdefault(key, {})
            mine.clear()
            mine.update(saved)
        self.rung_log.clear()
        self.rung_log.update(state.get("rung_log", {}))
        self._fail_orphans()


def make_moo_searcher(sweep: Any, paths: Any, units: list[Unit], wandb_mode: str) -> MooSearcher:
    """The probe stage (:func:`.probe.build_estimates`), then the searcher of a sweep with
    ``objectives``: one multi-objective Optuna study per (cell, seed) in ``optuna.journal``."""
    import os

    from sweeps.timing.probe import build_estimates

    spec = sweep.spec
    out = paths.output / sweep.name
    out.mkdir(parents=True, exist_ok=True)
    # Tune keeps one trial pending at a time for a search algorithm: the cores idle between trials
    os.environ.setdefault(
        "TUNE_MAX_PENDING_TRIALS_PG", str(max(2, spec.max_concurrent_trials or 2))
    )
    named = {o.name for o in spec.objectives} | {c.name for c in spec.constraints}
    estimates = build_estimates(sweep, out) if named & set(PROBED) else None
    space = optuna_distributions(spec.parameters, sweep.param_columns)
    return MooSearcher(
        units,
        spec.num_samples,
        sweep,
        space,
        str(out / OPTUNA_JOURNAL),
        ObjectiveReader(sweep, estimates),
        wandb_enabled=wandb_mode != "disabled",
    )
