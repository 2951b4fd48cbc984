"""Configurations judged over seeds (``seeds: {values: [...], per_configuration: true}``).

One Optuna study per cell (``<sweep>/<cell slug>``), not per (cell, seed): each configuration Optuna
samples is trained once per seed, one Ray trial per seed with the same sampled values and the
configuration's number (``configuration`` in the trial's config and in results.csv), and Optuna is
told the configuration's aggregate over its seeds (``objective``: the mean, or ``lcb``, the
pessimistic end of the 95% t-interval) once every seed has finished. Each seed's outcome is a user
attribute of the Optuna trial (``seed=<s>``: its Ray trial id, value, state and step); its
intermediate values are the aggregate at each step every seed has reported. The early stopping that
goes with it is :class:`sweeps.schedulers.config_rungs.ConfigRungs`: it stops all of a configuration's
seeds together, at one rung.
"""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np

from sweeps.plan.units import Unit
from sweeps.report.selection import aggregate
from sweeps.search.base import SweepSearcher
from sweeps.spec.search_space import optuna_sampler


def cell_study_name(sweep_name: str, cell_slug: str) -> str:
    return f"{sweep_name}/{cell_slug}"


class ConfigSearcher(SweepSearcher):
    """The searcher of a sweep whose configurations are judged over seeds.

    Args (besides :class:`~sweeps.search.base.SweepSearcher`'s; ``num_samples`` is configurations
    per cell):
        studies: per cell index, its Optuna study's name.
        objective: ``mean`` or ``lcb`` (:func:`aggregate`).
        limit: the most trials running at once, trials paused at a rung not counted (they hold no
            resources while their configuration's other seeds catch up); None: no limit of its own.
        waiting: the rung rule's paused trials (:class:`~sweeps.schedulers.config_rungs.ConfigRungs`), shared.
    """

    def __init__(
        self,
        units: list[Unit],
        num_samples: int,
        metric: str,
        mode: str,
        space: dict[str, Any],
        journal: str,
        studies: list[str],
        objective: str = "mean",
        limit: int | None = None,
        **kw: Any,
    ) -> None:
        super().__init__(units, num_samples, metric, mode, space, journal, **kw)
        self.studies = studies
        self.objective = objective
        self.limit = limit
        self.seeds_of: dict[int, list[int]] = {}  # cell index -> its units' indices, seed order
        for i, u in enumerate(units):
            self.seeds_of.setdefault(u.index, []).append(i)
        self.configs: dict[tuple[int, int], dict[str, Any]] = {}  # (cell, number) -> its state
        self.rung_state: dict[str, Any] = {"waiting": {}, "stopped": {}, "rungs": {}, "values": {}}
        self._cell_studies: dict[int, Any] = {}
        self.fusion_cap = 1  # > 1: a configuration's seeds train fused, at most this many a group

    # -- Tune's Searcher interface -----------------------------------------------------------

    def suggest(self, trial_id: str) -> dict | None:
        running = len(self.live) - len(self.rung_state["waiting"])
        if self.limit is not None and running >= self.limit:
            return None  # asked again when a trial ends or pauses
        # a configuration with seeds still to start comes first: its seeds train side by side
        pending = [(k, c) for k, c in self.configs.items() if c["next"] < len(self.seeds_of[k[0]])]
        if pending:
            (cell, number), entry = pending[0]  # the oldest
        else:
            open_cells = [c for c in self.seeds_of if self._asked(c) < self.num_samples]
            if not open_cells:
                return SweepSearcher.FINISHED
            cost = {c: self.units[self.seeds_of[c][0]].cost for c in open_cells}
            cell = min(open_cells, key=lambda c: (self._asked(c), -cost[c], c))
            trial = self._cell_study(cell).ask(self.space)
            number = trial.number
            entry = self.configs[(cell, number)] = {
                "params": dict(trial.params),
                "storage_id": trial._trial_id,
                "next": 0,
                "outcomes": {},
                "curve": {},
            }
            trial.set_user_attr("objective", self.objective)
        k = entry["next"]
        i = self.seeds_of[cell][k]
        entry["next"] += 1
        config = {**self.units[i].config, **entry["params"], "configuration": number}
        if self.fusion_cap > 1:  # a configuration's seeds train fused (sweeps.fusion)
            from sweeps.plan.fusion import configuration_member

            label = f"{self.studies[cell].split('/', 1)[-1]}#{number}"
            config.update(configuration_member(label, k, len(self.seeds_of[cell]), self.fusion_cap))
        fused = {"fused_with": config["fused_with"]} if "fused_with" in config else {}
        self._get_storage().set_trial_user_attr(
            entry["storage_id"], f"seed={self.units[i].seed}", {"ray_trial_id": trial_id, **fused}
        )
        self.started[i] += 1
        self.live[trial_id] = (i, number, entry["storage_id"])
        return config

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        """A seed's report; the configuration's intermediate value at a step is the aggregate once
        every seed has reported that step."""
        entry = self.live.get(trial_id)
        value = (result or {}).get(self.metric)
        if entry is None or value is None:
            return
        i, number, storage_id = entry
        config = self.configs[(self.units[i].index, number)]
        step = int(result.get("step", result.get("training_iteration", 0)))
        at = config["curve"].setdefault(step, {})
        at[self.units[i].seed] = float(value)
        if len(at) == len(self.seeds_of[self.units[i].index]):
            try:
                self._get_storage().set_trial_intermediate_value(
                    storage_id, step, aggregate(list(at.values()), self.objective, self.mode)
                )
            except RuntimeError:
                pass  # the Optuna trial already finished

    def on_trial_complete(
        self, trial_id: str, result: dict | None = None, error: bool = False
    ) -> None:
        """A seed ended: its outcome becomes the ``seed=<s>`` attribute; once every seed has ended
        Optuna is told the configuration's aggregate (FAIL if a seed failed, PRUNED if the rung
        rule stopped it)."""
        import optuna

        if not error and result:
            self.on_trial_result(trial_id, result)
        entry = self.live.pop(trial_id, None)
        if entry is None:
            return
        i, number, storage_id = entry
        unit, config = self.units[i], self.configs[(self.units[i].index, number)]
        value = (result or {}).get(self.metric)
        step = int((result or {}).get("step", 0) or 0)
        stopped_at = self.rung_state["stopped"].get(f"{unit.config['cell']}#{number}")
        if value is None and isinstance(stopped_at, int) and not error:
            # a seed stopped while it waited at the rung (no result of its own here): its report there
            value = self.rung_state["values"][f"{unit.config['cell']}#{number}"][
                str(stopped_at)
            ].get(str(unit.seed))
            step = max(
                (s for s, at in config["curve"].items() if str(unit.seed) in map(str, at)),
                default=0,
            )
            state = "PRUNED"
        elif error or value is None:
            state = "FAIL"
        elif unit.max_steps is not None and step < unit.max_steps and not result.get("converged"):
            state = "PRUNED"
        else:
            state = "COMPLETE"
        outcome = {"ray_trial_id": trial_id, "value": value, "state": state, "step": step}
        config["outcomes"][str(unit.seed)] = outcome
        storage = self._get_storage()
        try:
            storage.set_trial_user_attr(storage_id, f"seed={unit.seed}", outcome)
        except RuntimeError:
            return  # told before a restart
        if len(config["outcomes"]) < len(self.seeds_of[unit.index]):
            return
        outcomes = config["outcomes"].values()
        values = [o["value"] for o in outcomes if o["value"] is not None]
        study = self._cell_study(unit.index)
        states = {o["state"] for o in outcomes}
        if "FAIL" in states:
            study.tell(number, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
        elif "PRUNED" in states:
            study.tell(number, state=optuna.trial.TrialState.PRUNED, skip_if_finished=True)
        else:
            storage.set_trial_user_attr(storage_id, "seed_values", values)
            study.tell(number, aggregate(values, self.objective, self.mode), skip_if_finished=True)

    def save(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "wb") as f:
            pickle.dump(
                {
                    "started": self.started,
                    "live": self.live,
                    "configs": self.configs,
                    "rung_state": self.rung_state,
                },
                f,
            )

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as f:
            state = pickle.load(f)
        self.started, self.live, self.configs = state["started"], state["live"], state["configs"]
        self.rung_state.clear()
        self.rung_state.update(state["rung_state"])  # the scheduler holds the same dict
        self._fail_orphans()

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state["_cell_studies"] = {}
        return state

    # -- Optuna --------------------------------------------------------------------------------

    def record(self, trial_id: str, key: str, value: Any) -> None:
        """A seed's attribute (``checkpoint_path``) under ``<key>/seed=<s>`` on its configuration."""
        entry = self.live.get(trial_id)
        if entry is not None:
            super().record(trial_id, f"{key}/seed={self.units[entry[0]].seed}", value)

    def _asked(self, cell: int) -> int:
        return sum(1 for c, _ in self.configs if c == cell)

    def _study(self, i: int):
        return self._cell_study(self.units[i].index)

    def _cell_study(self, cell: int):
        if cell not in self._cell_studies:
            import optuna

            study = optuna.create_study(
                study_name=self.studies[cell],
                storage=self._get_storage(),
                direction="maximize" if self.mode == "max" else "minimize",
                load_if_exists=True,
            )
            seq = np.random.SeedSequence([self.sampler_seed, cell, len(study.trials), 32])
            seed = int(seq.generate_state(1)[0])
            study.sampler = optuna_sampler(self.sampler, seed)
            self._cell_studies[cell] = study
        return self._cell_studies[cell]

    def _held_trials(self) -> set:
        """Configurations with a seed still to finish stay RUNNING in Optuna."""
        return {
            c["storage_id"]
            for (cell, _), c in self.configs.items()
            if len(c["outcomes"]) < len(self.seeds_of[cell])
        }

    def _fail_orphans(self) -> None:
        import optuna

        keep = {sid for _, _, sid in self.live.values()} | self._held_trials()
        names = set(optuna.get_all_study_names(self._get_storage()))
        for cell, name in enumerate(self.studies):
            if name not in names:
                continue
            study = self._cell_study(cell)
            for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
                if t._trial_id not in keep:
                    study.tell(t.number, state=optuna.trial.TrialState.FAIL)


def make_config_searcher(sweep: Any, units: list[Unit], space: dict, journal: str, wandb_mode: str):
    """The :class:`ConfigSearcher` of a sweep with ``seeds: {per_configuration: true}``."""
    spec = sweep.spec
    return ConfigSearcher(
        units,
        num_samples=spec.num_samples,
        metric=spec.metric.name,
        mode=spec.metric.mode,
        space=space,
        journal=journal,
        studies=[cell_study_name(sweep.name, c.slug) for c in sweep.cells],
        objective=spec.seeds.objective,
        sampler=spec.search.sampler,
        sampler_seed=spec.search.seed,
        wandb_enabled=wandb_mode != "disabled",
    )
