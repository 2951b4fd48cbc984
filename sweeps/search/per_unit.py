"""The per-unit scope: each (cell, seed) is its own Optuna study (``<sweep>/<unit>``) in one durable
journal, with its own sampler seed, and each Ray trial is one Optuna trial of its unit's study:
a suggestion is ``study.ask()`` (its objective kind's ask), a report is an intermediate value, and
a finished trial is ``study.tell()``: COMPLETE with its value; PRUNED when a scheduler stopped it
before its last step (Optuna then records its last intermediate value, as for its own pruners);
FAIL on an error or no result. Without ``parameters`` there is no Optuna, only the units' trials.

Resume: an Optuna trial left RUNNING that no Ray trial will finish (a driver that died before Tune
saved the searcher) is marked FAIL on restore, so the journal and Tune agree.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import optuna

from sweeps.plan.units import Unit
from sweeps.search.base import Choice, Draw, Ticket
from sweeps.search.journal import Journal

#: the trial attributes copied from a student's config to its Optuna trial, as results.csv has them
TEACHER_ATTRS = ("teacher", "teacher_checkpoint")


class PerUnit:
    """Args:
    units: the sweep's units; objective: the objective kind (:mod:`sweeps.search.objective`);
    num_samples: trials per unit; space: Optuna distributions by flat name (None: no Optuna);
    journal: the journal file; sampler_seed: the sweep-wide seed each unit's seed derives from.
    """

    def __init__(
        self,
        units: list[Unit],
        objective: Any,
        num_samples: int,
        space: dict[str, Any] | None = None,
        journal: str | None = None,
        sampler_seed: int = 0,
    ) -> None:
        self.units = units
        self.objective = objective
        self.budget = num_samples
        self.space = space or None
        self.journal = Journal(journal if self.space else None)
        self.sampler_seed = sampler_seed
        # a live trial's values by step (its reports before a --resume from its Optuna trial)
        self.curves: dict[str, dict[str, Any]] = {}

    # -- the studies ---------------------------------------------------------------------------

    def unit_seed(self, i: int, n: int) -> int:
        """The seed of the ``n``-th trial of unit ``i``'s study (its ordinal,
        :mod:`sweeps.search.seeding`): each (cell, seed) samples with its own seeds, and trial
        ``n`` draws the same whether the study ran through or was stopped and resumed."""
        seq = np.random.SeedSequence(
            [self.sampler_seed, self.units[i].index, self.units[i].seed, n]
        )
        return int(seq.generate_state(1)[0])

    def study(self, i: int) -> Any:
        """Unit ``i``'s study."""
        return self.journal.study(
            self.units[i].name,
            lambda storage, name: self.objective.new_study(
                storage, name, lambda n: self.unit_seed(i, n)
            ),
        )

    def studies(self) -> list[tuple[Any, str]]:
        """Every study, opened, with its name (a warm start tells them their earlier trials)."""
        return [(self.study(i), u.name) for i, u in enumerate(self.units)]

    # -- drawing and handing out ---------------------------------------------------------------

    def choices(self, searcher: Any) -> list[Choice]:
        return [
            Choice(i, [i], searcher.started[i], u.cost)
            for i, u in enumerate(self.units)
            if searcher.started[i] < self.budget
        ]

    def draw_choice(self, searcher: Any, key: int) -> list[Draw]:
        return [self.draw(searcher, key)]

    def draw(self, searcher: Any, i: int) -> Draw:
        """One sample of unit ``i`` (Optuna's ask; a fused group asks all of its members before
        any is handed out or told)."""
        if not self.space:
            return Draw(i)
        trial = self.objective.ask(self.study(i), self.space, i)
        self.objective.on_ask(trial, {**self.units[i].config, **trial.params})
        return Draw(i, trial.number, trial._trial_id, dict(trial.params))

    def issued(self, searcher: Any, trial_id: str, draw: Draw, config: dict[str, Any]) -> None:
        """Ray trial ``trial_id`` is the Optuna trial of ``draw``: its attributes say so."""
        if draw.storage_id is None:
            return
        attrs = {"ray_trial_id": trial_id}
        if searcher.wandb_enabled:
            attrs["wandb_run_id"] = trial_id
        attrs.update({k: config[k] for k in TEACHER_ATTRS if config.get(k)})
        if draw.extra.get("fused_with"):
            attrs["fused_with"] = draw.extra["fused_with"]
        for key, value in attrs.items():
            self.journal.set_attr(draw.storage_id, key, value)

    def retried(self, searcher: Any, trial_id: str, ticket: Ticket, config: dict) -> Ticket:
        """Ray trial ``trial_id``, told FAIL, runs again on ``--resume`` (``resume_errored``): its
        Optuna trial is finished and takes no later tell, so the retry is a new Optuna trial of
        the same parameters (``retry_of`` names the failed one, which stays FAIL), told how the
        retry ends. Where the failed one was never told (RUNNING), it is the retry's."""
        if ticket.storage_id is None or not self.space:
            return ticket
        old = self.journal.trial(ticket.storage_id)
        if old.state != optuna.trial.TrialState.FAIL:
            return ticket
        study = self.study(ticket.unit)
        study.enqueue_trial(old.params, user_attrs={"retry_of": old.number})
        trial = self.objective.ask(study, self.space, ticket.unit)
        self.objective.on_ask(trial, {**self.units[ticket.unit].config, **trial.params})
        extra = {k: config[k] for k in ("fused_with",) if config.get(k)}
        draw = Draw(ticket.unit, trial.number, trial._trial_id, dict(trial.params), extra)
        self.issued(searcher, trial_id, draw, config)
        return Ticket(ticket.unit, trial.number, trial._trial_id)

    # -- what Tune tells -----------------------------------------------------------------------

    def reported(self, searcher: Any, trial_id: str, ticket: Ticket, result: dict) -> None:
        """Each report is an intermediate value of the Optuna trial, at its training step: the
        learning curves of ``plot_intermediate_values`` and optuna-dashboard."""
        if ticket.storage_id is None:
            return
        value = self.objective.value(searcher.trial_configs.get(trial_id, {}), result)
        if value is None:
            return
        step = int(result.get("step", result.get("training_iteration", 0)))
        curve = self.curves.get(trial_id)
        if curve is None:  # its first report here: after a --resume, its curve so far is saved
            curve = self.curves[trial_id] = dict(self._saved_curve(ticket.storage_id))
        curve[str(step)] = value
        self.objective.report(self.journal, ticket.storage_id, step, value, curve)

    def ended(
        self,
        searcher: Any,
        trial_id: str,
        ticket: Ticket,
        config: dict[str, Any],
        result: dict | None,
        error: bool,
    ) -> None:
        """Tell Optuna how the trial ended (module docstring)."""
        curve = self.curves.pop(trial_id, None)
        if ticket.storage_id is None:
            return
        i, number, storage_id = ticket
        rung = searcher.rung_log.get(trial_id)
        if not error and not result and (rung or {}).get("waited"):
            # stopped while it waited at a rung: Tune gives no result, its last report stands
            result = self._last_report(curve, storage_id)
        result = result or {}
        value = None if error else self.objective.value(config, result)
        if "step" in result:
            self.objective.record_steps(self.journal, storage_id, int(result["step"]))
        if rung is not None:
            self.journal.set_attr(storage_id, "rung", rung)
        study = self.study(i)
        max_steps = self.units[i].max_steps
        state = optuna.trial.TrialState
        if value is None:
            study.tell(number, state=state.FAIL, skip_if_finished=True)
        elif (
            max_steps is not None
            and int(result.get("step", max_steps)) < max_steps
            and not result.get("converged")
        ):  # (a stop_when convergence is COMPLETE)
            study.tell(number, state=state.PRUNED, skip_if_finished=True)
        else:
            violations = self.objective.violations(i, config, result)
            self.objective.complete(study, number, storage_id, value, violations)
        self.objective.told(study, i, number)

    def _saved_curve(self, storage_id: int) -> dict[str, Any]:
        """A trial's curve as its Optuna trial holds it (``intermediate``, a multi-objective
        study's; written at every report, so it holds those after the searcher's last save too)."""
        return self.journal.trial(storage_id).user_attrs.get("intermediate") or {}

    def _last_report(self, curve: dict | None, storage_id: int) -> dict | None:
        """A trial's last report, objectives by name and its step, from its curve (kept here, or in
        its Optuna trial's ``intermediate`` after a ``--resume``)."""
        curve = curve or self._saved_curve(storage_id)
        if not curve:
            return None
        step = max(curve, key=int)
        return self.objective.as_result(curve[step], int(step))

    def adopt(self, warm: Any) -> None:
        """A warm start's reused trials are rows of results.csv, not Optuna trials: nothing here."""

    def record(self, searcher: Any, ticket: Ticket, key: str, value: Any) -> None:
        self.journal.set_attr(ticket.storage_id, key, value)

    # -- trials paused and kept RUNNING --------------------------------------------------------

    def paused(self, rung_state: dict) -> set[str]:
        """Trials waiting at a rung of the Pareto rule (its state per (cell, seed))."""
        return {tid for state in rung_state.values() for tid in state.get("waiting", {})}

    def restored(self, searcher: Any) -> None:
        """Optuna trials left RUNNING by a driver that died before Tune saved them: FAIL (but for
        the live ones, and those kept RUNNING on purpose: drawn, not yet handed out; repeats)."""
        if not self.space:
            return
        live = {(t.unit, t.number) for t in searcher.live.values()}
        keep = {t.storage_id for t in searcher.live.values()}
        keep |= self.objective.held(live) | searcher.handout.queued()
        names = self.journal.names()
        for i, unit in enumerate(self.units):
            if unit.name in names:
                self.journal.fail_running(self.study(i), keep)

    def state(self) -> dict[str, Any]:
        return {"objective": self.objective.state()}

    def load(self, state: dict[str, Any] | None) -> None:
        self.objective.load((state or {}).get("objective"))
