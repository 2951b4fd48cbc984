"""Keeps a retried trial's Tune log files whole.

Tune writes a trial's ``result.json`` and ``progress.csv`` in a staging folder on the driver and
copies that folder to the sweep's storage now and then (every few minutes, or when the experiment
state is saved). When a failed trial restarts from its checkpoint, Tune's loggers first copy the
*storage* copy of those files back over the staging copy. A report made after the last copy to
storage (the one whose checkpoint the trial restarts from, often) is then lost from both files,
though its checkpoint is kept, the console showed it, and W&B and results.csv hold it: Ray 2.60
drops it, by chance, when the trial fails soon after reporting (CI saw ``result.json`` steps
``[10, 30, 40]``).

:class:`KeepTrialLogs` copies the staging files to storage the moment Tune decides to retry a
trial, before the restart reads them back, so what is restored is everything the trial reported.
"""

from __future__ import annotations

import logging
from pathlib import Path

from ray.tune import Callback

log = logging.getLogger(__name__)

#: Tune's per-trial log files that its loggers restore from storage on a retry
RESTORED_FILES = ("result.json", "progress.csv")


def push_trial_logs(trial) -> None:
    """Copy ``trial``'s staged log files to its folder in the sweep's storage."""
    import pyarrow.fs

    storage, staged = trial.storage, Path(trial.local_path)
    for name in RESTORED_FILES:
        local = staged / name
        remote = Path(storage.trial_fs_path, name).as_posix()
        if not local.is_file() or local.as_posix() == remote:
            continue
        try:
            storage.storage_filesystem.create_dir(storage.trial_fs_path, recursive=True)
            pyarrow.fs.copy_files(
                local.as_posix(), remote, destination_filesystem=storage.storage_filesystem
            )
        except Exception as e:  # the retry goes on; only the log file may miss a line
            log.warning("could not save %s of trial %s before its retry: %s", name, trial, e)


class KeepTrialLogs(Callback):
    """Saves a trial's log files to storage when Tune retries it (a failure or a lost node)."""

    def on_trial_recover(self, iteration: int, trials: list, trial, **info) -> None:
        push_trial_logs(trial)
