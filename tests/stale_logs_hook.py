"""Test-only: leave the storage copy of a trial's Tune logs one report behind, as Ray's periodic
copy of the driver's staging folder does by chance (it runs every few seconds to minutes).

Loaded by Tune through ``RAY_TUNE_CALLBACKS=stale_logs_hook.StaleLogsAtStep`` (see
:mod:`interrupt_hook`). When Tune takes in the report at ``STALE_LOGS_AT_STEP``, the hook writes
the trial's ``result.json`` in storage as it was just before that report: the state a failing
trial met in CI, where its retry then lost that report from ``result.json``. Run with
``TUNE_GLOBAL_CHECKPOINT_S`` large and ``storage.keep_checkpoints`` above the trial's checkpoint
count, so that no real copy to storage replaces the planted one before the retry.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ray.tune import Callback

ENV_STEP = "STALE_LOGS_AT_STEP"


class StaleLogsAtStep(Callback):
    def __init__(self) -> None:
        self.step = int(os.environ[ENV_STEP])
        self.done = False

    def on_trial_result(self, iteration, trials, trial, result, **info) -> None:
        if self.done or result.get("step") != self.step:
            return
        self.done = True
        staged = Path(trial.local_path, "result.json").read_text().splitlines()
        before = [line for line in staged if line.strip() and json.loads(line)["step"] < self.step]
        remote = Path(trial.storage.trial_fs_path, "result.json")
        remote.parent.mkdir(parents=True, exist_ok=True)
        remote.write_text("".join(f"{line}\n" for line in before))
