"""The scope of configurations judged over seeds (``seeds: {values: [...], per_configuration:
true}``).

One Optuna study per cell (``<sweep>/<cell slug>``), not per (cell, seed): each configuration Optuna
samples is trained once per seed, one Ray trial per seed with the same sampled values and the
configuration's number (``configuration`` in the trial's config and in results.csv), and Optuna is
told the configuration's aggregate over its seeds (``objective``: the mean, or ``lcb``, the
pessimistic end of the 95% t-interval; a multi-objective study: each objective's, and each
constraint's violation averaged over the seeds) once every seed has finished. Each seed's outcome
is a user attribute of the Optuna trial (``seed=<s>``: its Ray trial id, value, state and step);
its intermediate values are the aggregate at each step every seed has reported (a
multi-objective study's: the user attribute ``intermediate``). The early stopping that goes with
it is :class:`sweeps.schedulers.config_rungs.ConfigRungs`: it stops all of a configuration's seeds
together, at one rung. With ``objectives``, the Pareto rung rule (which compares single trials of
one (cell, seed)) and constraints relative to a baseline model (``of:``) are refused at load
(:mod:`sweeps.spec.selection_schema`), and a sample that repeats an earlier one trains again (its
seeds are the point).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import optuna

from sweeps.plan.units import Unit
from sweeps.search.base import Choice, Draw, Ticket
from sweeps.search.journal import Journal


def cell_study_name(sweep_name: str, cell_slug: str) -> str:
    return f"{sweep_name}/{cell_slug}"


class OverSeeds:
    """Args (as :class:`~sweeps.search.per_unit.PerUnit`'s; ``num_samples`` is configurations per
    cell): ``studies``: per cell index, its Optuna study's name; ``how``: ``mean`` or ``lcb``."""

    def __init__(
        self,
        units: list[Unit],
        objective: Any,
        num_samples: int,
        space: dict[str, Any],
        journal: str,
        studies: list[str],
        how: str = "mean",
        sampler_seed: int = 0,
    ) -> None:
        self.units = units
        self.objective = objective
        self.budget = num_samples
        self.space = space
        self.journal = Journal(journal)
        self.names = studies
        self.how = how
        self.sampler_seed = sampler_seed
        self.seeds_of: dict[int, list[int]] = {}  # cell index -> its units' indices, seed order
        for i, u in enumerate(units):
            self.seeds_of.setdefault(u.index, []).append(i)
        #: (cell, configuration number) -> its Optuna trial, its seeds' outcomes and curve
        self.configurations: dict[tuple[int, int], dict[str, Any]] = {}
        #: (cell, number) of a configuration told FAIL -> (number, storage id) of its retry
        self.retries: dict[tuple[int, int], tuple[int, int]] = {}

    # -- the studies ---------------------------------------------------------------------------

    def cell_study(self, cell: int) -> Any:
        def seed_of(n: int) -> int:  # the n-th trial's (sweeps.search.seeding)
            seq = np.random.SeedSequence([self.sampler_seed, cell, n, 32])
            return int(seq.generate_state(1)[0])

        return self.journal.study(
            self.names[cell],
            lambda storage, name: self.objective.new_study(storage, name, seed_of),
        )

    def study(self, i: int) -> Any:
        """Unit ``i``'s study: its cell's."""
        return self.cell_study(self.units[i].index)

    def studies(self) -> list[tuple[Any, str]]:
        return [(self.cell_study(c), name) for c, name in enumerate(self.names)]

    def drawn(self, cell: int) -> int:
        """The configurations of ``cell`` drawn (a retry's Optuna trial is not another one)."""
        retries = {(c, again) for (c, _), (again, _) in self.retries.items()}
        return sum(1 for c, n in self.configurations if c == cell and (c, n) not in retries)

    # -- drawing and handing out ---------------------------------------------------------------

    def choices(self, searcher: Any) -> list[Choice]:
        return [
            Choice(c, seeds, self.drawn(c), self.units[seeds[0]].cost)
            for c, seeds in self.seeds_of.items()
            if self.drawn(c) < self.budget
        ]

    def draw_choice(self, searcher: Any, cell: int) -> list[Draw]:
        """A new configuration of ``cell``: one Optuna trial, one draw per seed, in seed order
        (its seeds train side by side)."""
        trial = self.objective.ask(self.cell_study(cell), self.space, cell)
        seeds = self.seeds_of[cell]
        self.objective.on_ask(trial, {**self.units[seeds[0]].config, **trial.params})
        trial.set_user_attr("objective", self.how)
        self.configurations[(cell, trial.number)] = {
            "params": dict(trial.params),
            "storage_id": trial._trial_id,
            "outcomes": {},
            "curve": {},
        }
        extra = {"configuration": trial.number}
        return [Draw(i, trial.number, trial._trial_id, dict(trial.params), extra) for i in seeds]

    def draw(self, searcher: Any, i: int) -> Draw:
        raise NotImplementedError(
            "a configuration judged over seeds is drawn for all its seeds at once (draw_choice)"
        )

    def issued(self, searcher: Any, trial_id: str, draw: Draw, config: dict[str, Any]) -> None:
        self._seed_started(draw.storage_id, self.units[draw.unit].seed, trial_id, config)

    def _seed_started(self, storage_id: int, seed: Any, trial_id: str, config: dict) -> None:
        """The ``seed=<s>`` attribute of a seed that starts (or starts again): its Ray trial."""
        fused = {"fused_with": config["fused_with"]} if "fused_with" in config else {}
        self.journal.set_attr(storage_id, f"seed={seed}", {"ray_trial_id": trial_id, **fused})

    def _full_curve(self, cell: int, entry: dict[str, Any]) -> dict[str, Any]:
        """The configuration's aggregate at each step every one of its seeds has reported."""
        n = len(self.seeds_of[cell])
        return {
            step: self.objective.aggregate(list(at.values()), self.how)
            for step, at in sorted(entry["curve"].items(), key=lambda kv: int(kv[0]))
            if len(at) == n
        }

    # -- what Tune tells -----------------------------------------------------------------------

    def reported(self, searcher: Any, trial_id: str, ticket: Ticket, result: dict) -> None:
        """A seed's report; the configuration's intermediate value at a step is the aggregate once
        every seed has reported that step."""
        value = self.objective.value(searcher.trial_configs.get(trial_id, {}), result)
        if value is None:
            return
        i, number, storage_id = ticket
        cell = self.units[i].index
        entry = self.configurations[(cell, number)]
        step = int(result.get("step", result.get("training_iteration", 0)))
        entry["curve"].setdefault(str(step), {})[str(self.units[i].seed)] = value
        full = self._full_curve(cell, entry)
        if str(step) in full:
            self.objective.report(self.journal, storage_id, step, full[str(step)], full)

    def retried(self, searcher: Any, trial_id: str, ticket: Ticket, config: dict) -> Ticket:
        """A seed that failed runs again on ``--resume`` (``resume_errored``). While its
        configuration waits for other seeds, it stays the configuration's seed and its retry's
        outcome replaces the failed one. Where the configuration was told ``FAIL`` (every seed had
        ended), Optuna takes no later tell: the configuration goes on as a new Optuna trial of the
        same parameters (``retry_of`` the failed one, which stays ``FAIL``), holding the other
        seeds' outcomes and curve, told once its retried seeds end. Every seed retried in this
        launch joins the one new trial."""
        i, number, storage_id = ticket
        cell = self.units[i].index
        key = (cell, number)
        if storage_id is None or key not in self.configurations:
            return ticket
        seed = str(self.units[i].seed)
        again = self.retries.get(key)
        if again is None:
            old = self.journal.trial(storage_id)
            if old.state != optuna.trial.TrialState.FAIL:  # not told yet: the retry's to come
                self.configurations[key]["outcomes"].pop(seed, None)
                self._seed_started(storage_id, seed, trial_id, config)
                return ticket
            study = self.cell_study(cell)
            study.enqueue_trial(old.params, user_attrs={"retry_of": old.number})
            trial = self.objective.ask(study, self.space, cell)
            self.objective.on_ask(trial, {**self.units[i].config, **trial.params})
            trial.set_user_attr("objective", self.how)
            entry = self.configurations[key]
            again = self.retries[key] = (trial.number, trial._trial_id)
            self.configurations[(cell, trial.number)] = {
                "params": dict(trial.params),
                "storage_id": trial._trial_id,
                "outcomes": dict(entry["outcomes"]),
                "curve": {step: dict(at) for step, at in entry["curve"].items()},
            }
            for s, outcome in entry["outcomes"].items():
                shown = {k: v for k, v in outcome.items() if k != "violations"}
                self.journal.set_attr(trial._trial_id, f"seed={s}", shown)
            full = self._full_curve(cell, entry)
            for step, value in full.items():
                self.objective.report(self.journal, trial._trial_id, int(step), value, full)
        number, new_id = again
        self.configurations[(cell, number)]["outcomes"].pop(seed, None)  # its retry's is to come
        self._seed_started(new_id, seed, trial_id, config)
        return Ticket(i, number, new_id)

    def ended(
        self,
        searcher: Any,
        trial_id: str,
        ticket: Ticket,
        config: dict[str, Any],
        result: dict | None,
        error: bool,
    ) -> None:
        """A seed ended: its outcome becomes the ``seed=<s>`` attribute; once every seed has ended
        Optuna is told the configuration's aggregate (FAIL if a seed failed or has no value,
        PRUNED if one stopped before its last step or the rung rule stopped it)."""
        i, number, storage_id = ticket
        unit = self.units[i]
        entry = self.configurations[(unit.index, number)]
        result = result or {}
        value = None if error else self.objective.value(config, result)
        step = int(result.get("step", 0) or 0)
        # the rung rule's label: the configuration's number in the trial's config (a retry's
        # Optuna trial has another)
        label = f"{unit.config['cell']}#{config.get('configuration', number)}"
        stopped_at = searcher.rung_state.get("stopped", {}).get(label)
        if value is None and isinstance(stopped_at, int) and not error:
            # a seed stopped while it waited at the rung (no result of its own here): its report there
            value = searcher.rung_state["values"][label][str(stopped_at)].get(str(unit.seed))
            step = max(
                (int(s) for s, at in entry["curve"].items() if str(unit.seed) in at), default=0
            )
            state = "PRUNED"
        elif value is None:
            state = "FAIL"
        elif unit.max_steps is not None and step < unit.max_steps and not result.get("converged"):
            state = "PRUNED"
        else:
            state = "COMPLETE"
        violations = self.objective.violations(i, config, result) if state == "COMPLETE" else {}
        outcome = {"ray_trial_id": trial_id, "value": value, "state": state, "step": step}
        entry["outcomes"][str(unit.seed)] = {**outcome, "violations": violations}
        if not self.journal.set_attr(storage_id, f"seed={unit.seed}", outcome):
            return  # told before a restart
        if len(entry["outcomes"]) < len(self.seeds_of[unit.index]):
            return
        self._tell(unit.index, number, storage_id, list(entry["outcomes"].values()), step)

    def _tell(self, cell: int, number: int, storage_id: int, outcomes: list, step: int) -> None:
        study = self.cell_study(cell)
        states = {o["state"] for o in outcomes}
        if "FAIL" in states:
            study.tell(number, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
        elif "PRUNED" in states:
            study.tell(number, state=optuna.trial.TrialState.PRUNED, skip_if_finished=True)
        else:
            values = [o["value"] for o in outcomes]
            labels = {label for o in outcomes for label in o.get("violations", {})}
            violations = {
                label: float(np.mean([o["violations"].get(label, 1e9) for o in outcomes]))
                for label in labels
            }
            self.journal.set_attr(storage_id, "seed_values", values)
            self.objective.record_steps(self.journal, storage_id, step)
            aggregate = self.objective.aggregate(values, self.how)
            self.objective.complete(study, number, storage_id, aggregate, violations)
        self.objective.told(study, cell, number)

    def adopt(self, warm: Any) -> None:
        """A configuration a warm start reuses whole (every seed has its earlier row): the told
        trial of its number in the new cell study, with every seed's outcome."""
        for cell, number, rows in warm.configurations:
            trial = self.cell_study(cell).trials[number]
            self.configurations[(cell, number)] = {
                "params": dict(trial.params),
                "storage_id": trial._trial_id,
                "outcomes": {
                    str(s): {
                        "ray_trial_id": r["trial_id"],
                        "value": r.get(self.objective.metric),
                        "state": "PRUNED" if r.get("status") == "stopped" else "COMPLETE",
                        "step": r.get("step"),
                    }
                    for s, r in rows.items()
                },
                "curve": {},
            }

    def record(self, searcher: Any, ticket: Ticket, key: str, value: Any) -> None:
        """A seed's attribute (``checkpoint_path``) under ``<key>/seed=<s>`` on its configuration."""
        seed = self.units[ticket.unit].seed
        self.journal.set_attr(ticket.storage_id, f"{key}/seed={seed}", value)

    # -- trials paused and kept RUNNING --------------------------------------------------------

    def paused(self, rung_state: dict) -> set[str]:
        """Seeds waiting at a rung of the configuration rule."""
        return set(rung_state.get("waiting", {}))

    def held(self) -> set[int]:
        """Configurations with a seed still to finish stay RUNNING in Optuna."""
        return {
            c["storage_id"]
            for (cell, _), c in self.configurations.items()
            if len(c["outcomes"]) < len(self.seeds_of[cell])
        }

    def restored(self, searcher: Any) -> None:
        keep = {t.storage_id for t in searcher.live.values()} | self.held()
        names = self.journal.names()
        for cell, name in enumerate(self.names):
            if name in names:
                self.journal.fail_running(self.cell_study(cell), keep)

    def state(self) -> dict[str, Any]:
        return {
            "configurations": self.configurations,
            "retries": self.retries,
            "objective": self.objective.state(),
        }

    def load(self, state: dict[str, Any] | None) -> None:
        state = state or {}
        self.configurations = state.get("configurations", {})
        self.retries = state.get("retries", {})  # absent in older states
        self.objective.load(state.get("objective"))
