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
