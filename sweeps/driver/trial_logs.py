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
:class:`ProgressCSV` keeps a continued ``progress.csv`` under its own header.
"""

from __future__ import annotations

import csv
import logging
from pathlib import Path

from ray.tune import Callback
from ray.tune.logger import CSVLoggerCallback  # docs/internals.md
from ray.tune.result import EXPR_PROGRESS_FILE

from sweeps.layout import TUNE_RESULT_FILE

log = logging.getLogger(__name__)

#: Tune's per-trial log files that its loggers restore from storage on a retry
RESTORED_FILES = (TUNE_RESULT_FILE, EXPR_PROGRESS_FILE)


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


def csv_header(path: Path) -> list[str] | None:
    """The column names on the first line of a ``progress.csv`` (None: no file, or no line)."""
    try:
        with path.open(newline="") as f:
            return next(csv.reader(f), None) or None
    except OSError:
        return None


class ProgressCSV(CSVLoggerCallback):
    """Tune's ``progress.csv`` logger, but a file it continues (a resumed or retried trial) keeps
    the columns of its header.

    Tune's logger takes its columns from the first report it sees, and writes the header only for
    a new file: a trial continued after a resume whose first report has other keys than the
    header (``train/loss_epoch``, logged from the end of the first epoch on) wrote rows with more
    values than the header names, every value after the new key under the wrong column. Here a
    continued file's rows are written under its header's columns (a key the header lacks is left
    out, as Tune leaves out a key that first appears after the first report)."""

    def log_trial_result(self, iteration: int, trial, result: dict) -> None:
        if trial not in self._trial_files:
            self._setup_trial(trial)
        if self._trial_csv.get(trial) is None and self._trial_continue.get(trial):
            header = csv_header(Path(trial.local_path, EXPR_PROGRESS_FILE))
            if header:
                self._trial_csv[trial] = csv.DictWriter(self._trial_files[trial], header)
        super().log_trial_result(iteration, trial, result)


class KeepTrialLogs(Callback):
    """Saves a trial's log files to storage when Tune retries it (a failure or a lost node)."""

    def on_trial_recover(self, iteration: int, trials: list, trial, **info) -> None:
        push_trial_logs(trial)
