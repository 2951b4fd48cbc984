"""Local sweep report: Pareto front maths, results.md + PNGs from a results.csv, W&B report construction."""

from __future__ import annotations

import math
import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest
from sweep_helpers import done_row

from lightning_modules.metric_names import VAL_BLEU as BLEU
from sweeps.report import local as report
from sweeps.report.figures import CONTENDED_LABEL, pareto_figure
from sweeps.report.markdown import length_table
from sweeps.report.results import DECODE_SECONDS as SEC
from sweeps.report.summary import cell_summary, model_points, pareto_front
from sweeps.report.wandb_report import build_wandb_report

# pytest.mark.report: the test builds a sweep's whole report, every table and figure (seconds;
# make test-fast leaves it out)


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
    front = pareto_front(table())
    assert table()["model"][front].tolist() == ["A", "B", "E", "G"]


def test_pareto_front_needs_strict_improvement_somewhere():
    df = pd.DataFrame({BLEU: [50.0, 50.0, 60.0], SEC: [2.0, 1.0, 1.0]})
    assert pareto_front(df).tolist() == [False, False, True]


def results_csv(tmp_path):
    rows = []
    for length in (10, 50):
        for model, attention, k, bleu, sec in [
            ("none", "none", None, 40.0, 1.0),
            ("memory K=4", "memory", 4, 70.0, 1.1),
            ("memory K=32", "memory", 32, 85.0, 1.3),
            ("bahdanau", "bahdanau", None, 84.0, 3.0),
        ]:
            rows.append(
                {
                    "trial_id": f"{model}-{length}",
                    "cell": f"{model} L={length}",
                    "model": model,
                    "attention": attention,
                    "K": k,
                    "length": length,
                    "seed": 0,
                    "status": "done",
                    BLEU: bleu - (length == 50) * 10,
                    SEC: sec * length / 10,
                    "val/loss": 1.0,
                }
            )
    rows.append(
        dict(rows[0], trial_id="x", cell="broken", status="error", error="boom", **{BLEU: None})
    )
    pd.DataFrame(rows).to_csv(tmp_path / "results.csv", index=False)


@pytest.mark.report
def test_local_report_has_tables_front_and_figures(tmp_path):
    results_csv(tmp_path)
    paths = report.main([str(tmp_path), "--title", "k vs length"])
    md = paths["md"].read_text()
    assert md.startswith("# k vs length")
    assert "memory K=32" in md and "Pareto front" in md and "boom" in md
    front_lines = [line for line in md.splitlines() if line.startswith("| 10 |")]
    assert [line.split("|")[2].strip() for line in front_lines] == [
        "none",
        "memory K=4",
        "memory K=32",
    ]
    assert "bahdanau" not in "".join(front_lines)  # slower and worse than memory K=32
    for name in ("pareto", "bleu_vs_k", "decode_vs_length"):
        assert paths[name].exists() and paths[name].stat().st_size > 0
        assert f"({paths[name].name})" in md


def test_wandb_report_missing_package_has_a_clear_message(monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb_workspaces", None)
    monkeypatch.setitem(sys.modules, "wandb_workspaces.reports", None)
    monkeypatch.setitem(sys.modules, "wandb_workspaces.reports.v2", None)
    with pytest.raises(SystemExit, match="wandb-workspaces"):
        build_wandb_report("me", "proj", "k_vs_length")


@pytest.mark.report
def test_wandb_report_construction_from_points(tmp_path):
    pytest.importorskip("wandb_workspaces.reports.v2")
    results_csv(tmp_path)
    points = model_points(pd.read_csv(tmp_path / "results.csv"))
    rep = build_wandb_report("me", "proj", "k_vs_length", title="K vs length", points=points)
    assert rep.title == "K vs length" and rep.project == "proj" and rep.entity == "me"
    kinds = [type(b).__name__ for b in rep.blocks]
    assert kinds == ["H1", "P", "H2", "MarkdownBlock", "H2", "P", "PanelGrid"]
    assert "memory K=32" in rep.blocks[3].text
    grid = rep.blocks[-1]
    assert grid.runsets[0].filters == "Group == 'k_vs_length'"
    mine = build_wandb_report("me", "proj", "k_vs_length", points=points, sweep_id="0123abcd4567")
    assert mine.blocks[-1].runsets[0].filters == (
        "Group == 'k_vs_length' and Config('sweep_id') == '0123abcd4567'"
    )
    scatter = next(
        p
        for p in grid.panels
        if type(p).__name__ == "ScatterPlot" and p.title == "BLEU vs decode time"
    )
    assert (
        scatter.x.name == SEC and scatter.y.name == BLEU
    )  # the timing stage's figure, added to the runs' summaries
    assert {type(p).__name__ for p in grid.panels} >= {"LinePlot", "BarPlot", "MediaBrowser"}


@pytest.mark.report
def test_one_summary_rule_for_table_front_and_plots(tmp_path):
    """Per cell: the best trial by the metric over Optuna samples for each seed, then mean +- std
    over seeds -- the same numbers in the table, the Pareto front and what the plots draw."""
    from sweeps.report.results import read_results, results_frame, write_results_csv

    rows = []
    for seed, samples in ((0, [(31.1, 0.50), (0.0, 0.90)]), (1, [(29.1, 0.70), (10.0, 0.10)])):
        for i, (bleu, sec) in enumerate(samples):
            rows.append(
                {
                    "trial_id": f"b{seed}{i}",
                    "cell": "attention=bahdanau",
                    "model": "bahdanau",
                    "attention": "bahdanau",
                    "K": None,
                    "length": 12,
                    "seed": seed,
                    "status": "done",
                    BLEU: bleu,
                    SEC: sec,
                    "val/loss": 1.0,
                }
            )
    rows.append(
        {
            "trial_id": "m",
            "cell": "attention=memory K=16",
            "model": "memory K=16",
            "attention": "memory",
            "K": 16,
            "length": 12,
            "seed": 0,
            "status": "done",
            BLEU: 20.0,
            SEC: 0.2,
            "val/loss": 2.0,
        }
    )
    write_results_csv(rows, tmp_path)
    assert "memory K=16,memory,16," in (tmp_path / "results.csv").read_text(), "K stays an integer"
    df = read_results(tmp_path / "results.csv")
    assert str(df["K"].dtype) == "Int64" and df["length"].dtype.kind == "i"

    summary = cell_summary(df)
    bahdanau = summary[summary["model"] == "bahdanau"].iloc[0]
    assert bahdanau[BLEU] == pytest.approx(
        (31.1 + 29.1) / 2
    )  # best sample per seed, not all samples
    assert bahdanau[f"{BLEU}_std"] == pytest.approx(pd.Series([31.1, 29.1]).std())
    assert bahdanau[SEC] == pytest.approx(
        (0.50 + 0.70) / 2
    )  # the best trials' times, not the fastest
    assert (bahdanau["seeds"], bahdanau["trials"]) == (2, 4)

    paths = report.main([str(tmp_path)])
    md = paths["md"].read_text()
    assert (
        "best trial by the sweep's metric (val/bleu, max) over its Optuna samples"
        in md.split("## Results")[0]
    )
    long_table = md.split("## Results by length and model")[1]
    table_line = next(
        line for line in long_table.splitlines() if line.startswith("|") and "bahdanau" in line
    )
    assert (
        "30.10 ± 1.41" in table_line
        and table_line.split("|")[1].strip() == "12"
        and "12.0" not in md
    )
    front = [
        line for line in md.split("## Quality vs speed")[1].splitlines() if "| bahdanau |" in line
    ]
    assert front and "| 30.10 | 0.6000 |" in front[0], "the front shows the table's numbers"
    memory_line = next(
        line for line in long_table.splitlines() if line.startswith("|") and "memory K=16" in line
    )
    assert "| 20.00 " in memory_line and "| 0.2000 " in memory_line, (
        "one seed: the mean, as formatted"
    )
    points = model_points(df)
    assert points.set_index("model").loc["bahdanau", BLEU] == pytest.approx(bahdanau[BLEU])
    assert results_frame(rows)["K"].dropna().tolist() == [16]


def test_a_column_only_some_sweeps_fill_is_written_only_where_a_trial_has_it():
    """A copy-task sweep without students has no val/sacrebleu and no train/distill column (the
    docs: a script asks whether a column is there); a translation sweep's rows, or a student's,
    bring theirs. The columns every trial reports stay, empty or not."""
    from sweeps.report.results import results_frame

    row = {"trial_id": "a", "cell": "c", "model": "none", "length": 4, "seed": 0, "status": "done"}
    row[BLEU] = 9.0
    copy = results_frame([row])
    assert {"val/sacrebleu", "train/distill", "timing_split"}.isdisjoint(copy.columns)
    assert {BLEU, "val/loss", SEC}.issubset(copy.columns)
    wmt = results_frame([row, {**row, "trial_id": "b", "val/sacrebleu": 21.0}])
    assert wmt["val/sacrebleu"].tolist()[1] == 21.0 and "train/distill" not in wmt
    assert "val/sacrebleu" not in results_frame([])


def test_tables_order_k_as_numbers_not_text():
    rows = [
        {
            "cell": f"K={k}",
            "model": f"memory K={k}",
            "attention": "memory",
            "K": k,
            "length": 10,
            "seed": 0,
            "status": "done",
            BLEU: 50.0,
            SEC: 1.0,
        }
        for k in (32, 16, 4, 1)
    ]
    summary = cell_summary(pd.DataFrame(rows))
    assert summary["model"].tolist() == ["memory K=1", "memory K=4", "memory K=16", "memory K=32"]
    assert str(summary["K"].dtype) == "Int64", "K=16, not 16.0"


def test_a_headline_option_with_fractional_values_keeps_them():
    """A mechanism's headline option may be real-valued (CONTRIBUTING.md's recipe was tried with a
    softmax temperature): the summary shows 0.5, and did not fail casting it to an integer."""
    rows = [
        {
            "cell": f"w={w}",
            "model": f"local_m window={w}",
            "attention": "local_m",
            "window": w,
            "length": 10,
            "seed": 0,
            "status": "done",
            BLEU: 50.0,
            SEC: 1.0,
        }
        for w in (0.5, 2.0)
    ]
    summary = cell_summary(pd.DataFrame(rows))
    assert summary["window"].tolist() == [0.5, 2.0]


# ------------------------------------------------------------------ contended times, the paper's layout
MODELS = [
    ("none", "none", None, 40.0, 0.05),
    ("memory K=4", "memory", 4, 70.0, 0.045),
    ("bahdanau", "bahdanau", None, 84.0, 0.09),
]


def sweep_rows(lengths=(10, 50), seeds=(0, 1), models=MODELS, contended=()) -> list[dict]:
    """One done trial per (length, model, seed); ``contended`` holds (model, length, seed) whose
    decode time the timing stage flagged (and which came out 1.8x slow, as on a busy machine)."""
    rows = []
    for length in lengths:
        for seed in seeds:
            for model, attention, k, bleu, sec in models:
                busy = (model, length, seed) in contended
                rows.append(
                    {
                        "trial_id": f"{model}-{length}-{seed}",
                        **done_row(model, attention, k, length, seed),
                        BLEU: bleu - (length == 50) * 10 + seed,
                        SEC: sec * length / 10 * (1 + 0.1 * seed) * (1.8 if busy else 1),
                        "decode_repeats": 5,
                        "decode_contended": busy,
                        "val/loss": 1.0,
                    }
                )
    return rows


def written_report(tmp_path, rows) -> str:
    from sweeps.report.results import write_results_csv

    write_results_csv(rows, tmp_path)
    return report.main([str(tmp_path), "--title", "study"])["md"].read_text()


def table_rows(md: str, section: str) -> list[list[str]]:
    """The cells of the first Markdown table under ``## <section>`` (header first, rule skipped)."""
    lines = md.split(f"## {section}\n")[1].split("\n## ")[0].splitlines()
    table = [line for line in lines if line.startswith("|") and not set(line) <= set("|:- ")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in table]


PAPER = "Results by model and length (the paper's Table 1 layout)"


@pytest.mark.report
def test_a_contended_time_is_marked_in_every_table_and_counted(tmp_path):
    """Read back from results.csv (True/False as text): one seed of one cell contended -> that cell's
    mean carries the dagger in the paper's table, the long table and the page counts it."""
    md = written_report(tmp_path, sweep_rows(contended={("none", 50, 1)}))
    paper = {row[0]: row for row in table_rows(md, PAPER)}
    header = table_rows(md, PAPER)[0]
    decode_50 = header.index("L=50 decode s")
    assert paper["none"][decode_50].endswith(" †")
    assert sum(cell.endswith("†") for row in paper.values() for cell in row) == 1, "only that cell"
    long = table_rows(md, "Results by length and model")
    marked = [row for row in long[1:] if row[3].endswith("†")]
    assert [(row[0], row[1]) for row in marked] == [("50", "none")]
    assert "1 of 6 decode times is contended (†)" in md and "not speed figures" in md
    assert "not speed figures" not in md.split("## ")[0], (
        "no warning at the top: most timings are clean"
    )
    summary = cell_summary(pd.read_csv(tmp_path / "results.csv"))
    assert summary.set_index("cell")["contended"].to_dict() == {
        "length=10 bahdanau": 0,
        "length=10 memory K=4": 0,
        "length=10 none": 0,
        "length=50 bahdanau": 0,
        "length=50 memory K=4": 0,
        "length=50 none": 1,
    }


@pytest.mark.report
def test_a_seed_whose_timing_failed_is_said_not_averaged_away(tmp_path):
    """One seed's timing failed: the cell's decode mean was of the other seeds under "seeds 3",
    and the error appeared nowhere on the page."""
    rows = sweep_rows(seeds=(0, 1, 2))
    failed = next(r for r in rows if r["trial_id"] == "bahdanau-50-2")
    failed[SEC], failed["timing_error"] = None, "timing failed: the process ran out of memory"
    md = written_report(tmp_path, rows)
    paper = {row[0]: row for row in table_rows(md, PAPER)}
    decode_50 = table_rows(md, PAPER)[0].index("L=50 decode s")
    timed = [r[SEC] for r in rows if r["trial_id"] in ("bahdanau-50-0", "bahdanau-50-1")]
    assert paper["bahdanau"][decode_50].startswith(f"{sum(timed) / 2:.4f} ± ")
    assert paper["bahdanau"][decode_50].endswith(" (2 of 3 seeds)")
    assert sum("of 3 seeds" in cell for row in paper.values() for cell in row) == 1, "that cell"
    assert (
        "The timing stage failed for length=50 bahdanau seed=2 (timing failed: the process ran "
        "out of memory)"
    ) in md


@pytest.mark.train
@pytest.mark.report
def test_a_contended_points_stay_in_the_front_marked_and_the_rule_is_stated(tmp_path):
    # memory K=4 at L=10 contended (1.8x slower) is still on the front: it keeps its place, marked
    md = written_report(tmp_path, sweep_rows(contended={("memory K=4", 10, 0)}))
    front = md.split("## Quality vs speed: the Pareto front")[1]
    memory = next(line for line in front.splitlines() if line.startswith("| 10 | memory K=4 |"))
    assert "†" in memory
    assert "kept in the front's computation and marked" in front
    assert "Not trustworthy here, fronts among contended figures: L=10 (1 of 3" in front
    assert "L=50 (" not in front.split("Not trustworthy here")[1]


@pytest.mark.report
def test_a_all_contended_study_says_so_at_the_top(tmp_path):
    everything = {(m, length, seed) for m, *_ in MODELS for length in (10, 50) for seed in (0, 1)}
    md = written_report(tmp_path, sweep_rows(contended=everything))
    top = md.split("## ")[0]
    assert (
        "**The decode times in this sweep are not speed figures:** all 6 are contended (†)" in top
    )


@pytest.mark.report
def test_a_no_timing_stage_says_so_at_the_top(tmp_path):
    rows = sweep_rows()
    for row in rows:
        row["val/decode_seconds"], row[SEC], row["decode_contended"] = row.pop(SEC), None, None
    md = written_report(tmp_path, rows)
    assert "not speed figures:** the timing stage did not run" in md.split("## ")[0]
    assert "†" not in md
    # stopped before the timing stage timed them: said so, with what times them
    from sweeps.timing.stage import NOT_TIMED

    for row in rows:
        row["timing_error"] = NOT_TIMED
    md = written_report(tmp_path, rows)
    top = md.split("## ")[0]
    assert (
        "not speed figures:** the sweep stopped before its timing stage timed these models "
        "(`--resume` times them)" in top
    ), top
    assert "(not timed yet: `--resume` times them): not speed figures." in md


def test_a_pareto_figure_marks_contended_points_and_draws_seed_error_bars():
    from matplotlib.container import ErrorbarContainer

    from sweeps.report import plots

    points = model_points(pd.DataFrame(sweep_rows(contended={("none", 50, 1)})))
    fig = pareto_figure(points)
    ax = fig.axes[0]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert CONTENDED_LABEL in legend and "error bars: ± std over seeds" in legend
    assert any(
        isinstance(c, ErrorbarContainer) and c.has_xerr and c.has_yerr for c in ax.containers
    ), "xerr/yerr over seeds"
    assert "none †" in [t.get_text() for t in ax.texts]
    crosses = [c for c in ax.collections if c.get_offsets().shape[0] and _marker_is_x(c)]
    assert len(crosses) == 1 and crosses[0].get_offsets().shape[0] == 1
    plots.plt.close(fig)

    one_seed = model_points(pd.DataFrame(sweep_rows(seeds=(0,))))
    fig = pareto_figure(one_seed)
    ax = fig.axes[0]
    assert not any(isinstance(c, ErrorbarContainer) for c in ax.containers), (
        "one seed: no spread to draw"
    )
    assert CONTENDED_LABEL not in [t.get_text() for t in ax.get_legend().get_texts()]
    plots.plt.close(fig)


def _marker_is_x(collection) -> bool:
    """A scatter drawn with marker="x" (its path is the x marker's)."""
    import numpy as np
    from matplotlib.markers import MarkerStyle

    x = MarkerStyle("x")
    x_path = x.get_path().transformed(x.get_transform())
    paths = collection.get_paths()
    return (
        len(paths) == 1
        and paths[0].vertices.shape == x_path.vertices.shape
        and np.allclose(paths[0].vertices, x_path.vertices)
    )


@pytest.mark.report
def test_b_results_md_leads_with_one_row_per_model_and_lengths_as_columns(tmp_path):
    md = written_report(tmp_path, sweep_rows())
    assert (
        md.index(PAPER)
        < md.index("## Results by length and model")
        < md.index("## Quality vs speed")
    )
    rows = table_rows(md, PAPER)
    assert rows[0] == ["model", "L=10 BLEU", "L=10 decode s", "L=50 BLEU", "L=50 decode s"]
    assert [row[0] for row in rows[1:]] == ["bahdanau", "memory K=4", "none"], (
        "one row per model, natural order"
    )
    memory = rows[2]
    assert memory[1] == "70.50 ± 0.71" and memory[3] == "60.50 ± 0.71"
    assert memory[2] == "0.0473 ± 0.0032"
    assert "Seeds: 2 (0, 1): each figure is the mean ± std over seeds." in md.split("## ")[0]
    long = table_rows(md, "Results by length and model")
    assert long[0][:2] == ["length", "model"] and len(long) == 1 + 6, "the long table stays below"


@pytest.mark.report
def test_b_a_searched_k_is_shown_beside_the_figure_of_the_trial_chosen(tmp_path):
    """minimal_k searches K per length with Optuna: its Table 1 read "memory 99.52" with no word of
    the K chosen (only the multi-objective answers said K=3). A grid K (the model's name says it)
    gets no mark; seeds whose chosen trials differ in K show both."""
    rows = sweep_rows(lengths=(10,), models=[("memory K=4", "memory", 4, 80.0, 0.04)])
    for seed, (k, bleu) in enumerate([(3, 95.0), (5, 97.0)]):  # per seed: a better, searched K
        for searched_k, searched_bleu in ((k, bleu), (k + 10, bleu - 20)):
            rows.append(
                dict(
                    rows[seed],
                    trial_id=f"s{seed}-{searched_k}",
                    cell="length=10 memory",
                    model="memory",
                    K=searched_k,
                    **{BLEU: searched_bleu},
                )
            )
    md = written_report(tmp_path, rows)
    table = {row[0]: row for row in table_rows(md, PAPER)}
    assert table["memory"][1] == "96.00 ± 1.41 (K=3/5)"
    assert table["memory K=4"][1] == "80.50 ± 0.71", "a grid K is in the model's name already"
    assert "(K=...) beside a figure: the value of the trial chosen there" in md
    long = table_rows(md, "Results by length and model")
    assert long[0][:3] == ["length", "model", "K"]
    assert {row[1]: row[2] for row in long[1:]} == {"memory": "3/5", "memory K=4": ""}
    front = table_rows(md, "Quality vs speed: the Pareto front")
    assert "memory (K=3/5)" in {row[1] for row in front[1:]}


@pytest.mark.report
def test_b_one_seed_shows_no_spread_and_a_missing_cell_a_dash(tmp_path):
    rows = [
        r for r in sweep_rows(seeds=(3,)) if not (r["model"] == "bahdanau" and r["length"] == 50)
    ]
    md = written_report(tmp_path, rows)
    table = table_rows(md, PAPER)
    assert "±" not in md.split("## Results by length and model")[0]
    assert table[1] == ["bahdanau", "87.00", "0.1170", "–", "–"]
    assert "Seeds: 1 (seed 3)" in md


def test_b_length_table_needs_a_length_axis():
    rows = [dict(r, length=None, cell=r["model"]) for r in sweep_rows(lengths=(10,), seeds=(0,))]
    assert length_table(pd.DataFrame(rows)).empty
    table = length_table(pd.DataFrame(sweep_rows(lengths=(20,), seeds=(0,))))
    assert list(table.columns) == ["model", "L=20 BLEU", "L=20 decode s"]


def test_d_wandb_report_carries_the_paper_table_and_length_panels(tmp_path):
    wr = pytest.importorskip("wandb_workspaces.reports.v2")
    df = pd.DataFrame(sweep_rows(contended={("none", 50, 1)}))
    rep = build_wandb_report("me", "proj", "k_vs_length", results=df)
    headings = [b.text for b in rep.blocks if type(b).__name__ == "H2"]
    assert PAPER in headings and "Quality vs speed: the Pareto front" in headings
    # two seeds: the same seed sections as results.md (intervals, the findings judged on them)
    assert "BLEU over seeds: 95% intervals per cell" in headings
    assert "The paper's findings, judged on the intervals" in headings
    paper = rep.blocks[
        [type(b).__name__ == "H2" and b.text == PAPER for b in rep.blocks].index(True) + 1
    ]
    assert type(paper).__name__ == "MarkdownBlock"
    assert "| model " in paper.text and "L=50 decode s" in paper.text and "†" in paper.text
    assert "1 of 6 decode times is contended (†)" in paper.text
    panels = rep.blocks[-1].panels
    by_length = [
        p for p in panels if type(p).__name__ == "ScatterPlot" and p.x == wr.Config("length")
    ]
    assert {p.y.name for p in by_length} == {BLEU, SEC}
    for (
        panel
    ) in panels:  # each panel serialises offline (the runset needs a login, the panels don't)
        panel._to_model()

    one_length = build_wandb_report(
        "me", "proj", "g", results=pd.DataFrame(sweep_rows(lengths=(10,)))
    )
    assert not [
        p
        for p in one_length.blocks[-1].panels
        if type(p).__name__ == "ScatterPlot" and p.x == wr.Config("length")
    ]


@pytest.mark.report
def test_a_results_md_names_the_device_the_timing_stage_ran_on(tmp_path):
    """results.csv's timing_device(_name) decide where results.md says the models were timed: a GPU
    sweep's page once claimed "on CPU in processes pinned to their core(s)"."""
    rows = sweep_rows()
    for row in rows:
        row["timing_device"], row["timing_device_name"] = "cuda", "NVIDIA H200"
    md = written_report(tmp_path, rows)
    assert "after the Tune run, on GPU (NVIDIA H200);" in md and "on CPU" not in md
    for row in rows[:2]:
        row["timing_device"], row["timing_device_name"] = "cpu", "AMD EPYC"
    md = written_report(tmp_path, rows)
    assert "on CPU (AMD EPYC) in processes pinned to their core(s) and on GPU (NVIDIA H200);" in md
    for row in rows:  # a results.csv written before the columns: every such sweep timed on CPU
        del row["timing_device"], row["timing_device_name"]
    md = written_report(tmp_path, rows)
    assert "after the Tune run, on CPU in processes pinned to their core(s);" in md


def test_the_command_says_what_is_wrong_with_its_folder_or_metric_and_writes_nothing(
    tmp_path, capsys
):
    """A folder without results.csv names the sweeps inside it (or where results.csv lives); a
    --metric that is not a figure of results.csv lists those that are. No traceback, no file."""

    def error_of(*argv: str) -> str:
        with pytest.raises(SystemExit) as info:
            report.main([str(a) for a in argv])
        assert info.value.code == 2
        return capsys.readouterr().err.strip().splitlines()[-1]

    odd = tmp_path / "odd"
    (odd / "results.csv").mkdir(parents=True)  # it said "no results.csv here"
    assert error_of(odd) == (
        f"python -m sweeps.report: error: {odd / 'results.csv'}: not a file, where the launch "
        "writes its results.csv; move it away (a launch's --resume writes the file again)"
    )
    assert error_of(tmp_path) == (
        f"python -m sweeps.report: error: {tmp_path}: no results.csv here; give the sweep's own "
        "folder, <output>/<name> (e.g. sweep-results/quickstart), where its launch wrote results.csv"
    )
    sweep = tmp_path / "k_vs_length"
    sweep.mkdir()
    rows = table().assign(
        trial_id=list("abcdefg"), cell=list("abcdefg"), length=20, seed=0, status="done"
    )
    rows.to_csv(sweep / "results.csv", index=False)
    assert error_of(tmp_path).endswith(f"no results.csv here; the sweeps in it with one: {sweep}")
    said = error_of(sweep, "--metric", "val/blue")
    assert said.startswith("python -m sweeps.report: error: --metric val/blue: not a column of ")
    assert said.endswith(f"its metrics: {BLEU}, {SEC}")
    assert sorted(p.name for p in sweep.iterdir()) == ["results.csv"]
    # a results.csv that would rebuild the report as one of nothing: refused, the report kept
    (sweep / "results.md").write_text("the report of 7 trials")
    whole = (sweep / "results.csv").read_text()
    assert error_of(sweep / "results.csv").endswith(
        f"give the sweep's folder, {sweep}, not its results.csv"
    )
    for text, said in [
        (whole.splitlines()[0] + "\n", "no trial rows (only a header)"),
        (whole[: whole.rindex(",")], "line 8 has 7 fields where the header has 8"),
        (whole.replace("status", "state"), "no status column: not a results.csv the launch wrote"),
        # the report reads each trial's model and length (a traceback after the plots were redrawn)
        (whole.replace("length", "len"), "no length column: not a results.csv the launch wrote"),
        (whole.replace("model", "net"), "no model column: not a results.csv the launch wrote"),
        # every table shows BLEU: no --metric is a way out (it said "--metric names another",
        # and --metric val/loss then failed with KeyError 'val/bleu')
        (whole.replace(BLEU, "val/x"), f"no {BLEU} column: the report's tables, findings"),
    ]:
        (sweep / "results.csv").write_text(text)
        assert said in error_of(sweep), (said, error_of(sweep))
        assert (sweep / "results.md").read_text() == "the report of 7 trials"
    empty = rows.assign(**{BLEU: math.nan})
    empty.to_csv(sweep / "results.csv", index=False)
    assert f"no finite {BLEU} in any trial: the report's tables" in error_of(sweep)
    untimed = rows.assign(**{SEC: math.nan})
    untimed.to_csv(sweep / "results.csv", index=False)
    assert error_of(sweep, "--metric", SEC).endswith(
        f"--metric {SEC}: no trial has a value of it in {sweep / 'results.csv'}; the metrics "
        f"with values: {BLEU}"
    )
    (sweep / "results.csv").write_text(whole)
    # a figure that cannot be written where it goes (here a folder in its place; a read-only or
    # full disk, another user's folder, alike): one line and exit 1, results.md as it was
    (sweep / "bleu_by_model.png").mkdir()
    with pytest.raises(SystemExit) as info:
        report.main([str(sweep)])
    said = capsys.readouterr().err.strip()
    assert info.value.code == 1 and len(said.splitlines()) == 1, said
    assert said.startswith(f"error: cannot write {sweep / 'bleu_by_model.png'} (Is a directory)")
    assert (sweep / "results.md").read_text() == "the report of 7 trials"
    (sweep / "bleu_by_model.png").rmdir()
    # a sweep's own folder whose launch was killed before it wrote results.csv: how to go on
    killed = tmp_path / "out" / "quickstart"
    killed.mkdir(parents=True)
    (killed / "launch.json").write_text("{}")
    (killed / "experiment_state-2026-11-29_20-34-30.json").write_text("{}")
    said = error_of(killed)
    assert "no results.csv here yet" in said and "was killed or is still running" in said
    assert said.endswith(f"--resume --output {tmp_path / 'out'}"), said
    assert error_of(tmp_path / "out") == said, "given its --output, the command finds the sweep"
    # one whose launch was refused before any trial started: nothing to continue, launch it
    (killed / "experiment_state-2026-11-29_20-34-30.json").unlink()
    (killed / "budget.json").write_text("{}")
    said = error_of(killed)
    assert "stopped before any trial started" in said, said
    command = said.rsplit(": ", 1)[1]  # the launch to run, not a resume
    assert (
        command.endswith(f"<its sweep file> --output {tmp_path / 'out'}")
        and "--resume" not in command
    )


def test_the_multi_objective_command_says_which_folder_holds_a_journal(tmp_path, capsys):
    from sweeps.report import moo

    with pytest.raises(SystemExit) as info:
        moo.main([str(tmp_path)])
    assert info.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"python -m sweeps.report.moo: error: {tmp_path}: no optuna.journal here; give the "
        "sweep's own folder, <output>/<name> (e.g. sweep-results/minimal_k), where its launch "
        "wrote optuna.journal"
    )
    searched = tmp_path / "minimal_k"
    searched.mkdir()
    (searched / "optuna.journal").touch()
    with pytest.raises(SystemExit):
        moo.main([str(tmp_path)])
    assert capsys.readouterr().err.strip().endswith(f"the sweeps in it with one: {searched}")
    # a journal without a multi-objective study: said, and nothing written
    assert moo.main([str(searched)]) == 0
    assert capsys.readouterr().out.strip() == (
        f"no multi-objective study in {searched / 'optuna.journal'}: nothing written"
    )
    assert [p.name for p in searched.iterdir()] == ["optuna.journal"]
    # a journal cut short or garbled (a copy stopped midway): refused, the report kept, which a
    # rebuild from part of the studies would replace
    import shutil
    from pathlib import Path

    run = tmp_path / "copy"
    shutil.copytree(Path(__file__).resolve().parents[3] / "docs" / "results" / "minimal_k", run)
    report_before = (run / "results.md").read_text()
    journal = (run / "optuna.journal").read_bytes()
    lines = journal.count(b"\n")
    for broken, said in [
        (journal[: len(journal) // 2 + 7], "is cut short: the journal is incomplete"),
        (journal.replace(b"\n", b"\n{garbled\n", 1), "line 2 is not one of Optuna's records"),
        # JSON, but no record of Optuna's: both commands crashed after the plots were redrawn
        (journal.replace(b"\n", b'\n{"foo": 1}\n', 1), "line 2 is not one of Optuna's records"),
    ]:
        (run / "optuna.journal").write_bytes(broken)
        plots = {q.name: q.stat().st_mtime_ns for q in run.glob("*.png")}
        for command in (moo.main, report.main):
            with pytest.raises(SystemExit):
                command([str(run)])
            assert said in capsys.readouterr().err
            assert (run / "results.md").read_text() == report_before
            assert {q.name: q.stat().st_mtime_ns for q in run.glob("*.png")} == plots
    assert lines > 100
    # a results.csv cut short: refused as python -m sweeps.report refuses it (it wrote a section
    # with the timed column blank, exit 0)
    (run / "optuna.journal").write_bytes(journal)
    csv = (run / "results.csv").read_bytes()
    (run / "results.csv").write_bytes(csv[:3000])
    with pytest.raises(SystemExit):
        moo.main([str(run)])
    assert "is cut short or edited" in capsys.readouterr().err
    assert (run / "results.md").read_text() == report_before


def test_the_fused_line_says_steps_were_timed_once_per_cell_of_a_group():
    """The timing stage measures a training step and the peaks once per cell within a group
    (sweeps.timing.fused) and copies them to the cell's other members; the line said once per
    group, which two cells of one group with different figures contradict."""
    import pandas as pd

    from sweeps.report.markdown import fused_line

    df = pd.DataFrame(
        {
            "cell": ["K=1", "K=1", "K=4"],
            "fused_with": ["g1", "g1", "g1"],
            "train_step_seconds": [0.009, 0.009, 0.012],
        }
    )
    line = fused_line(df)
    assert line.startswith("Fused: 3 of 3 trials trained in 1 fused group(s)")
    assert "measured once for each cell of a group" in line and "once per cell" in line
    assert fused_line(df.drop(columns="train_step_seconds")).endswith("trial of its own.")
    # stopped before they finished: they train in their groups (on --resume), not "trained"
    df["status"] = ["done", "unfinished", "unfinished"]
    assert fused_line(df).startswith("Fused: 3 of 3 trials train in 1 fused group(s)")


def test_the_console_table_says_which_trial_each_row_is(tmp_path):
    """A searched sweep's last console table showed cell, seed and figures only: which trial, its
    sampled K and whether it was the baseline could be read only in results.csv."""
    import io

    from sweeps.report.results import print_table, read_results, write_results_csv

    rows = [
        {"trial_id": "b0", "cell": "length=10", "model": "bahdanau", "attention": "bahdanau",
         "length": 10, "seed": 0, "status": "done", "baseline": True, BLEU: 99.0},
        {"trial_id": "m1", "cell": "length=10", "model": "memory", "attention": "memory",
         "length": 10, "seed": 0, "status": "done", "param:model.K": 3.0,
         "param:model.position_encoding": False, BLEU: 98.5},
    ]  # fmt: skip
    out = io.StringIO()
    print_table(read_results(write_results_csv(rows, tmp_path)), out)
    header, base, memory = out.getvalue().splitlines()
    assert header.split()[:7] == [
        "trial_id", "cell", "model", "seed", "K", "position_encoding", "status"
    ]  # fmt: skip
    assert base.split()[:6] == ["b0", "length=10", "bahdanau", "(baseline)", "0", "-"]
    assert memory.split()[:6] == ["m1", "length=10", "memory", "0", "3", "False"]
    # as the launch prints it (not read back): a figure a budget stop left unmeasured is None
    from sweeps.report.results import results_frame

    out = io.StringIO()
    print_table(results_frame([{**rows[1], "status": "budget", SEC: None}]), out)
    assert "None" not in out.getvalue() and out.getvalue().split()[-1] == "-"
    # as launched, too: the baseline has no position_encoding (it printed "None" beside "-" for K)
    out = io.StringIO()
    launched = {"param:model.K": None, "param:model.position_encoding": None}  # plan.value(key)
    print_table(results_frame([{**rows[0], **launched}, rows[1]]), out)
    # results.csv keeps an integer sample an integer beside the baseline's missing value (it
    # wrote K 2.0 while its K column, Optuna, W&B and the checkpoint said 2)
    import csv

    written = write_results_csv(
        [{**rows[0], **launched}, {**rows[1], "param:model.K": 3}, {**rows[1], "trial_id": "m2",
         "param:model.K": 5.0}], tmp_path / "ints")  # fmt: skip
    assert [r["param:model.K"] for r in csv.DictReader(written.open())] == ["", "3", "5"]
    assert "None" not in out.getvalue()
    assert out.getvalue().splitlines()[1].split()[:6] == [
        "b0", "length=10", "bahdanau", "(baseline)", "0", "-"
    ]  # fmt: skip
    # a sampled learning rate keeps 4 significant digits, as the progress table shows it (two
    # samples, 0.001178 and 0.0009152, both read "0.001" at the figures' 3 decimals)
    out = io.StringIO()
    lrs = [
        {**rows[1], "trial_id": t, "param:model.lr": lr}
        for t, lr in [("a", 0.001178), ("b", 0.0009152)]
    ]
    print_table(results_frame(lrs), out)
    header, *lines = out.getvalue().splitlines()
    at = header.split().index("lr")
    assert [line.split()[at] for line in lines] == ["0.001178", "0.0009152"]


def test_a_translation_sweep_is_laid_out_by_language_pair_as_the_papers_table_2():
    """wmt17's report put its cells in "the paper's Table 1 layout" under L=<max_length> (a filter,
    the same for every pair) and judged the findings per length: two pairs' seeds mixed in one
    paired difference. Each pair is now a column of Table 2's layout, a row of the long table and
    the Pareto front, and its findings are judged on its own seeds."""
    from sweeps.report.findings import findings
    from sweeps.report.markdown import results_sections

    rows = []
    gap = {"en-de": 1.0, "en-fi": 5.0}  # Bahdanau's lead over memory, per pair
    for pair in gap:
        for seed in (0, 1, 2):
            for model in ("bahdanau", "memory K=32"):
                lead = gap[pair] + 0.1 * seed if model == "bahdanau" else 0.0
                rows.append(
                    {"trial_id": f"{pair}{seed}{model}", "cell": f"pair={pair} {model}",
                     "model": model, "attention": model.split()[0], "length": 80, "pair": pair,
                     "seed": seed, "status": "done", BLEU: 20.0 + lead,
                     "val/sacrebleu": 19.0 + lead, SEC: 1.0 + seed / 100,
                     "train_step_seconds": 0.1 + (model == "bahdanau") / 10, "train_peak_mb": 9.0}
                )  # fmt: skip
    df = pd.DataFrame(rows)
    sections = dict(results_sections(df))
    cost = sections["Quality vs training cost: the Pareto front"]
    assert "Per language pair, the models" in cost and "Per length" not in cost
    long = sections["Results by pair and model"]
    assert "approximation of a published score's protocol" in long
    assert "signature" not in long  # no trial folder left a signature
    wide = sections["Results by model and pair (the paper's Table 2 layout)"]
    assert "| model       | en-de BLEU" in wide and "en-fi decode s" in wide and "L=80" not in wide
    long = sections["Results by pair and model"]
    assert long.splitlines()[0].split("|")[1:4] == [" pair   ", " model       ", " BLEU         "]
    assert "sacreBLEU" in long and "13a" in long
    assert "| pair | model | BLEU | decode s |" in sections["Quality vs speed: the Pareto front"]
    judged = {f["length"]: f for f in findings(df) if f["finding"].startswith("memory attention")}
    assert set(judged) == {"en-de", "en-fi"}
    assert judged["en-de"]["estimate"].startswith("+1.10") and judged["en-de"]["verdict"] == "held"
    assert judged["en-fi"]["estimate"].startswith("+5.10")
    assert judged["en-fi"]["verdict"] == "contradicted"


@pytest.mark.report
def test_a_translation_sweeps_page_gives_the_sacrebleu_signature_its_trials_wrote(tmp_path):
    """val/sacrebleu was computed with a signature no surface printed: each report writes it beside
    the checkpoint (sweeps.trial.callbacks.write_hypotheses), and results.md quotes it."""
    from types import SimpleNamespace

    from sweeps.layout import SIGNATURE_FILE
    from sweeps.report.markdown import results_sections
    from sweeps.trial.callbacks import write_hypotheses

    signature = "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"
    module = SimpleNamespace(
        last_decoded={"val": (["a b"], ["a b"])}, last_bleu_signature=signature
    )
    rows = []
    for seed in (0, 1):
        folder = tmp_path / f"t{seed}"
        folder.mkdir()
        write_hypotheses(module, str(folder))
        assert (folder / SIGNATURE_FILE).read_text() == signature + "\n"
        rows.append(
            {"trial_id": f"t{seed}", "cell": "pair=en-de memory", "model": "memory",
             "attention": "memory", "pair": "en-de", "length": 80, "seed": seed, "status": "done",
             BLEU: 20.0, "val/sacrebleu": 19.0, SEC: 1.0,
             "checkpoint": str(folder / "checkpoint.ckpt")}
        )  # fmt: skip
    long = dict(results_sections(pd.DataFrame(rows)))["Results by pair and model"]
    assert f"(val/sacrebleu, signature `{signature}`)" in long


def study_view(point, **more):
    """One length's two-objective study (BLEU, decode time) holding ``point``."""
    from sweeps.report.moo_views import StudyView

    return StudyView(
        name="s/length-4-seed0",
        cell="length=4 memory",
        seed=0,
        directions=["maximize", "minimize"],
        metric_names=["val/bleu", "decode_seconds"],
        points=[point],
        **more,
    )


def test_a_moo_answer_without_a_feasible_k_names_the_constraint_its_best_trial_broke():
    """minimal_k's smoke answer read "none of the searched K (best finished: K=1, val/bleu 0.00 vs
    0.00)": within 1 of the baseline, so the reader could not tell why K=1 was no answer. It had
    failed val/bleu >= 50, which the line now names."""
    from sweeps.report.moo import answer_line
    from sweeps.report.moo_views import Point

    broke = ["val/bleu >= 50"]
    view = study_view(
        Point(1, {"K": 1}, [0.0, 0.002], 30, "COMPLETE", False, broke, trial_id="t1"),
        baseline={"metrics": {"val/bleu": 0.0}},
        constraints=["val/bleu >= 50", "val/bleu within 1 of attention=bahdanau"],
    )
    line = answer_line([view], "length=4 memory", "val/bleu within 1 of attention=bahdanau")
    assert line.endswith(
        "none of the searched K (best finished: K=1, val/bleu 0.00 vs 0.00, broke val/bleu >= 50)"
    ), line
    # the K the rule stopped are named where none met the bound too: the page says a stopped one
    # is named as not ruled out, and the line said "none of the searched K" without them
    stopped = study_view(
        Point(1, {"K": 1}, [0.0, 0.002], 30, "COMPLETE", False, broke, trial_id="t1"),
        baseline={"metrics": {"val/bleu": 0.0}},
        constraints=["val/bleu >= 50", "val/bleu within 1 of attention=bahdanau"],
    )
    stopped.points.extend(
        Point(k, {"K": k}, [0.0, 0.003], 30, "PRUNED", trial_id=f"t{k}") for k in (2, 3)
    )
    line = answer_line([stopped], "length=4 memory", "val/bleu within 1 of attention=bahdanau")
    assert line.endswith(
        "broke val/bleu >= 50); K stopped by the rule before the end, their final BLEU unknown: "
        "K=2, K=3 (not ruled out)"
    ), line


def test_a_stopped_trial_of_a_k_that_finished_is_named_by_what_sets_it_apart():
    """minimal_k's L=20 answer listed K=10 among the K "stopped by the rule before the end, their
    final BLEU unknown", beside "best finished: K=10": its K=10 with position encoding stopped, the
    one without finished at 94.76. A stopped trial of a K that finished names what sets it apart;
    one of a K none of whose trials finished is its K alone."""
    from sweeps.report.moo import answer_line
    from sweeps.report.moo_views import Point

    broke = ["val/bleu >= 50"]
    view = study_view(
        Point(
            1, {"K": 10, "position_encoding": False}, [40.0, 0.002], 30, "COMPLETE", False, broke
        ),
        baseline={"metrics": {"val/bleu": 99.0}},
        constraints=["val/bleu >= 50"],
    )
    view.points += [
        Point(2, {"K": 10, "position_encoding": True}, [5.0, 0.002], 10, "PRUNED"),
        Point(3, {"K": 2, "position_encoding": True}, [5.0, 0.001], 10, "PRUNED"),
    ]
    line = answer_line([view], "length=4 memory", None)
    assert line.endswith(
        "their final BLEU unknown: K=2, K=10 (position_encoding=True) (not ruled out)"
    ), line


def test_a_baselines_figures_read_in_the_studys_objective_order(tmp_path):
    """The baseline line listed its figures as the study attribute stored them, in the order of a
    Python set: two runs of one sweep read "val/bleu 0, decode_seconds ..." and "decode_seconds
    ..., val/bleu 0". The objectives come first, in their order, then the others by name."""
    from sweeps.report.moo import section
    from sweeps.report.moo_views import Point

    stored = {"val/loss": 1.5, "decode_seconds": 0.004, "val/bleu": 0.0}  # as a set gave them
    view = study_view(
        Point(1, {"K": 1}, [0.0, 0.002], 30, "COMPLETE", trial_id="t1"),
        baseline={"metrics": stored, "model": {"model.attention": "bahdanau"}},
    )
    (line,) = [x for x in section(tmp_path, [view]).splitlines() if x.startswith("Baseline (")]
    assert line == (
        "Baseline (attention=bahdanau): val/bleu 0, decode_seconds 0.004 (probe), val/loss 1.5"
    )


@pytest.mark.report
def test_a_profiles_settings_are_said_on_the_page_its_figures_are_on(tmp_path):
    """A smoke run validated on its first 2 batches with the tiny model, and neither the dry run
    nor results.md said so: the profile's settings are printed by the launch, kept in launch.json
    and repeated on the page (a rebuild from results.csv and launch.json says the same)."""
    from pathlib import Path

    from sweeps.spec import load_spec, save_launch

    root = Path(__file__).resolve().parents[3]
    sweep = load_spec(str(root / "sweeps" / "k_vs_length.yaml"), profile="smoke")
    assert sweep.profile_settings["trainer.limit_val_batches"] == (
        2,
        "smoke defaults: trainer.limit_val_batches",
    )
    save_launch(tmp_path, [], "smoke", sweep.planned, sweep.profile_settings)
    md = written_report(tmp_path, sweep_rows())
    (line,) = [x for x in md.splitlines() if x.startswith("This run's profile smoke sets: ")]
    assert "model.preset=tiny" in line and "trainer.limit_val_batches=2" in line
    assert "(the smoke defaults)" in line and "(profiles.smoke)" in line
    assert "task.train_size=2000" in line
    # a --set after the profile: its value is said, the profile's replaced one is not
    sets = ["task.train_size=500", "grid.task.max_length=[5]"]
    sweep = load_spec(str(root / "sweeps" / "k_vs_length.yaml"), overrides=sets, profile="smoke")
    assert "task.train_size" not in sweep.profile_settings and sweep.set_overrides == sets
    again = tmp_path / "again"
    save_launch(again, sweep.set_overrides, "smoke", sweep.planned, sweep.profile_settings)
    md = written_report(again, sweep_rows())
    (line,) = [x for x in md.splitlines() if x.startswith("This run's profile smoke sets: ")]
    assert line.endswith(
        "(profiles.smoke); then --set task.train_size=500, grid.task.max_length=[5]: its figures "
        "are of those settings."
    ), line
    assert "task.train_size=2000" not in line and "grid.task.max_length=[5, 10" not in line
    # a --set alone is said too
    bare = tmp_path / "bare"
    save_launch(bare, ["trainer.max_steps=30"], None)
    md = written_report(bare, sweep_rows())
    assert "This run's --set trainer.max_steps=30: its figures are of those settings." in md


def test_a_stopped_searchs_unstarted_trials_each_have_their_row():
    """A multi-objective sweep stopped early wrote 8 rows of its 10 planned trials: no row for a
    baseline not yet started, a started baseline counted as one of its unit's samples, and every
    sample not yet drawn showed K=32 (memory's default) though K was searched in 1..8."""
    from sweep_helpers import tiny_spec

    from sweeps.report.results import missing_rows
    from sweeps.spec import build_sweep
    from sweeps.spec.objectives import baseline_of

    spec = tiny_spec(
        "stopped",
        model={"preset": "tiny", "attention": "memory"},
        grid={"task.max_length": [4, 6]},
        parameters={"model.K": {"min": 1, "max": 8, "distribution": "int_log_uniform"}},
        num_samples=4,
        objectives=[
            {"name": "val/bleu", "goal": "maximize"},
            {"name": "decode_seconds", "goal": "minimize"},
        ],
        constraints=[{"name": "val/bleu", "within": 1.0, "of": {"attention": "bahdanau"}}],
    )
    raw = spec
    sweep = build_sweep(raw, source="test")
    spec = sweep.spec
    of = baseline_of(spec)

    def fill(rows):
        return rows + missing_rows(sweep.plans, rows, 4, "unfinished", spec.parameters, of)

    rows = fill([])  # stopped before any trial
    assert len(rows) == 10
    bases = [r for r in rows if r.get("baseline") is True]
    assert [(r["length"], r["attention"]) for r in bases] == [(4, "bahdanau"), (6, "bahdanau")]
    samples = [r for r in rows if r.get("baseline") is not True]
    assert {r["attention"] for r in samples} == {"memory"}
    assert all(r["K"] is None and r["status"] == "unfinished" for r in samples)
    # the searched key's column is the one a started trial's row has: param:model.K (a column
    # named after the key alone, lr for model.lr, was added where the plan had none)
    assert all("param:model.K" in r and r["param:model.K"] is None for r in samples)
    lr = build_sweep({**raw, "parameters": {"model.lr": {"min": 1e-4, "max": 1e-2}}}, source="t")
    unstarted = missing_rows(lr.plans, [], 2, "unfinished", lr.spec.parameters)
    assert all(r["param:model.lr"] is None and "lr" not in r for r in unstarted), unstarted[0]
    # stopped after length 4's baseline and three samples had started
    cell = sweep.plans[0].cell.name
    started = [{"cell": cell, "seed": 0, "baseline": True}] + [{"cell": cell, "seed": 0}] * 3
    added = fill(started)[4:]
    assert [(r["length"], r.get("baseline") is True) for r in added] == [
        (4, False),
        (6, True),
        *[(6, False)] * 4,
    ]


@pytest.mark.report
def test_a_figure_the_finished_sweep_no_longer_draws_is_removed(tmp_path):
    """A stopped run's report drew per-model bars (one length finished); the resumed run's report
    drew lines over lengths and left the bars beside them, partial figures under names a reader
    opens. The folder holds the figures its results.md shows, and a PNG the report never drew
    stays."""
    import re

    def shown(md):
        return set(re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", md))

    (tmp_path / "mine.png").write_bytes(b"not the report's")
    first = shown(written_report(tmp_path, sweep_rows(lengths=(10,))))
    md = written_report(tmp_path, sweep_rows())
    assert first - shown(md), "the test needs a figure only the partial report draws"
    assert {p.name for p in tmp_path.glob("*.png")} == shown(md) | {"mine.png"}


@pytest.mark.report
def test_the_command_chooses_by_the_sweeps_own_metric_and_refuses_to_choose_the_worst(
    tmp_path, capsys
):
    """Without --metric the rebuild chose by val/bleu, max whatever the sweep's metric (launch.json
    records it); --metric val/loss alone chose the highest loss; --metric test/bleu chose on the
    test split. Each is the sweep's own choice now, or refused with the fix."""
    import json

    from sweeps.report.results import write_results_csv

    rows = sweep_rows()
    for row in rows:
        row["val/loss"], row["test/bleu"], row["val/other"] = 1.0, 50.0, 2.0
        row["chosen"] = True  # one trial per (cell, seed): each is its cell's choice
    write_results_csv(rows, tmp_path)
    record = {"planned": {"metric": {"name": "val/loss", "goal": "minimize"}}}
    (tmp_path / "launch.json").write_text(json.dumps(record))
    rule = "the best trial by the sweep's metric ({}, {})"
    md = report.main([str(tmp_path)])["md"].read_text()
    assert rule.format("val/loss", "min") in md, "the sweep's own metric and goal"
    md = report.main([str(tmp_path), "--metric", BLEU])["md"].read_text()
    assert rule.format(BLEU, "max") in md, "another metric: its own direction"
    # the held-out rows are still the launch's choice (results.csv's chosen), and say so: the
    # section said that the page's --metric had chosen them
    assert "that the sweep's metric (val/loss, min) chose on the validation split" in md
    assert (
        "These are the launch's choices (results.csv's `chosen`, by val/loss, min), the trials "
        f"evaluated on test; this page's other tables choose by {BLEU}, max."
    ) in md
    assert "launch's choices" not in report.main([str(tmp_path)])["md"].read_text()

    def refused(*argv: str) -> str:
        with pytest.raises(SystemExit) as info:
            report.main([str(tmp_path), *argv])
        assert info.value.code == 2
        return capsys.readouterr().err.strip().splitlines()[-1]

    assert refused("--metric", "val/loss", "--mode", "max").endswith(
        "--mode max for val/loss would pick the worst trials (a lower val/loss is better): give "
        "--mode min, or leave --mode out"
    )
    assert "choose by a validation metric" in refused("--metric", "test/bleu").lower()
    assert refused("--metric", "val/other").endswith(
        "--metric val/other: no known direction; give --mode max or --mode min"
    )


@pytest.mark.report
def test_a_smoke_runs_findings_say_they_are_no_evidence(tmp_path):
    """A smoke run's results.md judged the paper's findings (held, contradicted) as a study's,
    though its sweep files call --smoke plumbing only."""
    import json

    md = written_report(tmp_path, sweep_rows())
    findings = md.split("## The paper's findings")[1].split("\n## ")[0]
    assert "| held |" in findings or "| contradicted |" in findings, "the test needs verdicts"
    assert "A smoke run" not in md
    (tmp_path / "launch.json").write_text(json.dumps({"profile": "smoke"}))
    md = report.main([str(tmp_path)])["md"].read_text()
    findings = md.split("## The paper's findings")[1].split("\n## ")[0]
    assert findings.split("\n\n")[1].startswith("**A smoke run** (`--smoke`")
    (tmp_path / "launch.json").write_text(json.dumps({"profile": "cpu"}))
    assert "A smoke run" not in report.main([str(tmp_path)])["md"].read_text()


@pytest.mark.report
def test_the_findings_say_how_many_verdicts_share_the_95_percent(tmp_path):
    """Thirteen verdicts judged at 95% each, and nothing said that one of them may be wrong by
    chance alone."""
    md = written_report(tmp_path, sweep_rows())
    findings = md.split("## The paper's findings")[1].split("\n## ")[0]
    rows = table_rows(md, "The paper's findings, judged on the intervals")[1:]
    assert len(rows) >= 2, "the test needs several findings"
    assert (
        f"with no correction for judging {len(rows)} findings together: about one interval in 20 "
        "misses the true value"
    ) in findings


@pytest.mark.report
def test_a_finding_on_contended_times_is_marked_as_they_are(tmp_path):
    """ "The decode-time gap grows with length: held", judged on Bahdanau's decode times that the
    page's own tables mark contended (not speed figures), carried no mark."""
    gap = "the decode-time gap (Bahdanau − memory K=4, seconds) grows with length"
    clean = written_report(tmp_path / "clean", sweep_rows())
    rows = {r[0]: r for r in table_rows(clean, "The paper's findings, judged on the intervals")}
    assert gap in rows, "the test needs the decode-time finding"
    busy = written_report(tmp_path / "busy", sweep_rows(contended={("bahdanau", 50, 1)}))
    rows = {r[0]: r for r in table_rows(busy, "The paper's findings, judged on the intervals")}
    assert f"{gap} †" in rows and gap not in rows
    assert "† the finding compares times of which some were flagged contended" in busy
    assert "flagged contended (measured" not in clean


def test_the_wandb_report_says_what_results_md_says_of_the_choice_and_a_smoke_run():
    """results.md named the launch's metric for the held-out rows and opened a smoke run's
    findings with its caveat; the W&B Report, built from the same results, did neither."""
    pytest.importorskip("wandb_workspaces.reports.v2")
    rows = sweep_rows()
    for row in rows:
        row["test/bleu"], row["chosen"] = 50.0, True
    df = pd.DataFrame(rows)
    rep = build_wandb_report(
        "me", "proj", "g", results=df, chosen_by=("val/loss", "min"), smoke=True
    )
    text = "\n".join(b.text for b in rep.blocks if type(b).__name__ == "MarkdownBlock")
    assert "These are the launch's choices (results.csv's `chosen`, by val/loss, min)" in text
    assert "**A smoke run** (`--smoke`" in text
    plain = build_wandb_report("me", "proj", "g", results=df)
    text = "\n".join(b.text for b in plain.blocks if type(b).__name__ == "MarkdownBlock")
    assert "launch's choices" not in text and "A smoke run" not in text


def test_a_warm_started_sweeps_report_keeps_the_reused_runs():
    """A warm start's reused trials are runs of the sweep they came from, under its sweep_id: the
    Report's filter on this sweep's id alone would leave them out of its panels (its filter takes
    both: tests/sweeps/report/test_wandb_sweep_report.py)."""
    from sweeps.report.sweep_runs import reused_rows

    assert reused_rows(pd.DataFrame({"reused": [None, "sweep-results/earlier/k_vs_length"]}))
    assert not reused_rows(pd.DataFrame({"reused": [None, ""]}))
    assert not reused_rows(pd.DataFrame({"trial_id": ["a"]}))


def test_a_bleu_interval_is_cut_at_bleus_range():
    """The per-cell table printed [68.82, 106.02] for a BLEU mean, past the score's 100."""
    from sweeps.report.findings import seed_sections

    rows = sweep_rows(seeds=(0, 1, 2))
    for row in rows:  # bahdanau near the top: its t-interval reaches past 100
        if row["model"] == "bahdanau":
            row[BLEU] = 99.0 + row["seed"] * 0.5
    text = dict(seed_sections(pd.DataFrame(rows)))["BLEU over seeds: 95% intervals per cell"]
    lines = [line for line in text.splitlines() if "| bahdanau |" in line]
    assert lines and all(line.split("|")[4].strip().endswith(", 100.00]") for line in lines)
    assert "is cut at its end" in text
    low = [line for line in text.splitlines() if "| none |" in line]
    assert low and not any(line.split("|")[4].strip().endswith(", 100.00]") for line in low)


@pytest.mark.report
def test_a_results_csv_that_lost_a_stage_s_column_is_said_beside_the_records(tmp_path, capsys):
    """A results.csv edited by hand without ``test/bleu`` (or ``decode_seconds``) rebuilt a page
    without its held-out section (or saying the timing stage never ran), without a word, though
    the trial folders keep the records."""
    root = Path(__file__).resolve().parents[3]
    sweep = tmp_path / "k_vs_length"
    shutil.copytree(root / "docs" / "results" / "k_vs_length", sweep)
    df = pd.read_csv(sweep / "results.csv", dtype={"trial_id": str})
    assert "test/bleu" in df and "decode_seconds" in df
    df.drop(columns=["test/bleu"]).to_csv(sweep / "results.csv", index=False)
    trial = sweep / f"{df['trial_id'].iloc[0]}_trial"
    trial.mkdir()
    (trial / "heldout.json").write_text("{}")
    (trial / "timing.json").write_text("{}")
    report.main([str(sweep)])
    err = capsys.readouterr().err
    assert (
        "has no test/bleu column, but 1 trial folder(s) hold the held-out stage's heldout.json"
        in err
    )
    assert "decode_seconds" not in err, "its column is there"
    # the held-out section also needs the chosen column, which says which trials it tested
    df.drop(columns=["chosen"]).to_csv(sweep / "results.csv", index=False)
    report.main([str(sweep)])
    err = capsys.readouterr().err
    assert (
        "has no chosen column, but 1 trial folder(s) hold the held-out stage's heldout.json" in err
    )
    assert "test/bleu" not in err, "its column is there"
    # both gone (a resume with the held-out stage off writes neither): one note for the section
    df.drop(columns=["chosen", "test/bleu"]).to_csv(sweep / "results.csv", index=False)
    report.main([str(sweep)])
    err = capsys.readouterr().err
    assert err.count("heldout.json") == 1 and "has no test/bleu or chosen column" in err, err
