"""Local sweep report: Pareto front maths, results.md + PNGs from a results.csv, W&B report construction."""
from __future__ import annotations

import math
import sys

import pandas as pd
import pytest

from sweeps import report

BLEU, SEC = report.BLEU, report.SECONDS


def table() -> pd.DataFrame:
    """Hand-made: A, B, E are the front; C is dominated by B, D by A, G ties A, F has no BLEU."""
    return pd.DataFrame(
        {
            "model": ["A", "B", "C", "D", "E", "F", "G"],
            BLEU: [90.0, 95.0, 94.0, 80.0, 99.0, math.nan, 90.0],
            SEC: [1.0, 2.0, 3.0, 1.5, 5.0, 0.1, 1.0],
        }
    )


def test_pareto_front_on_a_hand_made_table():
    front = report.pareto_front(table())
    assert table()["model"][front].tolist() == ["A", "B", "E", "G"]


def test_pareto_front_needs_strict_improvement_somewhere():
    df = pd.DataFrame({BLEU: [50.0, 50.0, 60.0], SEC: [2.0, 1.0, 1.0]})
    assert report.pareto_front(df).tolist() == [False, False, True]


def results_csv(tmp_path):
    rows = []
    for length in (10, 50):
        for model, attention, k, bleu, sec in [
            ("none", "none", None, 40.0, 1.0),
            ("memory K=4", "memory", 4, 70.0, 1.1),
            ("memory K=32", "memory", 32, 85.0, 1.3),
            ("bahdanau", "bahdanau", None, 84.0, 3.0),
        ]:
            rows.append({"trial_id": f"{model}-{length}", "cell": f"{model} L={length}", "model": model,
                         "attention": attention, "K": k, "length": length, "seed": 0, "status": "done",
                         BLEU: bleu - (length == 50) * 10, SEC: sec * length / 10, "val/loss": 1.0})
    rows.append(dict(rows[0], trial_id="x", cell="broken", status="error", error="boom", **{BLEU: None}))
    pd.DataFrame(rows).to_csv(tmp_path / "results.csv", index=False)


def test_local_report_has_tables_front_and_figures(tmp_path):
    results_csv(tmp_path)
    paths = report.main([str(tmp_path), "--title", "k vs length"])
    md = paths["md"].read_text()
    assert md.startswith("# k vs length")
    assert "memory K=32" in md and "Pareto front" in md and "boom" in md
    front_lines = [line for line in md.splitlines() if line.startswith("| 10 |")]
    assert [line.split("|")[2].strip() for line in front_lines] == ["none", "memory K=4", "memory K=32"]
    assert "bahdanau" not in "".join(front_lines)  # slower and worse than memory K=32
    for name in ("pareto", "bleu_vs_k", "decode_vs_length"):
        assert paths[name].exists() and paths[name].stat().st_size > 0
        assert f"({paths[name].name})" in md


def test_wandb_report_missing_package_has_a_clear_message(monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb_workspaces", None)
    monkeypatch.setitem(sys.modules, "wandb_workspaces.reports", None)
    monkeypatch.setitem(sys.modules, "wandb_workspaces.reports.v2", None)
    with pytest.raises(SystemExit, match="wandb-workspaces"):
        report.build_wandb_report("me", "proj", "k_vs_length")


def test_wandb_report_construction(tmp_path):
    pytest.importorskip("wandb_workspaces.reports.v2")
    results_csv(tmp_path)
    points = report.model_points(pd.read_csv(tmp_path / "results.csv"))
    rep = report.build_wandb_report("me", "proj", "k_vs_length", title="K vs length", points=points)
    assert rep.title == "K vs length" and rep.project == "proj" and rep.entity == "me"
    kinds = [type(b).__name__ for b in rep.blocks]
    assert kinds == ["H1", "P", "H2", "MarkdownBlock", "PanelGrid"]
    assert "memory K=32" in rep.blocks[3].text
    grid = rep.blocks[-1]
    assert grid.runsets[0].filters == "Group == 'k_vs_length'"
    scatter = grid.panels[0]
    assert type(scatter).__name__ == "ScatterPlot" and scatter.x == SEC and scatter.y == BLEU
    assert {type(p).__name__ for p in grid.panels} >= {"LinePlot", "BarPlot", "MediaBrowser"}


def test_one_summary_rule_for_table_front_and_plots(tmp_path):
    """Per cell: the best trial by the metric over Optuna samples for each seed, then mean +- std
    over seeds -- the same numbers in the table, the Pareto front and what the plots draw."""
    from sweeps.results import read_results, results_frame, write_results_csv

    rows = []
    for seed, samples in ((0, [(31.1, 0.50), (0.0, 0.90)]), (1, [(29.1, 0.70), (10.0, 0.10)])):
        for i, (bleu, sec) in enumerate(samples):
            rows.append({"trial_id": f"b{seed}{i}", "cell": "attention=bahdanau", "model": "bahdanau", "attention": "bahdanau",
                         "K": None, "length": 12, "seed": seed, "status": "done", BLEU: bleu, SEC: sec, "val/loss": 1.0})
    rows.append({"trial_id": "m", "cell": "attention=memory K=16", "model": "memory K=16", "attention": "memory",
                 "K": 16, "length": 12, "seed": 0, "status": "done", BLEU: 20.0, SEC: 0.2, "val/loss": 2.0})
    write_results_csv(rows, tmp_path)
    assert "memory K=16,memory,16," in (tmp_path / "results.csv").read_text(), "K stays an integer"
    df = read_results(tmp_path / "results.csv")
    assert str(df["K"].dtype) == "Int64" and df["length"].dtype.kind == "i"

    summary = report.cell_summary(df)
    bahdanau = summary[summary["model"] == "bahdanau"].iloc[0]
    assert bahdanau[BLEU] == pytest.approx((31.1 + 29.1) / 2)  # best sample per seed, not all samples
    assert bahdanau[f"{BLEU}_std"] == pytest.approx(pd.Series([31.1, 29.1]).std())
    assert bahdanau[SEC] == pytest.approx((0.50 + 0.70) / 2)  # the best trials' times, not the fastest
    assert (bahdanau["seeds"], bahdanau["trials"]) == (2, 4)

    paths = report.main([str(tmp_path)])
    md = paths["md"].read_text()
    assert "best trial by the study's metric (val/bleu, max) over its Optuna samples" in md.split("## Results")[0]
    table_line = next(line for line in md.splitlines() if line.startswith("|") and "bahdanau" in line)
    assert "30.10 ± 1.41" in table_line and table_line.split("|")[1].strip() == "12" and "12.0" not in md
    front = [line for line in md.split("## Quality vs speed")[1].splitlines() if "| bahdanau |" in line]
    assert front and "| 30.10 | 0.6000 |" in front[0], "the front shows the table's numbers"
    memory_line = next(line for line in md.splitlines() if line.startswith("|") and "memory K=16" in line)
    assert "| 20.00 " in memory_line and "| 0.2000 " in memory_line, "one seed: the mean, as formatted"
    points = report.model_points(df)
    assert points.set_index("model").loc["bahdanau", BLEU] == pytest.approx(bahdanau[BLEU])
    assert results_frame(rows)["K"].dropna().tolist() == [16]


def test_tables_order_k_as_numbers_not_text():
    rows = [
        {"cell": f"K={k}", "model": f"memory K={k}", "attention": "memory", "K": k, "length": 10, "seed": 0,
         "status": "done", BLEU: 50.0, SEC: 1.0}
        for k in (32, 16, 4, 1)
    ]
    summary = report.cell_summary(pd.DataFrame(rows))
    assert summary["model"].tolist() == ["memory K=1", "memory K=4", "memory K=16", "memory K=32"]
