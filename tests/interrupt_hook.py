"""Test-only: Ctrl-C a launcher at a known point of its Tune run, instead of racing it from outside.

Ray Tune builds the callbacks named in ``RAY_TUNE_CALLBACKS`` (``module.Class``, no arguments)
into every run it starts. A test that starts the launcher with

    RAY_TUNE_CALLBACKS=interrupt_hook.InterruptAtStep  PYTHONPATH=<tests folder>
    INTERRUPT_AT_STEP=20  INTERRUPT_RECORD=<a file>  [INTERRUPT_AFTER_FINISHED=1]

gets a real SIGINT to the launcher process the moment Tune takes in the first report at step 20
of a trial while another trial has finished (at least INTERRUPT_AFTER_FINISHED others): the same handling as a user's Ctrl-C (Tune's
handler, the launcher's exit status 130), at the same point on a fast machine or a loaded one.
The hook writes which trials it saw to ``INTERRUPT_RECORD`` first. Nothing in ``sweeps/`` knows
about it. A test that runs the launcher in its own process may set :data:`ACTION` to do something
else at that point instead (test_cluster removes the trial's node).

What the interrupted trial does next is bounded too: a trial runs at most one report ahead of
the one Tune processes (``ray.tune``'s function runner waits in its next report), so it cannot
get past step 20 plus two report intervals before Tune stops it.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from typing import Any

from ray.tune import Callback

ENV_STEP = "INTERRUPT_AT_STEP"
ENV_RECORD = "INTERRUPT_RECORD"
ENV_AFTER = "INTERRUPT_AFTER_FINISHED"
ENV_SIGNAL = "INTERRUPT_SIGNAL"

# Called with the trial and its result instead of the SIGINT, when set (in the launcher's process).
ACTION: Callable[[Any, dict], None] | None = None

# The steps of every result Tune has taken in during the current run, by trial id, in order, up to
# and with the one that fired :class:`InterruptAtStep` (for :data:`ACTION`). Not result.json: Tune
# writes it in a staging folder and copies it to the experiment folder now and then, so that copy
# can lack the latest reports.
STEPS: dict[str, list[Any]] = {}


class InterruptAtStep(Callback):
    def __init__(self) -> None:
        self.step = int(os.environ[ENV_STEP])
        self.record = os.environ[ENV_RECORD]
        self.after = int(os.environ.get(ENV_AFTER, "1"))
        self.fired = False
        STEPS.clear()

    def on_trial_result(self, iteration, trials, trial, result, **info) -> None:
        if not self.fired:
            STEPS.setdefault(trial.trial_id, []).append(result.get("step"))
        if self.fired or result.get("step") != self.step:
            return
        finished = [t.trial_id for t in trials if t.status == "TERMINATED"]
        if len(finished) < self.after:
            return
        self.fired = True
        with open(self.record, "w") as f:
            json.dump({"running": trial.trial_id, "step": self.step, "finished": finished}, f)
        if ACTION is not None:
            ACTION(trial, result)
        else:  # INTERRUPT_SIGNAL=SIGTERM: a scheduler's preemption instead of a Ctrl-C
            os.kill(os.getpid(), getattr(signal, os.environ.get(ENV_SIGNAL, "SIGINT")))


ENV_CELL = "INTERRUPT_ON_COMPLETE"
ENV_COUNT = "INTERRUPT_ON_COMPLETE_COUNT"


class InterruptOnComplete(Callback):
    """A SIGINT the moment Tune takes in the end of the trials whose cell contains
    ``INTERRUPT_ON_COMPLETE`` (e.g. teachers, while their students wait): of the first one, or of
    ``INTERRUPT_ON_COMPLETE_COUNT`` of them (the members of a fused group end one after another in
    Tune's eyes). Records the last one's id to ``INTERRUPT_RECORD`` first, with the trials Tune
    holds at that point and the status of each."""

    def __init__(self) -> None:
        self.cell = os.environ[ENV_CELL]
        self.record = os.environ[ENV_RECORD]
        self.count = int(os.environ.get(ENV_COUNT, "1"))
        self.ended = 0
        self.fired = False

    def on_trial_complete(self, iteration, trials, trial, **info) -> None:
        if self.fired or self.cell not in str(trial.config.get("cell", "")):
            return
        self.ended += 1
        if self.ended < self.count:
            return
        self.fired = True
        with open(self.record, "w") as f:
            held = {t.trial_id: t.status for t in trials}
            json.dump({"finished": trial.trial_id, "trials": list(held), "status": held}, f)
        os.kill(os.getpid(), signal.SIGINT)
