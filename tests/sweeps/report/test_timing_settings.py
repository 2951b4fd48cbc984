"""results.md says what the timing stage decoded and under which settings, from results.csv's
``timing_split`` and ``timing_threads``: a sweep timed on the test split is not said to have decoded
the validation set, and one whose figures were taken under two settings (a warm start keeps a
reused row's figures as they were) says so, with how many of each. No Ray, no torch."""

from __future__ import annotations

from pathlib import Path

from sweeps.report.markdown import mixed_timing_line, timing_text
from sweeps.report.results import read_results
from sweeps.timing.record import attach_timing

ROOT = Path(__file__).resolve().parents[3]


def _timed() -> object:
    df = read_results(ROOT / "docs/results/k_vs_length/results.csv")
    return df.assign(timing_split="valid", timing_threads=1, timing_device="cpu")


def test_the_stage_writes_the_settings_a_figure_was_taken_under():
    row: dict = {}
    timing = {
        "decode_seconds": 0.5,
        "iqr_seconds": 0.01,
        "min_seconds": 0.49,
        "max_seconds": 0.52,
        "repeats": 5,
        "device": "cpu",
        "threads": 2,
    }
    attach_timing(row, timing, None, "test")
    assert (row["timing_split"], row["timing_threads"], row["timing_device"]) == ("test", 2, "cpu")


def test_one_setting_is_named_and_two_are_said_apart():
    df = _timed()
    assert "the seconds to decode the validation set" in timing_text(df)
    assert mixed_timing_line(df) == ""
    tested = df.assign(timing_split="test")
    assert "the seconds to decode the test set" in timing_text(tested)
    # a warm start: one new model timed on the test split with 2 threads beside 53 reused ones
    mixed = df.copy()
    mixed.loc[mixed.index[0], ["timing_split", "timing_threads"]] = ["test", 2]
    line = mixed_timing_line(mixed)
    timed = int(df["decode_seconds"].notna().sum())
    assert "split test threads 2 device cpu: 1 model(s)" in line
    assert f"split valid threads 1 device cpu: {timed - 1} model(s)" in line
    assert line in timing_text(mixed)
    assert "the validation set or the test set" in timing_text(mixed)
    # rows from before the columns were written: "?" where results.csv does not say
    older = mixed.copy()
    older.loc[older.index[1:4], "timing_threads"] = None
    assert "threads ?" in mixed_timing_line(older)
