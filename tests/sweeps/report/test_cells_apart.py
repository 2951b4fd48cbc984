"""Every statistic of a report pairs and pools the rows of one cell only, and the rows the tables
chose: configurations judged over seeds (the seed sections use each cell's chosen configuration,
as the tables do), a grid axis outside ``model`` (the model's label names it; an older
results.csv's clashing labels are told apart, or the finding is left out with a line saying why).
Expected figures are computed here from the rows, by hand. No Ray."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lightning_modules.metric_names import VAL_BLEU
from sweeps.report.distill import distill_findings
from sweeps.report.figures import pareto_figure
from sweeps.report.findings import (
    ONCE_PER_GROUP,
    distinct,
    findings,
    scoring_findings,
    seed_sections,
)
from sweeps.report.markdown import pareto_markdown
from sweeps.report.plots import by_length_figure
from sweeps.report.results import model_label, plan_columns, read_results
from sweeps.report.stats import bootstrap_table, cell_intervals
from sweeps.report.summary import cell_summary, model_points
from sweeps.spec import load_spec

ROOT = Path(__file__).resolve().parents[3]
T975_2 = 4.302653  # Student's t, 0.975 quantile, 2 degrees of freedom (to 6 decimals)


def _t_interval(values) -> tuple[float, float]:
    v = np.asarray(values, dtype=float)
    return float(v.mean()), T975_2 * float(v.std(ddof=1)) / math.sqrt(len(v))


def _estimate(values, digits: int = 2) -> str:
    mean, half = _t_interval(values)
    return f"{mean:+.{digits}f} ± {half:.{digits}f}"


# -- configurations judged over seeds ---------------------------------------------------------------

#: cell -> configuration -> BLEU per seed 0, 1, 2. memory K=32's configuration 1 has the best mean
#: (60), but configuration 2 wins seed 2 (90 > 40): a per-seed best would mix them
OVER_SEEDS = {
    "memory K=32": {0: [10.0, 12.0, 11.0], 1: [70.0, 70.0, 40.0], 2: [20.0, 20.0, 90.0]},
    "bahdanau": {0: [95.0, 96.0, 97.0], 1: [90.0, 91.0, 99.0]},
}


def _over_seeds_rows(tmp_path: Path | None = None) -> pd.DataFrame:
    refs = [f"{i} {i + 1} {i + 2} 5 6 7" for i in range(30)]
    rows = []
    for model, configurations in OVER_SEEDS.items():
        for configuration, bleus in configurations.items():
            for seed, bleu in enumerate(bleus):
                trial = f"{model.split()[0]}{configuration}{seed}"
                row = {
                    "trial_id": trial,
                    "cell": f"length=10 attention={model.replace('memory ', 'memory ')}",
                    "model": model,
                    "attention": model.split()[0],
                    "length": 10,
                    "seed": seed,
                    "configuration": configuration,
                    "status": "done",
                    VAL_BLEU: bleu,
                }
                if tmp_path is not None:  # each trial's hypotheses: its configuration's own
                    folder = tmp_path / trial / "checkpoint_000001"
                    folder.mkdir(parents=True)
                    keep = configuration + 2  # words each hypothesis keeps
                    hyps = [" ".join(r.split()[:keep]) for r in refs]
                    (folder / "val_hypotheses.txt").write_text("\n".join(hyps) + "\n")
                    (folder / "val_references.txt").write_text("\n".join(refs) + "\n")
                    row["checkpoint"] = str(folder / "checkpoint.ckpt")
                rows.append(row)
    return pd.DataFrame(rows)


def _chosen(model: str) -> list[float]:
    """The seeds' BLEU of the configuration with the best mean (the rule the tables state)."""
    return max(OVER_SEEDS[model].values(), key=lambda v: sum(v) / len(v))


def test_over_seeds_the_seed_sections_use_the_configuration_the_tables_chose():
    df = _over_seeds_rows()
    memory, bahdanau = _chosen("memory K=32"), _chosen("bahdanau")
    assert memory == [70.0, 70.0, 40.0] and bahdanau == [95.0, 96.0, 97.0]
    table = cell_summary(df).set_index("model")
    assert table.loc["memory K=32", VAL_BLEU] == pytest.approx(np.mean(memory))
    cells = cell_intervals(df).set_index("model")
    mean, half = _t_interval(memory)
    assert cells.loc["memory K=32", "mean"] == pytest.approx(mean)  # the table's mean, not 66.67
    assert cells.loc["memory K=32", "ci"] == pytest.approx(half, rel=1e-3)
    fits = [f for f in findings(df) if f["quantity"] == "bahdanau − memory K=32"]
    assert len(fits) == 1 and fits[0]["seeds"] == 3
    assert fits[0]["estimate"] == _estimate([b - m for b, m in zip(bahdanau, memory)])


def test_over_seeds_the_paired_bootstrap_pools_the_chosen_configurations_sentences(
    tmp_path: Path,
):
    """Configuration 1 keeps 3 words of each 6-word reference, configuration 2 keeps 4: the chosen
    configuration's hypotheses, every seed, give a pooled BLEU the per-seed winners do not."""
    from sacrebleu.metrics import BLEU

    df = _over_seeds_rows(tmp_path)
    table = bootstrap_table(df)
    assert len(table) == 1 and table["seeds"].iloc[0] == "0,1,2"
    refs = (tmp_path / "memory10" / "checkpoint_000001" / "val_references.txt").read_text()
    refs = refs.splitlines()

    def pooled(configuration: int) -> list[str]:
        return [" ".join(r.split()[: configuration + 2]) for r in refs] * 3

    bleu = BLEU(tokenize="none")
    expected = (
        bleu.corpus_score(pooled(1), [refs * 3]).score
        - bleu.corpus_score(pooled(0), [refs * 3]).score
    )
    assert table["diff"].iloc[0] == pytest.approx(expected, abs=1e-3)


def test_over_seeds_the_distillation_finding_pairs_the_chosen_configurations():
    rows = []
    # lambda 0's configuration 0 has the best mean; configuration 1 wins seed 0 alone
    bleus = {0.0: {0: [50.0, 52.0, 54.0], 1: [60.0, 10.0, 10.0]}, 1.0: {0: [55.0, 58.0, 60.0]}}
    for weight, configurations in bleus.items():
        for configuration, values in configurations.items():
            for seed, bleu in enumerate(values):
                rows.append(
                    {
                        "trial_id": f"w{weight:g}c{configuration}s{seed}",
                        "cell": f"length=20 attention=memory K=4 distill_weight={weight:g}",
                        "model": f"memory K=4 distill_weight={weight:g}",
                        "attention": "memory",
                        "K": 4,
                        "distill_weight": weight,
                        "length": 20,
                        "seed": seed,
                        "configuration": configuration,
                        "status": "done",
                        VAL_BLEU: bleu,
                    }
                )
    (row,) = distill_findings(pd.DataFrame(rows))
    assert row["estimate"] == _estimate([55 - 50, 58 - 52, 60 - 54])


# -- a grid axis outside ``model`` --------------------------------------------------------------------


def test_the_model_label_names_every_grid_axis_but_the_length():
    grid = {"task.max_length": 10, "task.train_size": 1000, "model.attention": "memory"}
    assert model_label({"attention": "memory"}, {**grid, "model.K": 16}) == (
        "memory K=16 train_size=1000"
    )
    assert model_label({"attention": "bahdanau"}, {"task.pair": "en-de"}) == "bahdanau"
    sweep = load_spec(
        ROOT / "sweeps/quickstart.yaml", overrides=["grid.task.train_size=[500,1000]"]
    )
    columns = pd.DataFrame([plan_columns(p) for p in sweep.plans])
    assert columns.groupby(["length", "model"])["cell"].nunique().max() == 1
    assert set(columns["context"]) == {"train_size=500", "train_size=1000"}


@pytest.mark.parametrize("path", sorted((ROOT / "sweeps").glob("*.yaml")), ids=lambda p: p.name)
def test_the_shipped_sweeps_labels_name_the_model_s_own_settings_only(path: Path):
    """Their grids vary the model, the length and the language pair: labels as they always were
    (what the findings look up: ``bahdanau``, ``none``, ``memory K=16``), no ``context``."""
    for plan in load_spec(path).plans:
        own = [f"{k.split('.')[-1]}={v}" for k, v in plan.grid.items() if k.startswith("model.")]
        expected = " ".join(
            [str(plan.model.get("attention"))] + [p for p in own if "attention=" not in p]
        )
        assert model_label(plan.model, plan.grid) == expected
        assert "context" not in plan_columns(plan)


def _two_train_sizes() -> tuple[pd.DataFrame, pd.DataFrame]:
    """The committed k_vs_length run twice, as an older results.csv wrote a train_size axis:
    the second copy (train_size=1000) with BLEU halved, under the same model labels."""
    df = read_results(ROOT / "docs/results/k_vs_length/results.csv")
    a = df.assign(train_size=100000)
    b = df.assign(train_size=1000, checkpoint="")
    b["cell"] = b["cell"].str.replace(" attention=", " train_size=1000 attention=", regex=False)
    b["trial_id"] = b["trial_id"].str[:4] + "beef"
    b[VAL_BLEU] = b[VAL_BLEU] * 0.5
    a["cell"] = a["cell"].str.replace(" attention=", " train_size=100000 attention=", regex=False)
    return df, pd.concat([a, b], ignore_index=True)


def test_an_older_results_csv_with_a_non_model_axis_pairs_no_rows_of_different_cells():
    original, df = _two_train_sizes()
    judged = findings(df)
    assert judged and all(f["seeds"] <= 3 for f in judged)
    # the decode-time gap within train_size=100000, from the original rows by hand
    by = original.set_index(["length", "model", "seed"])["decode_seconds"]
    gaps = [
        (by[(40, "bahdanau", s)] - by[(40, "memory K=32", s)])
        - (by[(10, "bahdanau", s)] - by[(10, "memory K=32", s)])
        for s in (0, 1, 2)
    ]
    gap = [
        f
        for f in judged
        if f["finding"].startswith("the decode-time gap")
        and f["length"] == "10→40, train_size=100000"
    ]
    assert len(gap) == 1 and gap[0]["estimate"] == _estimate(gaps, 4)
    # the smaller train size's Bahdanau − best memory at L=10, its own rows only
    bleu = original.set_index(["length", "model", "seed"])[VAL_BLEU] * 0.5
    fits = [
        f
        for f in judged
        if f["length"] == "10, train_size=1000" and f["quantity"].startswith("bahdanau − ")
    ]
    top = fits[0]["quantity"].split(" − ")[1]
    assert fits[0]["estimate"] == _estimate(
        [bleu[(10, "bahdanau", s)] - bleu[(10, top, s)] for s in (0, 1, 2)]
    )
    # per cell: one row each, named apart, the BLEU of its own seeds
    cells = cell_intervals(df)
    assert not cells[["length", "model"]].duplicated().any() and len(cells) == 2 * 18
    row = cells[(cells["length"] == 10) & (cells["model"] == "bahdanau train_size=1000")]
    assert row["mean"].iloc[0] == pytest.approx(
        np.mean([bleu[(10, "bahdanau", s)] for s in (0, 1, 2)])
    )
    text = "\n".join(t for _, t in seed_sections(df))
    assert "| 10 | bahdanau train_size=1000 |" in text


def test_an_older_results_csv_s_fronts_and_plots_keep_its_cells_apart():
    _, df = _two_train_sizes()
    summary = cell_summary(df)
    assert not summary[["length", "model"]].duplicated().any()
    points = model_points(df)
    assert not points[["length", "model"]].duplicated().any()
    fig = by_length_figure(summary, VAL_BLEU, "BLEU", "BLEU vs length")
    lines = {c.get_label(): list(c.lines[0].get_xdata()) for c in fig.axes[0].containers}
    assert {"bahdanau train_size=100000", "bahdanau train_size=1000"} <= set(lines)
    for label, x in lines.items():  # one point per length: no zig-zag between two cells
        assert x == sorted(set(x)), f"{label} runs through {x}"


def test_a_front_compares_models_under_one_context_as_the_findings_do():
    """Each length's Pareto front is drawn per train size: the halved copy's models are not
    judged against the other train size's (which beats every one of them on BLEU at the same
    decode time), and the table, the training-cost front and the figure keep the fronts apart."""
    original, df = _two_train_sizes()
    alone = model_points(original).set_index(["length", "model"])["pareto"]
    points = model_points(df)
    for size in (100000, 1000):
        mine = points[points["context"] == f"train_size={size}"]
        got = {
            (length, model.removesuffix(f" train_size={size}")): front
            for length, model, front in zip(mine["length"], mine["model"], mine["pareto"])
        }
        assert got == alone.to_dict(), f"train_size={size}"
    table = pareto_markdown(points)
    for size in (100000, 1000):
        assert f"| 10 | bahdanau train_size={size} |" in table
    fig = pareto_figure(points)
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert {"L=10 train_size=1000", "L=10 train_size=100000"} <= set(legend)


def test_a_scoring_pair_several_cells_share_is_left_out_and_said_so():
    """Two K per scoring pair at one length (a grid over K and the scoring functions): no seed
    pairs one cell of a pair with one of another, so the finding is not judged there, and a
    line names the cells."""
    rows = []
    for k in (16, 32):
        for pair, bleus in (("softmax/softmax", [50, 51, 52]), ("sigmoid/softmax", [60, 62, 61])):
            enc, dec = pair.split("/")
            for seed, bleu in enumerate(bleus):
                rows.append(
                    {
                        "trial_id": f"{k}{pair}{seed}",
                        "cell": f"length=10 attention=memory K={k} encoder_scoring={enc} decoder_scoring={dec}",
                        "model": f"memory K={k} encoder_scoring={enc} decoder_scoring={dec}",
                        "attention": "memory",
                        "K": k,
                        "encoder_scoring": enc,
                        "decoder_scoring": dec,
                        "length": 10,
                        "seed": seed,
                        "status": "done",
                        VAL_BLEU: bleu + k / 100,
                    }
                )
    df = pd.DataFrame(rows)
    assert scoring_findings(df) == []
    sections = dict(seed_sections(df))
    note = sections["Findings left out"]
    assert (
        "`length=10 attention=memory K=16 encoder_scoring=softmax decoder_scoring=softmax`" in note
    )
    assert (
        "`length=10 attention=memory K=32 encoder_scoring=softmax decoder_scoring=softmax`" in note
    )


def test_a_fused_groups_decode_peak_counts_once_per_group():
    """The timing stage measures the peaks of memory (decode's too) once per cell of a fused group
    and copies them to its members (sweeps.timing.fused)."""
    assert "decode_peak_mb" in ONCE_PER_GROUP
    best = pd.DataFrame(
        {
            "length": [10] * 3,
            "model": ["bahdanau"] * 3,
            "seed": [0, 1, 2],
            "decode_peak_mb": [5.0] * 3,
            "fused_with": ["g"] * 3,
        }
    )
    diffs = pd.Series([1.0] * 3, index=[0, 1, 2])
    assert distinct(diffs, best, (10,), ("bahdanau",), "decode_peak_mb").tolist() == [1.0]
    assert len(distinct(diffs, best, (10,), ("bahdanau",), "decode_seconds")) == 3


def test_configurations_judged_by_their_lower_bound_are_the_tables_configurations_too():
    """seeds.objective: lcb chose the steady configuration (50, 50, 50) over the one with the
    better mean (80, 20, 80: mean 60, a 95% lower bound far below 50); the tables showed the best
    mean's, beside held-out and confirm sections about the chosen one. The launch writes the
    objective into the rows (seed_objective), and every table and the rule line follow it."""
    from sweeps.report.selection import mark_chosen
    from sweeps.report.summary import summary_rule

    rows = [
        {
            "trial_id": f"c{configuration}s{seed}",
            "cell": "length=10 attention=bahdanau",
            "model": "bahdanau",
            "attention": "bahdanau",
            "length": 10,
            "seed": seed,
            "configuration": configuration,
            "status": "done",
            VAL_BLEU: bleu,
        }
        for configuration, bleus in ((0, [50.0, 50.0, 50.0]), (1, [80.0, 20.0, 80.0]))
        for seed, bleu in enumerate(bleus)
    ]
    chosen = mark_chosen(rows, VAL_BLEU, "max", "lcb")
    assert chosen == {"c0s0", "c0s1", "c0s2"}
    df = pd.DataFrame(rows)
    assert cell_summary(df)[VAL_BLEU].tolist() == [50.0], "the launch's choice, not the best mean"
    assert "the best lower end of its 95% t-interval (seeds.objective: lcb" in summary_rule(
        df, VAL_BLEU, "max"
    )
    # a sweep judged by the mean writes no objective: the tables take the best mean, as before
    mean_rows = [{k: v for k, v in r.items() if k != "seed_objective"} for r in rows]
    assert mark_chosen(mean_rows, VAL_BLEU, "max") == {"c1s0", "c1s1", "c1s2"}
    assert cell_summary(pd.DataFrame(mean_rows))[VAL_BLEU].tolist() == [60.0]
    # the held-out section's rule named the mean whatever chose the configuration
    from sweeps.report.heldout import heldout_sections

    for frame, picked, judged in (
        (df, chosen, "the worse end of its 95% t-interval over seeds: seeds.objective: lcb"),
        (pd.DataFrame(mean_rows), {"c1s0", "c1s1", "c1s2"}, "its mean over seeds"),
    ):
        frame["chosen"], frame["test/bleu"] = frame["trial_id"].isin(picked), frame[VAL_BLEU] - 1
        [(_, text)] = heldout_sections(frame)
        assert f"(judged on {judged})" in text
