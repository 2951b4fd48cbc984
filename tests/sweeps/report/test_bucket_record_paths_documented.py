"""docs/reading-results.md names the folders a sweep with a bucket as storage keeps its trials'
timing.json and heldout.json in: it said ``timing/<trial>/`` for both, while the held-out stage
writes heldout.json to ``heldout/<trial>/`` in the sweep folder."""

from __future__ import annotations

from pathlib import Path

from sweeps.heldout.stage import _record_path
from sweeps.layout import HELDOUT_FILE

ROOT = Path(__file__).resolve().parents[3]


def test_the_docs_name_the_folder_the_held_out_stage_writes_to_with_a_bucket(tmp_path):
    sweep = tmp_path / "k_vs_length"
    written = _record_path("s3://bucket/k_vs_length/trial_ab12", sweep, "ab12")
    relative = written.relative_to(sweep).as_posix().replace("ab12", "<trial>")
    assert relative == f"heldout/<trial>/{HELDOUT_FILE}"
    row = next(
        line
        for line in (ROOT / "docs" / "reading-results.md").read_text().splitlines()
        if line.startswith("| trial folders |")
    )
    assert f"`{relative}`" in row, row
    assert "`timing/<trial>/timing.json`" in row, row
    # a trial folder on a local disk keeps it beside the trial's results, as the row says first
    assert _record_path(str(tmp_path / "trial_ab12"), sweep, "ab12") == (
        tmp_path / "trial_ab12" / HELDOUT_FILE
    )
