"""The driver's Tune callback that charges a run's time to the sweep's budget
(:mod:`sweeps.driver.budget`) and, when a budget runs out, stops the sweep as a preemption does: the
same SIGINT to the launcher, so Tune stops the trials at their last checkpoint and saves the
experiment; the launcher then marks the unfinished trials ``budget``.

It also gives SIGTERM and SIGUSR1 back to the launcher's stop handling once the run has begun:
Tune's run installs a SIGUSR1 handler of its own, which would stop the run without the launcher
knowing it was preempted (:mod:`sweeps.driver.preemption`).

It is saved with the experiment (Tune keeps the run's callbacks), so a resumed run has it too; it
holds nothing of its own and charges the meter of the run in progress (:func:`budget.active`).
"""

from __future__ import annotations

import sys

from ray.tune import Callback

from sweeps.driver import budget, preemption


class BudgetClock(Callback):
    def setup(self, **info) -> None:
        stop = preemption.active()
        if stop is not None:  # (Tune's handlers are in place by now)
            stop.arm()

    def on_step_end(self, iteration: int, trials: list, **info) -> None:
        meter = budget.active()
        if meter is None:
            return
        ran_out = meter.tick_trials(t.config or {} for t in trials if t.status == "RUNNING")
        if ran_out is None:
            return
        print(
            f"\nbudget: {meter.ledger.ran_out_line()}; no trial starts, the running ones stop at "
            "their last checkpoint (status budget). A larger budget continues them: "
            f"--resume --set budget.{ran_out}=...",
            file=sys.stderr,
            flush=True,
        )
        preemption.stop_tune()

    def on_experiment_end(self, trials: list, **info) -> None:
        meter = budget.active()
        if meter is not None:
            meter.tick(0)
