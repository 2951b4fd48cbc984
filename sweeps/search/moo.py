"""The multi-objective kind (``objectives``, ``constraints``): one multi-objective Optuna study per
unit or cell, sampled through Ray Tune. :class:`MultiObjective` answers what
:class:`sweeps.search.objective.SingleObjective` answers for one metric:

- **objective values** from each report (:class:`ObjectiveReader`): the trained metrics as
  reported, ``decode_seconds`` (and the training cost figures) from the probe
  (:mod:`sweeps.timing.probe`) -- known before training, so the sampler and the rung rule
  (:mod:`sweeps.schedulers.pareto_rungs`) have every objective at every report; each trial's
  estimates are its user attributes ``<figure>_estimate``;
- **intermediate values**: a multi-objective ``trial.report`` raises in Optuna, so each report's
  vector is kept in the trial's user attribute ``intermediate`` (``{step: [v1, v2]}``). Not as
  Optuna's own intermediate values: Optuna 5's TPE ranks PRUNED trials by their last intermediate
  value through ``study.direction``, which raises in a multi-objective study;
- **constraints** (``trial.set_constraint``, which Optuna 5's TPE and NSGA-II read): absolute
  bounds, and bounds relative to a baseline model trained once per (cell, seed) before that unit's
  search trials start (:mod:`sweeps.search.baselines`);
- **no retraining of a sample**: a (cell, seed) trains with one seed, so a sample whose parameters
  repeat an earlier trial's would train the same model again; it is told the earlier trial's outcome
  (user attribute ``duplicate_of``) and Optuna is asked again. When the earlier trial is still
  running (or waiting at a rung), the repeat stays RUNNING in Optuna and is told the same outcome
  when the earlier one ends, so the journal holds no FAIL for a sample that never failed.
  Configurations judged over seeds train each sample on every seed, and ask without this rule.

``steps`` (training steps spent) is on every trial, for the hypervolume-against-compute history.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import optuna

from sweeps.report.selection import aggregate
from sweeps.search.journal import Journal
from sweeps.search.seeding import LOST, PerTrial
from sweeps.spec.objectives import DECODE_SECONDS, PROBED, baseline_of
from sweeps.spec.search_schema import estimate_column

#: asks of Optuna before a sample that repeats an earlier one is trained anyway (space used up)
MAX_REPEAT_ASKS = 20


class ObjectiveReader:
    """(trial config, result) -> the objective values; ``decode_seconds`` from the probe's table."""

    def __init__(self, sweep: Any, estimates: Any) -> None:
        self.names = [o.name for o in sweep.spec.objectives]
        self.estimates = estimates
        self.cells = {p.cell.name: p for p in sweep.plans}  # as the spec resolved them
        self.param_columns = sweep.param_columns

    def plan(self, config: dict[str, Any]) -> tuple[dict, dict, int]:
        """The task, model and seed a trial's config stands for: its cell's plan with the samples
        (and a baseline's settings) written in, as the trainable gets it."""
        params = {
            key: _plain(config[name]) for name, key in self.param_columns.items() if name in config
        }
        plan = self.cells[config["cell"]].with_values(
            int(config.get("seed", 0)), {**params, **(config.get("set") or {})}, params, config
        )
        return plan.task, plan.model, plan.seed

    def decode_estimate(self, config: dict[str, Any]) -> float | None:
        return self.estimate(config, DECODE_SECONDS)

    def estimate(self, config: dict[str, Any], name: str) -> float | None:
        """The probe's figure ``name`` (one of ``PROBED``) for a trial's architecture."""
        if self.estimates is None:
            return None
        return self.estimates.estimate(*self.plan(config), name=name)

    def value(self, config: dict[str, Any], result: dict[str, Any] | None, name: str) -> Any:
        """An objective's or constraint's value: the probe's for a cost figure, else the report's."""
        return self.estimate(config, name) if name in PROBED else (result or {}).get(name)

    def __call__(self, config: dict[str, Any], result: dict[str, Any]) -> list[float] | None:
        out = []
        for name in self.names:
            value = self.value(config, result, name)
            if value is None:
                return None
            out.append(float(value))
        return out


class MultiObjective:
    """Several objectives (module docstring). Args: ``sweep`` (its objectives, constraints and
    sampler), ``reader``, ``num_samples`` (a study's budget: TPE's and NSGA-II's start), ``dedupe``
    (the no-retraining rule: per (cell, seed) studies only), ``baselines``: the baseline models'
    metrics the relative constraints are measured against (:class:`sweeps.search.baselines.Baselines`)."""

    def __init__(
        self,
        sweep: Any,
        reader: ObjectiveReader,
        num_samples: int,
        dedupe: bool = True,
        baselines: Any = None,
    ) -> None:
        spec = sweep.spec
        self.goals = [o.goal for o in spec.objectives]
        self.modes = ["max" if g == "maximize" else "min" for g in self.goals]
        self.metric, self.mode = spec.objectives[0].name, self.modes[0]
        self.constraints = list(spec.constraints)
        self.baseline = baseline_of(spec)
        self.sampler = spec.search.sampler
        self.num_samples = num_samples
        self.reader = reader
        self.names = list(reader.names)
        self.dedupe = dedupe
        self.baselines = baselines
        # (key, Optuna number of a trial still running) -> its repeats asked meanwhile: (number, storage id)
        self.repeats: dict[tuple[Any, int], list[tuple[int, int]]] = {}

    @property
    def directions(self) -> list[str]:
        return list(self.goals)

    def new_study(self, storage: Any, name: str, seed_of: Callable[[int], int]) -> Any:
        study = optuna.create_study(
            study_name=name, storage=storage, directions=self.directions, load_if_exists=True
        )
        study.sampler = PerTrial(self.make_sampler, seed_of)  # trial k drawn with seed_of(k)
        with warnings.catch_warnings():  # experimental since Optuna 3.2, and the names are
            # what optuna-dashboard and `optuna trials` label the objectives with
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(list(self.names))
        return study

    def make_sampler(self, seed: int) -> Any:
        """The sweep's ``search.sampler``, seeded with ``seed``."""
        if self.sampler == "nsga2":
            return optuna.samplers.NSGAIISampler(
                seed=seed, population_size=max(2, min(50, self.num_samples // 3))
            )
        if self.sampler == "random":
            return optuna.samplers.RandomSampler(seed=seed)
        # few samples per study: TPE's model from a third of the budget, not after 10 random ones
        return optuna.samplers.TPESampler(
            seed=seed, n_startup_trials=max(2, min(10, self.num_samples // 3))
        )

    # -- asking ------------------------------------------------------------------------------

    def ask(self, study: Any, space: dict[str, Any], key: Any) -> Any:
        """``study.ask``, again while the sample repeats an earlier trial of the study (told that
        trial's outcome, ``duplicate_of``), at most :data:`MAX_REPEAT_ASKS` times."""
        if not self.dedupe:
            return study.ask(space)
        state = optuna.trial.TrialState
        for _ in range(MAX_REPEAT_ASKS):
            trial = study.ask(space)
            earlier = next(
                (
                    t
                    for t in study.get_trials(deepcopy=False)
                    if t.number != trial.number
                    and t.params == trial.params
                    and "duplicate_of" not in t.user_attrs
                    and LOST not in t.user_attrs  # asked again: its configuration is this one
                ),
                None,
            )
            if earlier is None:
                return trial
            trial.set_user_attr("duplicate_of", earlier.number)
            if earlier.state == state.COMPLETE:
                for name, value in earlier.constraints.items():
                    trial.set_constraint(name, value)
                study.tell(trial, earlier.values)
            elif earlier.state == state.PRUNED:
                study.tell(trial, state=state.PRUNED)
            elif earlier.state == state.RUNNING:  # told the same when it ends (told)
                self.repeats.setdefault((key, earlier.number), []).append(
                    (trial.number, trial._trial_id)
                )
            else:  # the earlier trial failed
                study.tell(trial, state=state.FAIL)
        # the sampler keeps repeating itself (a small space used up): train it again
        return study.ask(space)

    def on_ask(self, trial: Any, config: dict[str, Any]) -> None:
        """The probe's figures for this architecture, where it measured them."""
        for name in PROBED:
            estimate = self.reader.estimate(config, name)
            if estimate is not None:
                trial.set_user_attr(estimate_column(name), estimate)

    # -- values ------------------------------------------------------------------------------

    def value(self, config: dict[str, Any], result: dict[str, Any] | None) -> list[float] | None:
        return self.reader(config, result or {})

    def aggregate(self, vectors: list[list[float]], how: str) -> list[float]:
        return [aggregate([v[d] for v in vectors], how, mode) for d, mode in enumerate(self.modes)]

    def as_result(self, value: list[float], step: int) -> dict[str, Any]:
        return {**dict(zip(self.names, value)), "step": step}

    def report(
        self, journal: Journal, storage_id: int, step: int, value: Any, curve: dict[str, Any]
    ) -> None:
        """Not ``set_trial_intermediate_value``: TPE ranks PRUNED trials by it with
        ``study.direction``, which raises in a multi-objective study. The curve, as an attribute."""
        journal.set_attr(storage_id, "intermediate", dict(curve))

    def violations(self, unit: int, config: dict[str, Any], result: dict[str, Any]) -> dict:
        """Each constraint's violation (<= 0 feasible); a missing value or baseline is a violation."""
        baseline = self.baselines.metrics(unit) if self.baselines is not None else {}
        out = {}
        for c in self.constraints:
            value = self.reader.value(config, result, c.name)
            v = 1e9 if value is None else c.violation(float(value), baseline.get(c.name))
            out[c.label] = min(v, 1e9)
        return out

    # -- telling -----------------------------------------------------------------------------

    def complete(
        self, study: Any, number: int, storage_id: int, value: Any, violations: dict
    ) -> None:
        trial = optuna.trial.Trial(study, storage_id)
        for name, violation in violations.items():
            try:
                trial.set_constraint(name, violation)
            except RuntimeError:
                pass  # told before a restart
        study.tell(number, list(value), skip_if_finished=True)

    def record_steps(self, journal: Journal, storage_id: int, step: int) -> None:
        journal.set_attr(storage_id, "steps", int(step))

    def told(self, study: Any, key: Any, number: int) -> None:
        """The repeats of trial ``number`` asked while it ran: told its outcome, as it was told."""
        repeats = self.repeats.pop((key, number), [])
        if not repeats:
            return
        done = next(t for t in study.get_trials(deepcopy=False) if t.number == number)
        for repeat, storage_id in repeats:
            if done.state == optuna.trial.TrialState.COMPLETE:
                trial = optuna.trial.Trial(study, storage_id)
                for name, value in done.constraints.items():
                    trial.set_constraint(name, value)
                study.tell(repeat, done.values, skip_if_finished=True)
            else:
                study.tell(repeat, state=done.state, skip_if_finished=True)

    def held(self, live: set[tuple[Any, int]]) -> set[int]:
        """A repeat waits RUNNING for its earlier trial, when that one is live (see ``ask``)."""
        return {sid for key, held in self.repeats.items() if key in live for _, sid in held}

    def state(self) -> dict[str, Any]:
        return {"repeats": self.repeats}

    def load(self, state: dict[str, Any] | None) -> None:
        self.repeats = (state or {}).get("repeats", {})


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value
