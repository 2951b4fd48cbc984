"""The multi-objective searcher's bookkeeping, apart from Tune's interface
(:class:`sweeps.search.moo.MooSearcher` holds that):

- :class:`ObjectiveReader`: a trial's objective values from its config and report
  (``decode_seconds``, ``train_step_seconds``, ``train_peak_mb`` from the probe's table, :mod:`.probe`);
- :class:`StudyBook`: the searcher's Optuna side: one multi-objective study per (cell, seed) with
  its sampler, asking again while a sample repeats an earlier trial (:data:`MAX_REPEAT_ASKS`) and
  telling the repeats that earlier trial's outcome, each constraint's violation, and the baseline
  model's metrics that relative constraints are measured against.
"""

from __future__ import annotations

from typing import Any

from sweeps.spec.objectives import DECODE_SECONDS, PROBED

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


class StudyBook:
    """The Optuna and baseline bookkeeping of :class:`sweeps.search.moo.MooSearcher`, which mixes
    it into :class:`sweeps.search.base.SweepSearcher` (its ``_study`` and ``_held_trials`` are
    these). Uses the searcher's state (``units``, ``space``, ``sampler``, ``num_samples``,
    ``directions``, ``constraints``, ``baseline``, ``baseline_state``, ``reader``, ``repeats``,
    ``live``, ``_studies``) and ``SweepSearcher``'s ``unit_seed`` and ``_get_storage``."""

    # -- a trial's outcome: its last report, its repeats, its constraints, the baseline -------

    def _last_report(self, curve: dict | None, storage_id: int) -> dict | None:
        """A trial's last report, objectives by name and its step, from its curve (kept here, or in
        its Optuna trial's ``intermediate`` after a ``--resume``)."""
        curve = (
            curve or self._get_storage().get_trial(storage_id).user_attrs.get("intermediate") or {}
        )
        if not curve:
            return None
        step = max(curve, key=int)
        return {**dict(zip(self.reader.names, curve[step])), "step": int(step)}

    def _tell_repeats(self, i: int, number: int) -> None:
        """The repeats of Optuna trial ``number`` asked while it ran: told its outcome, as it was told."""
        import optuna

        repeats = self.repeats.pop((i, number), [])
        if not repeats:
            return
        study = self._study(i)
        done = next(t for t in study.get_trials(deepcopy=False) if t.number == number)
        for repeat, storage_id in repeats:
            if done.state == optuna.trial.TrialState.COMPLETE:
                trial = optuna.trial.Trial(study, storage_id)
                for name, value in done.constraints.items():
                    trial.set_constraint(name, value)
                study.tell(repeat, done.values, skip_if_finished=True)
            else:
                study.tell(repeat, state=done.state, skip_if_finished=True)

    def _held_trials(self) -> set:
        """A repeat waits RUNNING for its earlier trial, when that one is live (see ``_ask_new``)."""
        live = {(i, number) for i, number, _ in self.live.values()}
        return {sid for key, held in self.repeats.items() if key in live for _, sid in held}

    def violations(self, i: int, config: dict, result: dict) -> dict[str, float]:
        """Each constraint's violation (<= 0 feasible); a missing value or baseline is a violation."""
        state = self.baseline_state[i]
        baseline = state if isinstance(state, dict) else {}
        out = {}
        for c in self.constraints:
            value = self.reader.value(config, result, c.name)
            v = 1e9 if value is None else c.violation(float(value), baseline.get(c.name))
            out[c.label] = min(v, 1e9)
        return out

    def _baseline_done(self, i: int, result: dict | None, error: bool) -> None:
        result = result or {}
        names = {c.name for c in self.constraints if c.of}
        config = self.units[i].config | {"set": self.baseline}
        metrics = {n: self.reader.value(config, result, n) for n in names | set(self.reader.names)}
        ok = not error and all(metrics.get(n) is not None for n in names)
        self.baseline_state[i] = (
            {k: float(v) for k, v in metrics.items() if v is not None} if ok else "failed"
        )
        study = self._study(i)
        study.set_user_attr(
            "baseline",
            {
                "model": self.baseline,
                "metrics": self.baseline_state[i] if ok else None,
                "steps": result.get("step"),
                "failed": not ok,
            },
        )

    # -- Optuna --------------------------------------------------------------------------------

    def _ask_new(self, i: int):
        """``study.ask``, again while the sample repeats an earlier trial of the study (told that
        trial's outcome, ``duplicate_of``), at most :data:`MAX_REPEAT_ASKS` times."""
        import optuna

        study = self._study(i)
        state = optuna.trial.TrialState
        for _ in range(MAX_REPEAT_ASKS):
            trial = study.ask(self.space)
            earlier = next(
                (
                    t
                    for t in study.get_trials(deepcopy=False)
                    if t.number != trial.number
                    and t.params == trial.params
                    and "duplicate_of" not in t.user_attrs
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
            elif earlier.state == state.RUNNING:  # told the same when it ends (_tell_repeats)
                self.repeats.setdefault((i, earlier.number), []).append(
                    (trial.number, trial._trial_id)
                )
            else:  # the earlier trial failed
                study.tell(trial, state=state.FAIL)
        return study.ask(
            self.space
        )  # the sampler keeps repeating itself (a small space used up): train it again

    def _study(self, i: int):
        if i not in self._studies:
            import optuna

            study = optuna.create_study(
                study_name=self.units[i].name,
                storage=self._get_storage(),
                directions=list(self.directions),
                load_if_exists=True,
            )
            seed = self.unit_seed(i, len(study.trials))
            if self.sampler == "nsga2":
                study.sampler = optuna.samplers.NSGAIISampler(
                    seed=seed, population_size=max(2, min(50, self.num_samples // 3))
                )
            elif self.sampler == "random":
                study.sampler = optuna.samplers.RandomSampler(seed=seed)
            else:  # few samples per study: TPE's model from a third of the budget, not after 10 random ones
                study.sampler = optuna.samplers.TPESampler(
                    seed=seed, n_startup_trials=max(2, min(10, self.num_samples // 3))
                )
            study.set_metric_names([o for o in self.reader.names])
            self._studies[i] = study
        return self._studies[i]


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value
