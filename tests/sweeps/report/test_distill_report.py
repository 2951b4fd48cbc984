"""The §3.1 objective's report (sweeps.report.distill): its finding judged on hand-made BLEU over
three seeds (held, contradicted, not shown), the teacher column, results.md and the BLEU vs
lambda figure rebuilt from a results.csv. No Ray."""

from __future__ import annotations

import math

import pandas as pd

from sweeps.layout import RESULTS_CSV
from sweeps.report.distill import LARGE_K, SMALL_K, distill_findings
from sweeps.report.local import build_local_report
from sweeps.report.results import results_frame


def _rows() -> list[dict]:
    """L=20: a Bahdanau teacher and memory students, K in {4, 21}, lambda in {0, 1, 10}."""
    bleu = {  # (K, lambda) -> BLEU per seed
        (4, 0.0): [80.0, 82.0, 84.0],
        (4, 1.0): [85.0, 87.5, 89.0],  # +5, +5.5, +5: held
        (4, 10.0): [70.0, 90.0, 80.0],  # -10, +8, -4: not shown
        (21, 0.0): [95.0, 96.0, 97.0],
        (21, 1.0): [92.0, 93.0, 94.5],  # -3, -3, -2.5: contradicted
    }
    rows = []
    for seed in range(3):
        rows.append(
            {
                "trial_id": f"t{seed}",
                "cell": "length=20 attention=bahdanau",
                "model": "bahdanau",
                "attention": "bahdanau",
                "length": 20,
                "seed": seed,
                "status": "done",
                "val/bleu": 99.0,
            }
        )
        for (k, weight), values in bleu.items():
            rows.append(
                {
                    "trial_id": f"s{k}-{weight:g}-{seed}",
                    "cell": f"length=20 attention=memory K={k} distill_weight={weight:g}",
                    "model": f"memory K={k} distill_weight={weight:g}",
                    "attention": "memory",
                    "K": k,
                    "distill_weight": weight,
                    "length": 20,
                    "seed": seed,
                    "status": "done",
                    "val/bleu": values[seed],
                    "teacher": f"0{seed}e13825" if weight > 0 else None,
                }
            )
    return rows


def test_the_finding_is_judged_per_k_and_lambda_on_intervals_over_seeds():
    judged = {r["quantity"]: r for r in distill_findings(pd.DataFrame(_rows()))}
    assert set(judged) == {"λ=1 − λ=0 (K=4)", "λ=10 − λ=0 (K=4)", "λ=1 − λ=0 (K=21)"}
    held = judged["λ=1 − λ=0 (K=4)"]
    assert (held["finding"], held["verdict"], held["seeds"]) == (SMALL_K, "held", 3)
    half = 4.302653 * pd.Series([5.0, 5.5, 5.0]).std() / math.sqrt(3)
    assert held["estimate"] == f"+5.17 ± {half:.2f}"
    assert judged["λ=10 − λ=0 (K=4)"]["verdict"] == "not shown"
    large = judged["λ=1 − λ=0 (K=21)"]
    assert (large["finding"], large["verdict"]) == (LARGE_K, "contradicted")


def test_results_md_and_the_lambda_figure(tmp_path):
    frame = results_frame(_rows())
    (tmp_path / RESULTS_CSV).write_text(frame.to_csv(index=False))
    paths = build_local_report(tmp_path)
    assert paths["bleu_vs_lambda"].is_file()
    # K repeats over lambda: no BLEU vs K line through them, one line per lambda with two Ks
    assert paths["bleu_vs_k"].is_file() and "bleu_by_model" not in paths
    from sweeps.report.plots import bleu_vs_headline_figure
    from sweeps.report.summary import cell_summary

    fig = bleu_vs_headline_figure(cell_summary(frame), "K")
    lines = {
        c.get_label(): (c.lines[0].get_xdata().tolist(), c.lines[0].get_linestyle())
        for c in fig.axes[0].containers
    }
    assert lines == {
        "memory L=20, λ=0": ([4.0, 21.0], "-"),
        "memory L=20, λ=1": ([4.0, 21.0], "--"),
        "memory L=20, λ=10": ([4.0], "None"),  # at one K: a lone marker, not left out
    }
    md = (tmp_path / "results.md").read_text()
    assert f"| {SMALL_K} | 20 | λ=1 − λ=0 (K=4) | +5.17 ± " in md and "| 3 | held |" in md
    assert f"| {LARGE_K} | 20 | λ=1 − λ=0 (K=21) |" in md and "contradicted" in md
    assert "![bleu_vs_lambda](bleu_vs_lambda.png)" in md
    # the teacher column reads back as trial ids (text: 0e13825 is no number)
    back = pd.read_csv(tmp_path / RESULTS_CSV, dtype=str)
    assert "00e13825" in set(back["teacher"].dropna())
    from sweeps.report.results import read_results

    assert read_results(tmp_path / RESULTS_CSV)["teacher"].dropna().iloc[0] == "00e13825"


def test_no_finding_without_a_lambda_axis():
    rows = [r for r in _rows() if r.get("distill_weight", 0) == 0]
    assert distill_findings(pd.DataFrame(rows)) == []


def test_a_best_memory_model_taught_by_its_comparator_is_said_to_be_a_student(tmp_path):
    """The Table 1 finding and the bootstrap compare memory attention with Bahdanau; where the
    best memory model is a student of a Bahdanau teacher, the page says the comparison is not the
    paper's. A weight-0 student started from scratch is memory attention alone."""
    from sweeps.report.findings import taught_models, taught_note

    frame = results_frame(_rows())
    assert taught_models(frame) == {
        "memory K=4 distill_weight=1",
        "memory K=4 distill_weight=10",
        "memory K=21 distill_weight=1",
    }
    assert taught_note(frame, {"memory K=21 distill_weight=0", "bahdanau"}) == ""
    assert taught_note(frame, {"memory K=21 distill_weight=1"}).startswith(
        "memory K=21 distill_weight=1 was taught by a teacher (its attention contexts, or its "
        "trained encoder to start from): a comparison of it with the teacher's mechanism is not "
        "the paper's"
    )
    started = [dict(r, teacher="x", init_from_teacher="encoder") for r in _rows()]
    assert "memory K=21 distill_weight=0" in taught_models(results_frame(started))
