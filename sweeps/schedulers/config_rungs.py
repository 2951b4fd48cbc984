"""Early stopping of configurations judged over seeds (``seeds: {per_configuration: true}`` with
``early_terminate: asha``): ASHA's rungs, a configuration's aggregate instead of one trial's value.

Rungs sit at ``grace_period * rf**k`` validation reports, below a trial's last (as ASHA's). A seed
that reaches a rung before its configuration's other seeds waits there, PAUSED from its checkpoint
(holding no resources, so the other seeds can run); when the last seed arrives, the configuration's
aggregate there (the mean of its seeds' values at that report) joins the rung's record of the cell's
configurations, and ASHA's rule decides: the configuration goes on unless its aggregate is below the
rung's top-1/rf cutoff (above it, when minimising). Going on releases every waiting seed; stopping
stops them all, so all of a configuration's seeds end at the same rung. Only configurations of the
same cell are compared: no cell is stopped because another scores higher. A seed that errors stops
its configuration's other seeds; one that finishes early (``stop_when``) counts with its last value.

The state (``rungs``, ``values``, ``stopped``, ``waiting``) is the searcher's
(:class:`sweeps.search.base.SweepSearcher`), saved with it, so ``--resume`` goes on where it was.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from ray.tune.experiment import Trial
from ray.tune.schedulers import FIFOScheduler, TrialScheduler

from sweeps.schedulers.lost_nodes import adopt
from sweeps.schedulers.pareto_rungs import milestones
from sweeps.schedulers.placement import next_to_start


def config_key(config: dict[str, Any]) -> tuple[str, int]:
    return config.get("cell"), int(config.get("configuration", -1))


class ConfigRungs(FIFOScheduler):
    """ASHA over configurations' aggregates, every seed of a configuration stopped together.

    Args:
        metric, mode: what is compared (``max`` or ``min``).
        seeds: how many seeds each configuration trains.
        grace_period, reduction_factor, max_t: ASHA's (units: validation reports).
        max_steps: a report at this step is a trial's last (nothing to stop).
        state: the searcher's ``rung_state`` dict, shared (see the module's docstring).
    """

    def __init__(
        self,
        metric: str,
        mode: str,
        seeds: int,
        grace_period: int,
        reduction_factor: float,
        max_t: int,
        max_steps: int | None,
        state: dict[str, Any],
    ) -> None:
        super().__init__()
        self._metric, self._mode = metric, mode
        self.seeds = seeds
        self.rf = reduction_factor
        self.milestones = milestones(grace_period, reduction_factor, max_t)
        self.max_steps = max_steps
        self.state = state
        for part in ("waiting", "stopped", "rungs", "values"):
            state.setdefault(part, {})

    def set_search_properties(self, metric: str | None, mode: str | None, **spec) -> bool:
        return True

    def on_trial_add(self, tune_controller, trial) -> None:
        adopt(trial)  # a trial whose node is lost moves, as under the other schedulers
        super().on_trial_add(tune_controller, trial)

    @property
    def waiting(self) -> dict[str, tuple[str, int, int]]:
        """Ray trial id -> (cell, configuration, rung) it waits at, PAUSED."""
        return self.state["waiting"]

    def _key(self, key: tuple[str, int]) -> str:
        return f"{key[0]}#{key[1]}"

    def on_trial_result(self, tune_controller, trial, result: dict) -> str:
        key = config_key(trial.config)
        k = self._key(key)
        if k in self.state["stopped"]:
            return TrialScheduler.STOP
        value = result.get(self._metric)
        if value is None or (
            self.max_steps is not None and int(result.get("step", 0)) >= self.max_steps
        ):
            return TrialScheduler.CONTINUE
        iteration = int(result.get("training_iteration", 0))
        reached = [m for m in self.milestones if m <= iteration]
        if not reached:
            return TrialScheduler.CONTINUE
        m = reached[-1]
        at = self.state["values"].setdefault(k, {}).setdefault(str(m), {})
        seed = str(trial.config.get("seed"))
        if seed in at:
            return (
                TrialScheduler.CONTINUE
            )  # past this rung already (or a report again after a restart)
        at[seed] = float(value)
        if len(at) < self.seeds:
            self.waiting[trial.trial_id] = (key[0], key[1], m)
            return TrialScheduler.PAUSE
        return TrialScheduler.CONTINUE if self._judge(key, m) else TrialScheduler.STOP

    def _judge(self, key: tuple[str, int], m: int) -> bool:
        """Record the configuration's aggregate at rung ``m`` and apply ASHA's cutoff; False (and
        the configuration marked stopped) when it falls below."""
        k = self._key(key)
        mean = float(np.mean(list(self.state["values"][k][str(m)].values())))
        rung = self.state["rungs"].setdefault(f"{key[0]}@{m}", {})
        rung[str(key[1])] = mean
        signed = np.array(list(rung.values())) * (1 if self._mode == "max" else -1)
        cutoff = float(np.nanpercentile(signed, (1 - 1 / self.rf) * 100))
        go_on = (mean if self._mode == "max" else -mean) >= cutoff
        if not go_on:
            self.state["stopped"][k] = m
        return go_on

    def on_trial_complete(self, tune_controller, trial, result: dict) -> None:
        """A seed that finished before a rung (``stop_when``) counts there with its last value."""
        value = (result or {}).get(self._metric)
        if value is None:
            return
        key = config_key(trial.config)
        k, seed = self._key(key), str(trial.config.get("seed"))
        iteration = int(result.get("training_iteration", 0))
        for m in self.milestones:
            if m > iteration and k not in self.state["stopped"]:
                at = self.state["values"].setdefault(k, {}).setdefault(str(m), {})
                at.setdefault(seed, float(value))
                if len(at) == self.seeds:
                    self._judge(key, m)

    def on_trial_error(self, tune_controller, trial) -> None:
        """A failed seed fails its configuration: the other seeds stop. Not a failure Tune retries
        (``failure.max_failures``): that seed goes on from its checkpoint."""
        if getattr(trial, "should_recover", lambda: False)():
            return
        key = config_key(trial.config)
        self.state["stopped"].setdefault(self._key(key), "error")
        self.waiting.pop(trial.trial_id, None)

    def on_trial_remove(self, tune_controller, trial) -> None:
        self.waiting.pop(trial.trial_id, None)

    def choose_trial_to_run(self, tune_controller) -> Any | None:
        """A waiting seed whose configuration the rung kept goes on first; one whose configuration
        was stopped is stopped here (Tune tells the searcher: PRUNED); then FIFO's choice
        (:mod:`.placement`), never a trial still waiting."""
        trials = {t.trial_id: t for t in tune_controller.get_trials()}
        for trial_id, (cell, number, m) in list(self.waiting.items()):
            trial = trials.get(trial_id)
            if trial is None:
                continue
            if trial.status == Trial.PENDING:  # --resume brings a paused trial back PENDING
                tune_controller._set_trial_status(trial, Trial.PAUSED)
            if trial.status != Trial.PAUSED:
                continue  # still saving its checkpoint: next time
            k = self._key((cell, number))
            if k in self.state["stopped"]:
                del self.waiting[trial_id]
                tune_controller.stop_trial(trial)
                mark = getattr(
                    getattr(tune_controller, "_tune_controller", None),
                    "_mark_trial_to_checkpoint",
                    None,
                )
                if (
                    mark is not None
                ):  # see sweeps.schedulers.pareto_rungs: else it stays PAUSED in the saved state
                    mark(trial)
            elif len(self.state["values"].get(k, {}).get(str(m), {})) >= self.seeds:
                del self.waiting[trial_id]
                return trial
        return next_to_start(tune_controller, self.waiting)

    def debug_string(self) -> str:
        return (
            f"configuration rungs at {self.milestones} reports, rf={self.rf:g}, "
            f"{len(self.waiting)} seed(s) waiting"
        )
