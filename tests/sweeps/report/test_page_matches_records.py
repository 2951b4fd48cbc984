"""results.md says only what results.csv still holds: a cached paired bootstrap of trials no longer
chosen is left out, a finding says what it judges, a NaN is no value, a decode time is labelled
with the split it timed, a cell whose seeds all failed is counted, a held-out row says when its
columns average different seeds, and the t quantile is right past 30 degrees of freedom."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from sweeps.report import inputs, local
from sweeps.report.figures import pareto_figure
from sweeps.report.findings import BEST_K_NOTE, position_findings, seed_sections
from sweeps.report.heldout import heldout_sections
from sweeps.report.markdown import results_sections
from sweeps.report.plots import plot_results
from sweeps.report.results import read_results
from sweeps.report.student_t import t975
from sweeps.report.summary import cell_summary, front_points
from sweeps.spec.launch_record import save_launch

ROOT = Path(__file__).resolve().parents[3]
RUN = ROOT / "docs" / "results" / "k_vs_length"
BOOTSTRAP = "Best memory model vs Bahdanau: paired bootstrap on the validation sentences"


def _run(tmp_path: Path, change=None) -> tuple[pd.DataFrame, Path]:
    """The committed k_vs_length run's results.csv (changed by ``change``) and its cached
    paired_bootstrap.csv in a folder of their own, no trial's hypotheses beside them."""
    folder = tmp_path / "run"
    folder.mkdir(parents=True)
    shutil.copy(RUN / "paired_bootstrap.csv", folder)
    df = read_results(RUN / "results.csv")
    df = change(df) if change else df
    df.to_csv(folder / "results.csv", index=False)
    return read_results(folder / "results.csv"), folder


def _failed_bahdanau_40(df: pd.DataFrame) -> pd.DataFrame:
    at = (df["length"] == 40) & (df["model"] == "bahdanau")
    df.loc[at, "status"] = "error"
    df.loc[at, "error"] = "RuntimeError: CUDA out of memory"
    df.loc[at, ["val/bleu", "test/bleu", "decode_seconds"]] = float("nan")
    return df


# -- the cached paired bootstrap -------------------------------------------------------------------


def test_a_cached_bootstrap_row_whose_bahdanau_trials_all_failed_is_left_out_and_said(tmp_path):
    df, folder = _run(tmp_path, _failed_bahdanau_40)
    text = dict(seed_sections(df, sweep_dir=folder))[BOOTSTRAP]
    table = text.split("\n\n")[0]
    assert "| 10 | memory K=16 |" in table and "| 20 | memory K=16 |" in table
    assert "| 40 |" not in table
    assert "Left out of the paired bootstrap: 1 row(s)" in text and "L=40 memory K=32" in text
    # the committed run itself: every cached row still compares its chosen trials
    whole, same = _run(tmp_path / "whole")
    kept = dict(seed_sections(whole, sweep_dir=same))[BOOTSTRAP]
    assert "| 40 | memory K=32 |" in kept and "Left out" not in kept
    # the cache is the record of what was computed: kept whole for a report with the hypotheses
    assert (folder / "paired_bootstrap.csv").read_text() == (
        RUN / "paired_bootstrap.csv"
    ).read_text()


def test_a_cached_bootstrap_of_a_sweep_without_bahdanau_shows_no_row(tmp_path):
    one = lambda df: df[(df["length"] == 20) & (df["model"] == "memory K=16") & (df["seed"] == 0)]  # noqa: E731
    df, folder = _run(tmp_path, one)
    text = dict(seed_sections(df, sweep_dir=folder))[BOOTSTRAP]
    assert "| L | best memory |" not in text
    assert "3 row(s)" in text and "no longer the ones results.csv chooses" in text


def test_a_cached_row_naming_its_trials_is_kept_only_while_they_are_the_chosen_ones(tmp_path):
    df, folder = _run(tmp_path)
    cached = pd.read_csv(folder / "paired_bootstrap.csv", dtype={"seeds": str})
    ids = {
        (length, model): ",".join(
            df[(df["length"] == length) & (df["model"] == model)].sort_values("seed")["trial_id"]
        )
        for length, model in zip(
            [*cached["length"]] * 2, [*cached["memory"], *["bahdanau"] * len(cached)]
        )
    }
    cached["memory_trials"] = [ids[r.length, r.memory] for r in cached.itertuples()]
    cached["bahdanau_trials"] = [ids[r.length, "bahdanau"] for r in cached.itertuples()]
    cached.loc[cached["length"] == 20, "memory_trials"] = "aaaaaaaa,bbbbbbbb,cccccccc"  # others
    cached.to_csv(folder / "paired_bootstrap.csv", index=False)
    text = dict(seed_sections(df, sweep_dir=folder))[BOOTSTRAP]
    assert "| 10 | memory K=16 |" in text and "| 40 | memory K=32 |" in text
    assert "| 20 |" not in text.split("\n\n")[0] and "(L=20 memory K=16)" in text


# -- what a finding judges -------------------------------------------------------------------------


def test_a_position_encoding_finding_pairs_bleu_when_the_trials_are_chosen_by_loss():
    """With --metric val/loss the finding "position encodings raise BLEU" paired the losses: a
    lower loss with PE on read as BLEU lowered."""
    rows = []
    for pe, bleus, losses in ((False, [60, 62, 61], [0.5, 0.6, 0.55]), (True, [66, 67, 66.5], [0.3, 0.35, 0.32])):  # fmt: skip
        for seed, (bleu, loss) in enumerate(zip(bleus, losses)):
            rows.append(
                {
                    "cell": f"length=100 memory K=4 position_encoding={pe}",
                    "model": f"memory K=4 position_encoding={pe}",
                    "attention": "memory",
                    "K": 4,
                    "position_encoding": pe,
                    "length": 100,
                    "seed": seed,
                    "status": "done",
                    "val/bleu": bleu,
                    "val/loss": loss,
                }
            )
    [judged] = position_findings(pd.DataFrame(rows), "val/loss", "min")
    assert judged["verdict"] == "held" and judged["estimate"].startswith("+5.50")


def _frame(values: dict[tuple[int, str], list[float]]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "trial_id": f"{length}{model}{seed}",
            "cell": f"length={length} {model}",
            "model": model,
            "attention": model.split()[0],
            "length": length,
            "seed": seed,
            "status": "done",
            "val/bleu": bleu,
        }
        for (length, model), bleus in values.items()
        for seed, bleu in enumerate(bleus)
    )


def test_the_findings_say_the_best_k_is_picked_on_the_seeds_it_is_judged_on():
    picked = _frame({(20, "bahdanau"): [90, 91, 92], (20, "memory K=4"): [89, 90, 91],
                     (20, "memory K=16"): [85, 86, 87]})  # fmt: skip
    text = dict(seed_sections(picked))["The paper's findings, judged on the intervals"]
    assert BEST_K_NOTE in text
    fixed = _frame({(20, "memory K=1"): [40, 41, 42], (20, "none"): [39, 40, 41]})
    assert BEST_K_NOTE not in dict(seed_sections(fixed))["The paper's findings, judged on the intervals"]  # fmt: skip


# -- NaN and missing BLEU --------------------------------------------------------------------------


def test_an_all_nan_metric_is_refused_and_a_nan_trial_is_named(tmp_path):
    nan = lambda df: df.assign(**{"val/bleu": float("nan")})  # noqa: E731
    _, folder = _run(tmp_path, nan)
    problem = inputs.input_problem(folder, "val/bleu")
    assert problem is not None and "no finite val/bleu in any trial" in problem
    df = read_results(RUN / "results.csv")
    lost = df.index[(df["length"] == 40) & (df["model"] == "bahdanau") & (df["seed"] == 0)]
    df.loc[lost, "val/bleu"] = float("nan")
    preamble = dict(results_sections(df))[""]
    assert f"{df.loc[lost[0], 'trial_id']} (length=40 attention=bahdanau seed=0)" in preamble
    assert "length=40 attention=bahdanau (2 of 3: 1 no val/bleu)" in preamble


@pytest.mark.parametrize("column", ["val/bleu", "seed", "length", "decode_seconds"])
def test_text_in_a_column_of_numbers_is_refused_before_any_figure_is_redrawn(
    tmp_path, capsys, column
):
    """One hand-edited cell of a column of numbers: the rebuild stopped half-way in pandas (text in
    ``seed``: after the plots were redrawn from the bad rows, results.md left as it was)."""

    def edit(df: pd.DataFrame) -> pd.DataFrame:
        df[column] = df[column].astype(object)
        df.loc[df.index[3], column] = "oops"
        return df

    _, folder = _run(tmp_path, edit)
    drawn = {p.name: p.stat().st_mtime_ns for p in folder.glob("*.png")}
    with pytest.raises(SystemExit) as stop:
        local.main([str(folder)])
    assert stop.value.code == 2
    said = capsys.readouterr().err
    assert f"line 5, column {column}: 'oops' is not a number" in said, said
    assert "results.md and the plots are left as they are" in said
    assert {p.name: p.stat().st_mtime_ns for p in folder.glob("*.png")} == drawn


def test_without_a_val_bleu_column_another_metric_is_no_way_out(tmp_path, capsys):
    _, folder = _run(tmp_path, lambda df: df.drop(columns=["val/bleu"]))
    for metric in ([], ["--metric", "val/loss"]):
        with pytest.raises(SystemExit) as stop:
            local.main([str(folder), *metric])
        assert stop.value.code == 2
        said = capsys.readouterr().err
        assert "no val/bleu column" in said and "whatever --metric chooses by" in said, metric


# -- decode times of the test split ----------------------------------------------------------------


def test_decode_figures_name_the_split_the_timing_stage_decoded(drawn, tmp_path):
    df = read_results(RUN / "results.csv").assign(timing_split="test")
    summary = cell_summary(df)
    plot_results(summary, tmp_path, split="the test set")
    assert drawn["decode_vs_length.png"].axes[0].get_ylabel() == "decode time over the test set (s)"
    pareto = pareto_figure(front_points(summary), split="the test set")
    assert pareto.axes[0].get_xlabel() == "decode time over the test set (s)"


@pytest.mark.report
def test_a_sweep_timed_on_the_test_split_says_so_on_every_decode_figure(drawn, tmp_path):
    _, folder = _run(tmp_path, lambda df: df.assign(timing_split="test"))
    local.build_local_report(folder)
    assert drawn["decode_vs_length.png"].axes[0].get_ylabel() == "decode time over the test set (s)"
    assert drawn["pareto.png"].axes[0].get_xlabel() == "decode time over the test set (s)"
    assert "decoding the test set add" in (folder / "results.md").read_text()


# -- cells whose seeds failed ----------------------------------------------------------------------


def test_a_cell_whose_every_seed_failed_is_counted_and_its_dash_explained():
    df = _failed_bahdanau_40(read_results(RUN / "results.csv"))
    sections = dict(results_sections(df))
    assert "Fewer finished in: length=40 attention=bahdanau (0 of 3: 3 error)." in sections[""]
    table = sections["Results by model and length (the paper's Table 1 layout)"]
    assert "| –" in table and "–: no finished trial of the model at that length" in table
    whole = dict(results_sections(read_results(RUN / "results.csv")))
    assert "–:" not in whole["Results by model and length (the paper's Table 1 layout)"]


# -- held-out rows over different seeds ------------------------------------------------------------


def test_a_held_out_row_says_when_its_test_figure_is_over_fewer_seeds():
    df = read_results(RUN / "results.csv")
    at = (df["length"] == 10) & (df["model"] == "bahdanau") & (df["seed"] == 2)
    df.loc[at, "test/bleu"] = float("nan")
    [(_, text)] = heldout_sections(df)
    row = next(line for line in text.splitlines() if line.startswith("| bahdanau"))
    l10_valid, l10_test = (c.strip() for c in row.strip("|").split("|")[1:3])
    assert l10_test.endswith("(2 of 3 seeds)") and "seeds)" not in l10_valid
    assert "(n of N seeds) beside a figure" in text


# -- Student's t -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "df, quantile", [(1, 12.706205), (2, 4.302653), (3, 3.182446), (10, 2.228139), (30, 2.042272)]
)
def test_the_t_quantile_is_right_to_six_decimals_in_the_table(df, quantile):
    """Three decimals (4.303 at 2 degrees) moved a printed half-width by 0.01."""
    assert t975(df) == pytest.approx(quantile, abs=1e-6)


@pytest.mark.parametrize(
    "df, quantile",
    [(31, 2.0395), (39, 2.0227), (40, 2.0211), (60, 2.0003), (120, 1.9799), (1000, 1.9623)],
)
def test_the_t_quantile_is_right_past_the_table(df, quantile):
    """Past 30 degrees of freedom the quantile was the normal's, 1.96."""
    assert t975(df) == pytest.approx(quantile, abs=2e-4)


# -- the sweep file's description ------------------------------------------------------------------


@pytest.mark.report
def test_the_sweep_files_description_stands_under_the_pages_title(drawn, tmp_path):
    """docs/sweep-file.md said results.md shows the sweep's ``description``, and nothing read it:
    the launch now records it in launch.json and the page shows it under its title."""
    _, folder = _run(tmp_path)
    save_launch(folder, [], None, description="K against length, three seeds")
    local.build_local_report(folder, title="k_vs_length")
    assert (folder / "results.md").read_text().splitlines()[:3] == [
        "# k_vs_length",
        "",
        "K against length, three seeds",
    ]
    line = next(
        line
        for line in (ROOT / "docs" / "sweep-file.md").read_text().splitlines()
        if line.startswith("description:")
    )
    assert "shown under results.md's title" in line


def test_a_training_cost_or_front_figure_over_fewer_seeds_says_so(tmp_path):
    """A seed whose training cost was not measured (a row warm-started from before the timing
    stage measured it) left its cell's training step a mean of 2 seeds beside "3" in the seeds
    column, and a seed whose decode timing failed left the Pareto front's time a mean of 2 beside
    a BLEU of 3: each such figure now says "(2 of 3 seeds)", as Table 1's decode time did."""

    def blanked(df: pd.DataFrame) -> pd.DataFrame:
        at = (df["length"] == 40) & (df["seed"] == 2)
        train = ["train_step_seconds", "train_tokens_per_second", "train_peak_mb"]
        df.loc[at & (df["model"] == "bahdanau"), train] = float("nan")
        df.loc[at & (df["model"] == "memory K=32"), "decode_seconds"] = float("nan")
        return df

    df, _ = _run(tmp_path, blanked)
    sections = dict(results_sections(df))
    cost = next(text for head, text in sections.items() if head.startswith("Training cost by"))
    row = next(line for line in cost.splitlines() if line.startswith("| 40") and "bahdanau" in line)
    step, tokens, train_peak, decode_peak = (c.strip() for c in row.strip("|").split("|")[2:6])
    assert step.endswith("(2 of 3 seeds)") and tokens.endswith("(2 of 3 seeds)"), row
    assert train_peak.endswith("(2 of 3 seeds)") and "seeds)" not in decode_peak, row
    assert "(n of N seeds) beside a figure" in cost
    front = next(text for head, text in sections.items() if head.startswith("Quality vs speed"))
    k32 = next(line for line in front.splitlines() if line.startswith("| 40 | memory K=32"))
    assert "(2 of 3 seeds)" in k32, k32
    # the committed run: every figure over all 3 seeds, none marked
    whole, _ = _run(tmp_path / "whole")
    assert "seeds)" not in "".join(text for _, text in results_sections(whole))


# -- failed confirm trials -------------------------------------------------------------------------


def test_a_failed_confirm_trial_is_listed_with_its_error_beside_the_selections(tmp_path):
    from sweeps.report.page import page_sections

    df, folder = _run(tmp_path)
    confirm = df[df["status"] == "done"].head(2).copy()
    confirm["role"], confirm["seed"] = "confirm", 99
    confirm.iloc[1, confirm.columns.get_loc("status")] = "error"
    confirm.iloc[1, confirm.columns.get_loc("error")] = "RuntimeError: CUDA out of memory"
    cell = confirm.iloc[1]["cell"]
    sections = dict(page_sections(df, confirm, folder, "val/bleu", "max"))
    assert (
        sections["Failed trials"] == f"- {cell} seed=99 (confirm): RuntimeError: CUDA out of memory"
    )
    # beside a selection trial that failed too, in the one list
    df, folder = _run(tmp_path / "both", _failed_bahdanau_40)
    listed = dict(page_sections(df, confirm, folder, "val/bleu", "max"))["Failed trials"]
    assert listed.splitlines()[-1].endswith("(confirm): RuntimeError: CUDA out of memory")
    assert len(listed.splitlines()) == 1 + int((df["status"] == "error").sum())
