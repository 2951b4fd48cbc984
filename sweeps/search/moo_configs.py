"""Configurations judged over seeds in a multi-objective study (``objectives`` with ``seeds:
{values: [...], per_configuration: true}``): one multi-objective Optuna study per cell
(``<sweep>/<cell slug>``, as :mod:`sweeps.search.configs`), each sampled configuration trained once per
seed, and Optuna told, per objective, the ``objective`` aggregate over the seeds (the mean, or
``lcb``: each objective's pessimistic end of its 95% t-interval) -- a vector, with each constraint's
violation averaged over the seeds. Each seed's objective vector is the user attribute
``seed=<s>``; the aggregate at each step every seed has reported is the user attribute
``intermediate`` (``{step: [v1, v2]}``, as :mod:`sweeps.search.moo` keeps it).

Not yet here: early stopping (``early_terminate: pareto`` compares single trials per (cell, seed))
and constraints relative to a baseline model (``of:``); ``--dry-run`` refuses both with this mode.
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np

from sweeps.plan.units import Unit
from sweeps.report.selection import aggregate
from sweeps.search.configs import ConfigSearcher, cell_study_name
from sweeps.search.moo_studies import ObjectiveReader


class MooConfigSearcher(ConfigSearcher):
    """:class:`~sweeps.search.configs.ConfigSearcher` with an objective vector (see the module)."""

    def __init__(
        self,
        units: list[Unit],
        sweep: Any,
        space: dict[str, Any],
        journal: str,
        reader: ObjectiveReader,
        wandb_enabled: bool,
    ) -> None:
        spec = sweep.spec
        self.modes = ["max" if o.goal == "maximize" else "min" for o in spec.objectives]
        super().__init__(
            units,
            num_samples=spec.num_samples,
            metric=spec.objectives[0].name,
            mode=self.modes[0],
            space=space,
            journal=journal,
            studies=[cell_study_name(sweep.name, c.slug) for c in sweep.cells],
            objective=spec.seeds.objective,
            sampler=spec.search.sampler,
            sampler_seed=spec.search.seed,
            wandb_enabled=wandb_enabled,
        )
        self.directions = [o.goal for o in spec.objectives]
        self.constraints = list(spec.constraints)
        self.reader = reader
        self.trial_configs: dict[str, dict[str, Any]] = {}  # Ray trial id -> its config

    def suggest(self, trial_id: str) -> dict | None:
        config = super().suggest(trial_id)
        if isinstance(config, dict):
            self.trial_configs[trial_id] = config
        return config

    def _aggregate(self, vectors: list[list[float]]) -> list[float]:
        return [
            aggregate([v[d] for v in vectors], self.objective, mode)
            for d, mode in enumerate(self.modes)
        ]

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        entry = self.live.get(trial_id)
        values = self.reader(self.trial_configs.get(trial_id, {}), result) if entry else None
        if values is None:
            return
        i, number, storage_id = entry
        config = self.configs[(self.units[i].index, number)]
        step = str(int(result.get("step", result.get("training_iteration", 0))))
        at = config["curve"].setdefault(step, {})
        at[str(self.units[i].seed)] = values
        full = {
            s: self._aggregate(list(seeds.values()))
            for s, seeds in config["curve"].items()
            if len(seeds) == len(self.seeds_of[self.units[i].index])
        }
        if full:
            try:
                self._get_storage().set_trial_user_attr(storage_id, "intermediate", full)
            except RuntimeError:
                pass  # already told

    def on_trial_complete(
        self, trial_id: str, result: dict | None = None, error: bool = False
    ) -> None:
        """A seed ended: its vector and state become ``seed=<s>``; once every seed has ended Optuna
        is told the aggregate vector (FAIL if a seed failed or has no value, PRUNED if one stopped
        before its last step), with the seeds' mean violation of each constraint."""
        import optuna

        if not error and result:
            self.on_trial_result(trial_id, result)
        entry = self.live.pop(trial_id, None)
        trial_config = self.trial_configs.pop(trial_id, {})
        if entry is None:
            return
        i, number, storage_id = entry
        unit, config = self.units[i], self.configs[(self.units[i].index, number)]
        result = result or {}
        values = None if error else self.reader(trial_config, result)
        step = int(result.get("step", 0) or 0)
        if values is None:
            state = "FAIL"
        elif unit.max_steps is not None and step < unit.max_steps and not result.get("converged"):
            state = "PRUNED"
        else:
            state = "COMPLETE"
        violations = {}
        for c in self.constraints if values is not None else ():
            value = self.reader.value(trial_config, result, c.name)
            violations[c.label] = min(1e9 if value is None else c.violation(float(value)), 1e9)
        outcome = {"ray_trial_id": trial_id, "value": values, "state": state, "step": step}
        config["outcomes"][str(unit.seed)] = {**outcome, "violations": violations}
        storage = self._get_storage()
        try:
            storage.set_trial_user_attr(storage_id, f"seed={unit.seed}", outcome)
        except RuntimeError:
            return  # told before a restart
        if len(config["outcomes"]) < len(self.seeds_of[unit.index]):
            return
        outcomes = list(config["outcomes"].values())
        study = self._cell_study(unit.index)
        states = {o["state"] for o in outcomes}
        if "FAIL" in states:
            study.tell(number, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
            return
        if "PRUNED" in states:
            study.tell(number, state=optuna.trial.TrialState.PRUNED, skip_if_finished=True)
            return
        vectors = [o["value"] for o in outcomes]
        trial = optuna.trial.Trial(study, storage_id)
        for c in self.constraints:
            trial.set_constraint(
                c.label, float(np.mean([o["violations"].get(c.label, 1e9) for o in outcomes]))
            )
        storage.set_trial_user_attr(storage_id, "seed_values", vectors)
        storage.set_trial_user_attr(storage_id, "steps", step)
        study.tell(number, self._aggregate(vectors), skip_if_finished=True)

    def save(self, checkpoint_path: str) -> None:
        super().save(checkpoint_path)
        with open(checkpoint_path + ".moo", "wb") as f:
            pickle.dump({"trial_configs": self.trial_configs}, f)

    def restore(self, checkpoint_path: str) -> None:
        super().restore(checkpoint_path)
        try:
            with open(checkpoint_path + ".moo", "rb") as f:
                self.trial_configs = pickle.load(f)["trial_configs"]
        except OSError:
            self.trial_configs = {}

    def _cell_study(self, cell: int):
        if cell not in self._cell_studies:
            import optuna

            study = optuna.create_study(
                study_name=self.studies[cell],
                storage=self._get_storage(),
                directions=list(self.directions),
                load_if_exists=True,
            )
            seq = np.random.SeedSequence([self.sampler_seed, cell, len(study.trials), 32])
            seed = int(seq.generate_state(1)[0])
            if self.sampler == "nsga2":
                study.sampler = optuna.samplers.NSGAIISampler(
                    seed=seed, population_size=max(2, min(50, self.num_samples // 3))
                )
            elif self.sampler == "random":
                study.sampler = optuna.samplers.RandomSampler(seed=seed)
            else:
                study.sampler = optuna.samplers.TPESampler(
                    seed=seed, n_startup_trials=max(2, min(10, self.num_samples // 3))
                )
            study.set_metric_names(list(self.reader.names))
            self._cell_studies[cell] = study
        return self._cell_studies[cell]


def make_moo_config_searcher(sweep: Any, paths: Any, units: list[Unit], wandb_mode: str):
    """The probe stage where an objective needs it (:func:`sweeps.timing.probe.build_estimates`),
    then the :class:`MooConfigSearcher` of the sweep."""
    from sweeps.layout import OPTUNA_JOURNAL
    from sweeps.spec.objectives import PROBED
    from sweeps.spec.search_space import optuna_distributions

    spec = sweep.spec
    out = paths.output / sweep.name
    out.mkdir(parents=True, exist_ok=True)
    named = {o.name for o in spec.objectives} | {c.name for c in spec.constraints}
    estimates = None
    if named & set(PROBED):
        from sweeps.timing.probe import build_estimates

        estimates = build_estimates(sweep, out)
    return MooConfigSearcher(
        units,
        sweep,
        optuna_distributions(spec.parameters, sweep.param_columns),
        str(out / OPTUNA_JOURNAL),
        ObjectiveReader(sweep, estimates),
        wandb_enabled=wandb_mode != "disabled",
    )
