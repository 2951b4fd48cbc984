"""A trial's ``progress.csv`` continued after a resume keeps its header's columns (Tune's own
logger took the columns of the new run's first report, which had one more key, and wrote every
value after it under the wrong column). Tune's real CSV logger, on a real file; the trial is a
stand-in holding the two attributes the logger reads. No Ray cluster."""

from __future__ import annotations

import csv
from pathlib import Path

from ray.tune.logger import CSVLoggerCallback

from sweeps.driver.trial_logs import ProgressCSV


class Trial:
    """What Tune's CSV logger reads of a trial: its staging folder, and no checkpoint to restore
    the file from storage by."""

    def __init__(self, folder: Path) -> None:
        self.local_path, self.checkpoint = str(folder), None

    def init_local_path(self) -> None:
        Path(self.local_path).mkdir(parents=True, exist_ok=True)


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def test_a_continued_progress_csv_keeps_its_header_s_columns(tmp_path):
    first = {"val/bleu": 90.0, "step": 1000, "train/loss_step": 0.3}
    # the resumed run's first report: train/loss_epoch appears (logged from the first epoch's end)
    later = {"val/bleu": 95.0, "train/loss_epoch": 0.2, "step": 2000, "train/loss_step": 0.1}
    for logger, folder in ((CSVLoggerCallback, "tune"), (ProgressCSV, "ours")):
        trial = Trial(tmp_path / folder)
        before = logger()
        before.log_trial_result(1, trial, first)
        before.log_trial_end(trial)
        after, resumed = logger(), Trial(tmp_path / folder)  # a new launcher: the file is continued
        after.log_trial_result(2, resumed, later)
        after.log_trial_end(resumed)
    shifted = _rows(tmp_path / "tune" / "progress.csv")
    assert shifted[1]["step"] == "0.2", "Tune's own logger no longer shifts: drop ProgressCSV"
    rows = _rows(tmp_path / "ours" / "progress.csv")
    assert [r["step"] for r in rows] == ["1000", "2000"]
    assert [r["val/bleu"] for r in rows] == ["90.0", "95.0"]
    assert [r["train/loss_step"] for r in rows] == ["0.3", "0.1"]
    assert all(None not in r for r in rows), "a row with more values than the header"
