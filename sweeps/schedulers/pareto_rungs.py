"""Early stopping with two objectives: ASHA's rungs, Pareto rank instead of a quantile.

One :class:`ParetoRungs` per (cell, seed) (wrapped in :class:`sweeps.schedulers.per_unit.PerUnitScheduler`,
so no cell is stopped because another does better). Rungs sit at ``grace_period * rf**k``
validation reports, below the trial's last. When a trial reaches a rung, its objective vector there
(``val/bleu`` at that report, ``decode_seconds`` from the decode probe) is recorded with the
vectors of the trials that reached the rung before it, and the trial goes on only if it is among
the first ``keep`` of them by Pareto rank, crowding distance breaking ties
(:func:`sweeps.report.pareto.rung_survivors`): every trial no other dominates there, and at least the
top 1/rf, as ASHA, "top" meaning "by Pareto rank". Until it reaches the next rung the trial is
ranked again at each report among what the rung holds by then, and stops once later arrivals have
pushed it out: ASHA judges a trial once, against whoever came first, and so keeps every early
arrival; synchronous successive halving waits for the whole rung. This is the second's decision
taken as the rung fills, without waiting. A trial also stops at any report when a trial of its study that ran to the end
dominates the best it could still reach (its trained objectives at their bounds, e.g. BLEU 100).
The second rule compares with a tolerance per objective (``early_terminate.tolerance``, by default
decode_seconds counts as better only by more than 10%): the probe's noise alone never makes a trial
hopeless. The rungs compare plainly, as ASHA ranks on a noisy early metric.
Trials of the baseline model (relative constraints) are not part of the search and run to the end.
The rungs' contents and the finished vectors live in a ``state`` dict the searcher saves with its
own state, so a resumed study goes on comparing with what its trials reported before the stop.
Documented, with a worked example, in ``docs/moo_early_stopping.md``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ray.tune.experiment import Trial
from ray.tune.schedulers import FIFOScheduler, TrialScheduler

from sweeps.report.pareto import hopeless, rung_standing, to_minimize
from sweeps.spec import unit_key
from sweeps.spec.search_schema import BOUNDS, milestones, tolerances  # noqa: F401 (milestones: importable here too)

Vector = tuple[float, ...]


def promote_count(n: int, reduction_factor: float) -> int:
    """How many of a filling rung's ``n`` trials a waiting trial may be among to go on: the top
    ``floor(n / rf)`` (ASHA's promotion, Li et al. 2020): none before ``rf`` have arrived."""
    return int(math.floor(n / reduction_factor + 1e-9))


class ParetoRungs(FIFOScheduler):
    """The rung rule for one (cell, seed).

    Args:
        objectives: (name, goal) pairs.
        vector_of: (trial config, result) -> the objective values in ``objectives``' order, or None
            while one is missing.
        grace_period, reduction_factor, max_t: as ASHA's (units: validation reports).
        bounds: per objective index, the value a trained metric cannot pass (BLEU 100).
        max_steps: a trial whose result reaches it ran to the end.
        log: decisions are appended here, keyed by trial id (the searcher writes them to Optuna).
        tolerance: per objective, the relative difference a value must be better by to count as
            better when a trial is judged hopeless (:func:`sweeps.report.pareto.hopeless`); None: exactly.
        state: where the rule keeps what it has seen (``rungs``, ``finished``, ``stopped``,
            ``waiting``): the searcher saves it with its own state (:class:`sweeps.search.base.SweepSearcher`),
            so it survives ``--resume``; a fresh dict when not given.
        wait: a trial that reaches a rung waits there (PAUSED, from its checkpoint) until it is in the
            top ``floor(n / rf)`` of the rung's ``n`` (:func:`promote_count`) or the rung is complete
            (``promotion: wait``, ASHA's promotion); False: it goes on or stops at once, judged
            against the trials that came before it (``promotion: immediate``, Ray's ASHA).
        samples_left: () -> whether the searcher will still start trials of this (cell, seed): while
            it will, a rung may still fill (``wait`` only).
        key: the (cell, seed) it judges, as :func:`sweeps.spec.unit_key` reads it from a trial.
    """

    def __init__(
        self,
        objectives: list[tuple[str, str]],
        vector_of: Callable[[dict, dict], list[float] | None],
        grace_period: int,
        reduction_factor: float,
        max_t: int,
        bounds: dict[int, float],
        max_steps: int | None,
        log: dict[str, dict] | None = None,
        tolerance: list[float] | None = None,
        state: dict | None = None,
        wait: bool = False,
        samples_left: Callable[[], bool] = lambda: False,
        key: Any = None,
    ) -> None:
        super().__init__()
        self.directions = [goal for _, goal in objectives]
        self.vector_of = vector_of
        self.rf = reduction_factor
        self.milestones = milestones(grace_period, reduction_factor, max_t)
        self.bounds = bounds
        self.max_steps = max_steps
        self.state = state if state is not None else {}
        self.state.setdefault("rungs", {m: {} for m in self.milestones})
        self.state.setdefault("finished", {})
        self.state.setdefault("stopped", set())
        self.state.setdefault(
            "waiting", {}
        )  # trial id -> the rung (report count) it waits at, PAUSED
        self.wait = wait
        self.samples_left = samples_left
        self.key = key  # the (cell, seed) this rule judges (sweeps.spec.unit_key)
        self.log = log if log is not None else {}
        self.tolerance = tolerance

    # read through ``state`` each time: a restore may refill it in place
    @property
    def rungs(self) -> dict[int, dict[str, Vector]]:
        return self.state["rungs"]

    @property
    def finished(self) -> dict[str, Vector]:
        return self.state["finished"]

    @property
    def stopped(self) -> set[str]:
        return self.state["stopped"]

    @property
    def waiting(self) -> dict[str, int]:
        return self.state["waiting"]

    def decide(
        self, trial_id: str, iteration: int, values: list[float], complete: bool = True
    ) -> str:
        """CONTINUE, STOP or (``wait``) PAUSE for a trial's report number ``iteration`` with objective
        ``values``. ``complete``: whether the rung it reaches can still fill (``wait`` only: a trial
        arriving at a complete rung is judged at once)."""
        vec = to_minimize(values, self.directions)
        best = to_minimize([self.bounds.get(j, v) for j, v in enumerate(values)], self.directions)
        if hopeless(
            best, list(self.finished.values()), self.tolerance
        ):  # at any report: it can no longer reach the front
            self.log[trial_id] = {
                "rung": None,
                "report": iteration,
                "values": list(values),
                "hopeless": True,
                "stopped": True,
                "tolerance": self.tolerance,
            }
            self.stopped.add(trial_id)
            return TrialScheduler.STOP
        if (
            trial_id in self.waiting
        ):  # it waits at its rung (a report again after a restart): until promoted
            return TrialScheduler.PAUSE
        reached = [m for m in self.milestones if m <= iteration]
        if not reached:
            return TrialScheduler.CONTINUE
        m = reached[-1]  # ASHA's order: the highest rung the trial has reached
        rung = self.rungs[m]
        arriving = trial_id not in rung
        if arriving:
            rung[trial_id] = vec
        standing = self.standing(m)
        position, keep, entry = standing(trial_id)
        if (
            arriving
            and self.wait
            and not complete
            and position >= promote_count(len(rung), self.rf)
        ):
            self.waiting[trial_id] = m  # paused until the rung says (promotions)
            self.log[trial_id] = {**entry, "stopped": False, "waiting": True}
            return TrialScheduler.PAUSE
        go_on = position < keep
        if (
            arriving or not go_on
        ):  # re-ranked at a later report: logged only when it stops the trial
            self.log[trial_id] = {
                **entry,
                "stopped": not go_on,
                **({} if arriving else {"report": iteration}),
            }
        if not go_on:
            self.stopped.add(trial_id)
            return TrialScheduler.STOP
        return TrialScheduler.CONTINUE

    def standing(self, m: int) -> Callable[[str], tuple[int, int, dict]]:
        """Rung ``m`` as it holds now, sorted once: trial id -> (its position, 0 first; the rung's
        keep; the log entry of a decision there)."""
        rung = self.rungs[m]
        ids = list(rung)
        order, keep = rung_standing([rung[i] for i in ids], self.rf)
        place = {ids[j]: k for k, j in enumerate(order)}

        def of(trial_id: str) -> tuple[int, int, dict]:
            return (
                place[trial_id],
                keep,
                {
                    "rung": m,
                    "position": place[trial_id] + 1,
                    "recorded": len(ids),
                    "keep": keep,
                    "arrival": ids.index(trial_id) + 1,
                    "values": list(to_minimize(rung[trial_id], self.directions)),  # its own inverse
                    "hopeless": False,
                    "tolerance": self.tolerance,
                },
            )

        return of

    def on_trial_result(self, tune_controller, trial, result: dict) -> str:
        if trial.config.get("set"):  # the baseline model: not searched, never stopped
            return TrialScheduler.CONTINUE
        if self.max_steps is not None and int(result.get("step", 0)) >= self.max_steps:
            return (
                TrialScheduler.CONTINUE
            )  # its last report: stopping saves nothing, and it has finished
        values = self.vector_of(trial.config, result)
        if values is None:
            return TrialScheduler.CONTINUE
        iteration = int(result.get("training_iteration", 0))
        reached = [m for m in self.milestones if m <= iteration]
        complete = (
            not self.wait
            or not reached
            or self.complete(reached[-1], tune_controller.get_trials(), trial)
        )
        return self.decide(trial.trial_id, iteration, values, complete)

    def complete(self, m: int, trials: list, asking: Any = None) -> bool:
        """Whether rung ``m`` can no longer fill: the searcher starts no more trials of this (cell,
        seed), and none of its trials but ``asking`` is still on its way to the rung (pending, or
        running below it)."""
        if self.samples_left():
            return False
        rung = self.rungs[m]
        mine = [t for t in trials if t is not asking and not t.config.get("set") and self._owns(t)]
        return not any(
            t.status in (Trial.PENDING, Trial.RUNNING)
            and t.trial_id not in rung
            and t.trial_id not in self.stopped
            for t in mine
        )

    def _owns(self, trial: Any) -> bool:
        return unit_key(trial.config) == self.key

    def promotions(self, tune_controller: Any) -> list:
        """The waiting trials that go on now, best placed first: those in the top ``floor(n / rf)``
        of their rung, and once the rung is complete every one the rule keeps (:meth:`decide`'s
        keep). The others of a complete rung are stopped here (PRUNED), as is a waiting trial a
        finished one has made hopeless. Called by the scheduler when Tune looks for a trial to run."""
        if not self.waiting:
            return []
        trials = [t for t in tune_controller.get_trials() if self._owns(t)]
        for t in (
            trials
        ):  # --resume: Tune brings a paused trial back PENDING, and would start it past its rung
            if t.trial_id in self.waiting and t.status == Trial.PENDING:
                tune_controller._set_trial_status(t, Trial.PAUSED)
        by_id = {t.trial_id: t for t in trials}
        rungs = {
            m: (self.standing(m), self.complete(m, trials)) for m in set(self.waiting.values())
        }
        out = []
        for trial_id, m in sorted(self.waiting.items()):
            trial = by_id.get(trial_id)
            if trial is None or trial.status != Trial.PAUSED:
                continue  # still saving its checkpoint: next time
            standing, complete = rungs[m]
            position, keep, entry = standing(trial_id)
            entry["waited"] = True
            values = entry["values"]
            best = to_minimize(
                [self.bounds.get(j, v) for j, v in enumerate(values)], self.directions
            )
            if hopeless(best, list(self.finished.values()), self.tolerance):
                self._stop_waiting(
                    tune_controller, trial, {**entry, "rung": None, "hopeless": True, "report": m}
                )
            elif (
                position < promote_count(len(self.rungs[m]), self.rf)
                or complete
                and position < keep
            ):
                del self.waiting[trial_id]
                self.log[trial_id] = {**entry, "stopped": False}
                out.append((position, trial))
            elif complete:
                self._stop_waiting(tune_controller, trial, entry)
        return [t for _, t in sorted(out, key=lambda pt: pt[0])]

    def _stop_waiting(self, tune_controller: Any, trial: Any, entry: dict) -> None:
        del self.waiting[trial.trial_id]
        self.stopped.add(trial.trial_id)
        self.log[trial.trial_id] = {**entry, "stopped": True}
        tune_controller.stop_trial(
            trial
        )  # PAUSED: Tune tells the searcher, which records it PRUNED
        # Ray 2.60 stops a trial that has no actor without marking it for the experiment's saved state,
        # which keeps it PAUSED there: the results read back (and --resume) would call it unfinished
        mark = getattr(
            getattr(tune_controller, "_tune_controller", None), "_mark_trial_to_checkpoint", None
        )
        if mark is not None:
            mark(trial)

    def on_trial_complete(self, tune_controller, trial, result: dict) -> None:
        if trial.config.get("set") or trial.trial_id in self.stopped or not result:
            return
        if self.max_steps is not None and int(result.get("step", self.max_steps)) < self.max_steps:
            return
        values = self.vector_of(trial.config, result)
        if values is not None:
            self.finished[trial.trial_id] = to_minimize(values, self.directions)

    def debug_string(self) -> str:
        ties = (
            f", hopeless only beyond {self.tolerance}"
            if self.tolerance and any(self.tolerance)
            else ""
        )
        waits = f", {len(self.waiting)} waiting" if self.wait else ""
        return f"Pareto rungs at {self.milestones} reports, rf={self.rf:g}{ties}{waits}"


def pareto_rungs_factory(
    sweep: Any,
    vector_of: Callable[[dict, dict], list[float] | None],
    log: dict[str, dict] | None,
    reports: int,
    state: dict | None = None,
    samples_left: Callable[[Any], bool] = lambda key: False,
) -> Callable[[Any], TrialScheduler]:
    """What makes one (cell, seed)'s :class:`ParetoRungs` (``early_terminate.type: pareto``;
    :func:`sweeps.schedulers.per_unit.make_scheduler` keeps one per unit, keyed by (cell, seed)).
    ``reports``: a trial's reports. ``state``: per unit key, each rule's state (saved by the searcher).
    ``samples_left``: per unit key, whether the searcher will start more of its trials."""

    spec = sweep.spec
    et = spec.early_terminate
    objectives = [(o.name, o.goal) for o in spec.objectives]
    bounds = {i: BOUNDS[name] for i, (name, _) in enumerate(objectives) if name in BOUNDS}
    max_t = et.max_t or max(et.grace_period, reports)
    max_steps = spec.trainer.max_steps
    shared = log if log is not None else {}
    tolerance = tolerances(spec)
    states = state if state is not None else {}

    def one(key: Any) -> TrialScheduler:
        return ParetoRungs(
            objectives,
            vector_of,
            min(et.grace_period, max_t),
            et.reduction_factor,
            max_t,
            bounds,
            max_steps,
            shared,
            tolerance,
            states.setdefault(key, {}),
            wait=et.waits_at_rungs,
            samples_left=lambda: samples_left(key),
            key=key,
        )

    return one
