"""The committed example runs (docs/results/<sweep>/) regenerate byte for byte from their records:
``python -m sweeps.report`` rebuilds results.md, the plots and paired_bootstrap.csv from
results.csv (and a multi-objective run's optuna.journal), so a change to the report code that
changes what a researcher reads shows up here, not only in a rerun of the sweep."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sweeps.report.local import build_local_report

ROOT = Path(__file__).resolve().parents[3]
RUNS = sorted(p.parent for p in (ROOT / "docs" / "results").glob("*/results.csv"))

pytestmark = pytest.mark.train  # matplotlib draws every figure again: seconds a run


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name)
def test_a_committed_run_regenerates_byte_for_byte(run: Path, tmp_path: Path):
    copy = tmp_path / run.name
    shutil.copytree(run, copy)
    title = (run / "results.md").read_text().splitlines()[0].removeprefix("# ")
    build_local_report(copy, title=title)
    differ = [
        p.name
        for p in sorted(run.iterdir())
        if p.is_file() and p.read_bytes() != (copy / p.name).read_bytes()
    ]
    made = sorted(p.name for p in copy.iterdir())
    assert made == sorted(p.name for p in run.iterdir()), "the rebuild wrote other files"
    assert not differ, f"{run.relative_to(ROOT)}: rebuilt {differ} differ from the committed ones"


def test_the_committed_runs_are_found():
    assert {p.name for p in RUNS} >= {"k_vs_length", "minimal_k", "memory_distill"}


def test_a_baselines_probed_figure_is_labelled_as_the_probes():
    """minimal_k's "Baseline (attention=bahdanau): val/bleu 100, decode_seconds 0.01605" gave the
    decode probe's figure unlabelled, beside tables that hold the timing stage's (0.0177)."""
    text = (ROOT / "docs" / "results" / "minimal_k" / "results.md").read_text()
    lines = [line for line in text.splitlines() if line.startswith("Baseline (")]
    assert len(lines) == 3
    assert all("decode_seconds " in line and line.endswith("(probe)") for line in lines), lines


def test_a_multi_objective_tables_trials_are_results_csvs_rows():
    """The front and constrained-out tables named a trial by its number in its length's Optuna
    study (1, 8, ...), which no other record of the sweep uses: each row now leads with the trial
    id of results.csv, whose row holds the same K and BLEU."""
    import csv

    run = ROOT / "docs" / "results" / "minimal_k"
    rows = {r["trial_id"]: r for r in csv.DictReader((run / "results.csv").open())}
    listed = [
        line.split(" | ")
        for line in (run / "results.md").read_text().splitlines()
        if line.startswith("| ") and " (#" in line.split(" | ")[0]
    ]
    assert len(listed) == 9
    for cells in listed:
        trial = cells[0].removeprefix("| ").split(" (#")[0]
        assert rows[trial]["K"] == cells[1], trial
        assert abs(float(rows[trial]["val/bleu"]) - float(cells[5])) < 0.006, trial


def test_a_held_out_valid_figure_reads_as_the_table_s_figure_of_the_cell():
    """ "±" means one thing on a page: the held-out table's validation column is the first table's
    BLEU figure of the same cell (mean ± std over seeds), character for character."""
    page = (ROOT / "docs/results/k_vs_length/results.md").read_text()
    first = page.split("## Results by model and length")[1].split("\n\n")[1]
    held = page.split("## Held-out test results")[1].split("\n\n")[1]

    def cells(table: str) -> dict[str, list[str]]:
        rows = [line.strip("|").split("|") for line in table.splitlines()[2:]]
        return {r[0].strip(): [c.strip().removesuffix(" †") for c in r[1:]] for r in rows}

    first_rows, held_rows = cells(first), cells(held)
    assert set(first_rows) == set(held_rows) and len(held_rows) == 6
    for model, figures in first_rows.items():
        assert figures[0::2] == held_rows[model][0::2], model  # L=10, 20, 40: BLEU / valid
