"""Seeds into findings: t-intervals, verdicts, sacrebleu's paired bootstrap over saved
hypotheses, the convergence stop, longest-first packing, length-bucketed copy batches, and the
overhead benchmark's arithmetic. Real sacrebleu, Lightning and Tune's Searcher; no Ray instance."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sweeps.report.findings import (
    bootstrap_markdown,
    findings,
    position_findings,
    scoring_findings,
    seed_sections,
)
from sweeps.report.stats import (
    bootstrap_table,
    cell_intervals,
    interval,
    paired_bootstrap,
    verdict,
)


def _frame(values: dict[tuple[int, str], list[float]]) -> pd.DataFrame:
    rows = []
    for (length, model), bleus in values.items():
        for seed, bleu in enumerate(bleus):
            attention = model.split()[0]
            rows.append(
                {
                    "cell": f"length={length} {model}",
                    "model": model,
                    "attention": attention,
                    "length": length,
                    "seed": seed,
                    "status": "done",
                    "val/bleu": bleu,
                }
            )
    return pd.DataFrame(rows)


def test_t_interval_matches_the_textbook():
    mean, sd, half, n = interval([1.0, 2.0, 3.0])
    assert (mean, sd, n) == (2.0, 1.0, 3)
    assert half == pytest.approx(4.302653 / math.sqrt(3), rel=1e-6)
    assert math.isnan(interval([5.0])[2])


def test_verdicts_follow_the_stated_rule():
    assert verdict(5.0, 1.0, 3, 2.0, "above") == "held"
    assert verdict(1.5, 1.0, 3, 2.0, "above") == "not shown"
    assert verdict(0.5, 1.0, 3, 2.0, "above") == "contradicted"
    assert verdict(0.5, 1.0, 3, 2.0, "below") == "held"
    assert verdict(9.0, 1.0, 1, 2.0, "above") == "not shown"  # one seed: no interval
    assert (
        verdict(-30.0, 1.0, 3, 10.0, "within") == "contradicted"
        and verdict(3.0, 1.0, 3, 10.0, "within") == "held"
    )


def test_findings_are_judged_on_paired_seed_differences():
    df = _frame(
        {
            (10, "none"): [80, 81, 79],
            (10, "memory K=1"): [85, 86, 84],
            (10, "memory K=16"): [99, 100, 99.5],
            (10, "bahdanau"): [100, 100, 99.8],
            (40, "none"): [20, 21, 22],
            (40, "memory K=1"): [27, 29, 25],
            (40, "memory K=16"): [80, 95, 60],
            (40, "bahdanau"): [99, 99.5, 98],
        }
    )
    judged = {(f["finding"].split(":")[0], f["length"]): f["verdict"] for f in findings(df)}
    fits = "memory attention (its best K) fits about as well as Bahdanau"
    assert judged[(fits, 10)] == "held"  # 0.4 ± small, under 2
    assert judged[(fits, 40)] == "not shown"  # 20 ± 40: the seeds disagree
    assert (
        judged[("memory attention beats no attention by a large margin (> 10 BLEU)", 40)] == "held"
    )
    cells = cell_intervals(df)
    row = cells[(cells["length"] == 40) & (cells["model"] == "memory K=16")].iloc[0]
    assert row["n"] == 3 and row["low"] < 60 < 95 < row["high"]


def test_training_cost_gaps_are_judged_like_decode_time():
    """The training step's and the training peak's Bahdanau − memory gap, paired by seed between
    the shortest and the longest length: held when it grows, contradicted when it shrinks, and no
    row at all for a sweep whose timing stage did not measure the figure."""
    df = _frame(
        {
            (10, "none"): [80, 81, 79],
            (10, "memory K=16"): [99, 100, 99.5],
            (10, "bahdanau"): [100, 100, 99.8],
            (40, "none"): [20, 21, 22],
            (40, "memory K=16"): [80, 95, 60],
            (40, "bahdanau"): [99, 99.5, 98],
        }
    )
    assert not [f for f in findings(df) if "training" in f["finding"]]
    step = {(10, "memory K=16"): 0.040, (10, "bahdanau"): 0.050, (10, "none"): 0.035}
    step |= {(40, "memory K=16"): 0.080, (40, "bahdanau"): 0.200, (40, "none"): 0.070}
    peak = {(10, "memory K=16"): 10.0, (10, "bahdanau"): 14.0, (10, "none"): 9.0}
    peak |= {(40, "memory K=16"): 30.0, (40, "bahdanau"): 31.0, (40, "none"): 25.0}
    # the seeds' gaps differ a little at L=40, so each finding's interval has a width
    jitter = df["seed"] * 0.001 * ((df["length"] == 40) & (df["model"] == "bahdanau"))
    df["train_step_seconds"] = [step[k] for k in zip(df["length"], df["model"])] + jitter
    df["train_peak_mb"] = [peak[k] for k in zip(df["length"], df["model"])] + jitter
    rows = {f["finding"]: f for f in findings(df)}
    grows = rows[
        "the training-step gap (Bahdanau − memory K=16, seconds per step) grows with length"
    ]
    assert (grows["length"], grows["verdict"]) == ("10→40", "held")
    assert grows["estimate"].startswith("+0.11")  # (0.200 − 0.080) − (0.050 − 0.040)
    shrinks = rows["the training peak-memory gap (Bahdanau − memory K=16, MiB) grows with length"]
    assert shrinks["verdict"] == "contradicted"  # 1 MiB at L=40 against 4 at L=10


def test_a_fused_group_s_one_step_measurement_counts_once_not_once_per_seed():
    """A fused group's training step and peak are one measurement copied to its members: a cell
    trained as one group gives those findings no interval over seeds (not shown, 1 measurement),
    while decode time, measured per trained model, is still judged over the seeds."""
    df = _frame(
        {
            (10, "memory K=16"): [99, 100, 99.5],
            (10, "bahdanau"): [100, 100, 99.8],
            (40, "memory K=16"): [80, 95, 60],
            (40, "bahdanau"): [99, 99.5, 98],
        }
    )
    step = {(10, "memory K=16"): 0.040, (10, "bahdanau"): 0.050}
    step |= {(40, "memory K=16"): 0.080, (40, "bahdanau"): 0.200}
    df["train_step_seconds"] = [step[k] for k in zip(df["length"], df["model"])]
    df["train_peak_mb"] = df["train_step_seconds"] * 100
    df["decode_seconds"] = df["train_step_seconds"] * 10 + df["seed"] * 0.001
    gap = "the training-step gap (Bahdanau − memory K=16, seconds per step) grows with length"
    # unfused, the same figures over three seeds: each seed's own measurement
    assert {f["finding"]: f for f in findings(df)}[gap]["seeds"] == 3
    df["fused_with"] = df["length"].astype(str) + df["model"]  # one group per cell
    rows = {f["finding"]: f for f in findings(df)}
    assert (rows[gap]["seeds"], rows[gap]["verdict"]) == (1, "not shown")
    assert rows[gap]["estimate"] == "+0.1100"  # the gap itself, with no interval
    peak = rows["the training peak-memory gap (Bahdanau − memory K=16, MiB) grows with length"]
    assert (peak["seeds"], peak["verdict"]) == (1, "not shown")
    decode = rows["the decode-time gap (Bahdanau − memory K=16, seconds) grows with length"]
    assert (decode["seeds"], decode["verdict"]) == (3, "held")


def test_seeds_fused_in_two_groups_give_the_interval_of_two_measurements():
    """Five seeds of each cell fused in two groups (seeds 0-2, seeds 3-4): the training-step gap's
    interval was taken over the five copied figures and only its count lowered to 2, an interval
    about nine times narrower than two measurements allow, judged held."""
    lengths = (10, 40)
    df = _frame(
        {(length, m): [90.0] * 5 for length in lengths for m in ("memory K=16", "bahdanau")}
    )
    grows = {(10, 0): 0.0, (10, 1): 0.0, (40, 0): 0.02, (40, 1): 0.04}  # by (length, group)
    group = (df["seed"] >= 3).astype(int)
    bahdanau = (df["model"] == "bahdanau").astype(float)
    df["train_step_seconds"] = 0.05 + bahdanau * [grows[k] for k in zip(df["length"], group)]
    df["fused_with"] = df["length"].astype(str) + df["model"] + group.astype(str)
    gap = "the training-step gap (Bahdanau − memory K=16, seconds per step) grows with length"
    row = {f["finding"]: f for f in findings(df)}[gap]
    mean, _, half, n = interval([0.02, 0.04])
    assert (row["seeds"], row["verdict"]) == (2, "not shown")
    assert row["estimate"] == f"{mean:+.4f} ± {half:.4f}" and n == 2  # +0.0300 ± 0.1271


def test_a_finding_in_seconds_keeps_the_digits_the_tables_print():
    """A decode-time gap of +0.0049 s read "+0.00" and a training-step gap of -0.0152 s "-0.02":
    an estimate in seconds has the tables' 4 decimals; BLEU's and MiB's keep 2."""
    df = _frame(
        {
            (6, "memory K=32"): [90.0, 91.0],
            (6, "bahdanau"): [95.0, 95.5],
            (14, "memory K=32"): [80.0, 82.0],
            (14, "bahdanau"): [96.0, 96.5],
        }
    )
    decode = {(6, "bahdanau"): 0.0100, (6, "memory K=32"): 0.0090}
    decode |= {(14, "bahdanau"): 0.0159, (14, "memory K=32"): 0.0100}  # the gap grows 0.0049 s
    step = {(6, "bahdanau"): 0.0160, (6, "memory K=32"): 0.0092}
    step |= {(14, "bahdanau"): 0.0208, (14, "memory K=32"): 0.0292}  # and shrinks 0.0152 s
    keys = list(zip(df["length"], df["model"]))
    later = (df["length"] == 14) & (df["model"] == "bahdanau")
    df["decode_seconds"] = [decode[k] for k in keys] + df["seed"] * 0.0002 * later
    df["train_step_seconds"] = [step[k] for k in keys]
    df["train_peak_mb"] = [{"bahdanau": 6.5}.get(m, 5.0) * length for length, m in keys]
    rows = {(f["finding"].split(" (")[0], f["length"]): f["estimate"] for f in findings(df)}
    assert rows[("the decode-time gap", "6→14")] == "+0.0050 ± 0.0013"  # 0.0049, 0.0051
    assert rows[("the training-step gap", "6→14")] == "-0.0152 ± 0.0000"
    assert rows[("the training peak-memory gap", "6→14")] == "+12.00 ± 0.00"
    assert rows[("memory attention", 14)] == "+15.25 ± 9.53"  # BLEU: 2 decimals, as before


def _scoring_frame(values: dict[tuple[int, str], list[float]]) -> pd.DataFrame:
    rows = []
    for (length, pair), bleus in values.items():
        enc, dec = pair.split("/")
        model = f"memory K=32 encoder_scoring={enc} decoder_scoring={dec}"
        for seed, bleu in enumerate(bleus):
            rows.append(
                {
                    "cell": f"length={length} {model}",
                    "model": model,
                    "attention": "memory",
                    "K": 32,
                    "encoder_scoring": enc,
                    "decoder_scoring": dec,
                    "length": length,
                    "seed": seed,
                    "status": "done",
                    "val/bleu": bleu,
                }
            )
    return pd.DataFrame(rows)


def test_softmax_softmax_worst_is_judged_against_every_other_pair():
    """Not against the best other pair only: one pair clearly below softmax/softmax contradicts it."""
    df = _scoring_frame(
        {
            (20, "softmax/softmax"): [90, 91, 89],
            (20, "softmax/sigmoid"): [95, 96, 95],
            (20, "sigmoid/softmax"): [97, 97, 98],
            (20, "sigmoid/sigmoid"): [94, 96, 95],
            (40, "softmax/softmax"): [93, 94, 92],
            (40, "softmax/sigmoid"): [95, 96, 97],
            (40, "sigmoid/softmax"): [96, 95, 96],
            (40, "sigmoid/sigmoid"): [70, 72, 69],
            (60, "softmax/softmax"): [80, 90, 85],
            (60, "softmax/sigmoid"): [88, 83, 86],
            (60, "sigmoid/softmax"): [95, 96, 96],
            (60, "sigmoid/sigmoid"): [96, 95, 97],
        }
    )
    judged = {f["length"]: f for f in scoring_findings(df)}
    assert judged[20]["verdict"] == "held"  # every other pair above it, paired by seed
    assert judged[40]["verdict"] == "contradicted" and judged[40]["quantity"].startswith(
        "sigmoid/sigmoid"
    )
    assert judged[60]["verdict"] == "not shown"  # softmax/sigmoid's seeds straddle it
    assert judged[60]["quantity"].startswith("softmax/sigmoid")
    # one K (the scoring study): no "larger K" finding comparing K=32 with itself
    assert not any(f["finding"].startswith("longer sequences need larger K") for f in findings(df))


def test_the_position_encoding_study_judges_pe_on_against_off_per_k_paired_by_seed():
    """position_encoding.yaml's report had no comparison of PE on with PE off (a planted +5 BLEU
    effect gave no row): each K's PE-on reading is judged against PE off at the same K and seed;
    K=1 (one model with or without) is left out; a second reading is named."""
    rows = []
    bleus = {  # (K, PE, reading): per seed
        (1, False, None): [50, 52, 51],
        (1, True, "sentence"): [50, 52, 51],
        (4, False, None): [60, 62, 61],
        (4, True, "sentence"): [66, 67, 66.5],  # above: held
        (16, False, None): [70, 72, 71],
        (16, True, "sentence"): [60, 63, 61],  # below: contradicted
        (16, True, "none"): [71, 70, 73],  # straddles: not shown
    }
    for (k, pe, reading), values in bleus.items():
        for seed, bleu in enumerate(values):
            cell = f"length=100 memory K={k} position_encoding={pe}" + (
                f" position_encoding_normalization={reading}" if reading == "none" else ""
            )
            rows.append(
                {
                    "cell": cell,
                    "model": cell.removeprefix("length=100 "),
                    "attention": "memory",
                    "K": k,
                    "position_encoding": pe,
                    "position_encoding_normalization": reading if reading == "none" else None,
                    "length": 100,
                    "seed": seed,
                    "status": "done",
                    "val/bleu": bleu,
                }
            )
    judged = position_findings(pd.DataFrame(rows))
    got = {(j["finding"].split(" at ")[1].split()[0], j["quantity"]): j for j in judged}
    assert set(got) == {
        ("K=4", "PE on − PE off"),
        ("K=16", "PE on (none) − PE off"),
        ("K=16", "PE on (sentence) − PE off"),
    }
    assert got["K=4", "PE on − PE off"]["verdict"] == "held"
    assert got["K=4", "PE on − PE off"]["estimate"].startswith("+5.50")
    assert got["K=16", "PE on (sentence) − PE off"]["verdict"] == "contradicted"
    assert got["K=16", "PE on (none) − PE off"]["verdict"] == "not shown"
    assert all(j["seeds"] == 3 and j["length"] == 100 for j in judged)
    # and in results.md's findings table, beside the paper's
    sections = dict(seed_sections(pd.DataFrame(rows)))
    assert (
        "position encodings raise BLEU at K=4"
        in sections[next(iter(k for k in sections if "findings" in k))]
    )


def test_paired_bootstrap_uses_sacrebleu_and_brackets_the_difference():
    import sacrebleu

    rng = np.random.default_rng(0)
    refs = [" ".join(str(x) for x in rng.integers(4, 24, size=12)) for _ in range(120)]
    good = list(refs)
    bad = [r if i % 3 else " ".join(r.split()[:6]) for i, r in enumerate(refs)]
    r = paired_bootstrap(good, bad, refs, n_samples=200)
    exact = (
        sacrebleu.corpus_bleu(good, [refs], tokenize="none").score
        - sacrebleu.corpus_bleu(bad, [refs], tokenize="none").score
    )
    assert r["diff"] == pytest.approx(exact)
    assert 0 < r["low"] < r["diff"] < r["high"]
    assert r["p"] < 0.05
    same = paired_bootstrap(bad, bad, refs, n_samples=200)
    assert (
        same["diff"] == 0 and same["low"] <= 0 <= same["high"] and same["p"] == 1.0
    )  # not sacrebleu's 1/(n+1)
    # both systems at BLEU 0 on every resample (a copy task's short length, barely trained): their
    # hypotheses differ, the difference is 0 throughout, and sacrebleu's p was 1/(n+1) = 0.005
    nothing = [" ".join(r.split()[:2]) for r in refs]
    other = [" ".join(reversed(r.split()[:3])) for r in refs]
    zero = paired_bootstrap(nothing, other, refs, n_samples=200)
    assert (zero["diff"], zero["low"], zero["high"], zero["p"]) == (0, 0, 0, 1.0)


def saved_pairs(
    tmp_path: Path, refs: list[str], bahdanau_hyps: list[str], trial_ids: bool = False
) -> pd.DataFrame:
    """results.csv rows of memory K=16 (copying ``refs`` exactly) and Bahdanau (``bahdanau_hyps``)
    at L=8 over seeds 0 and 1, each trial's validation hypotheses and references saved beside its
    checkpoint as a trial saves them; ``trial_ids``: with ids m0, m1, b0, b1."""
    rows = []
    for seed in (0, 1):
        for model, hyps in (("memory K=16", refs), ("bahdanau", bahdanau_hyps)):
            folder = tmp_path / f"{model}-{seed}".replace(" ", "_") / "checkpoint_000001"
            folder.mkdir(parents=True)
            (folder / "val_hypotheses.txt").write_text("\n".join(hyps) + "\n")
            (folder / "val_references.txt").write_text("\n".join(refs) + "\n")
            rows.append(
                {
                    **({"trial_id": f"{model[0]}{seed}"} if trial_ids else {}),
                    "cell": f"length=8 {model}",
                    "model": model,
                    "attention": model.split()[0],
                    "length": 8,
                    "seed": seed,
                    "status": "done",
                    "val/bleu": 100.0 if model != "bahdanau" else 70.0,
                    "checkpoint": str(folder / "checkpoint.ckpt"),
                }
            )
    return pd.DataFrame(rows)


def test_bootstrap_table_reads_the_hypotheses_beside_each_checkpoint(tmp_path: Path):
    refs = [f"{i} {i + 1} {i + 2} 5 6 7" for i in range(40)]
    df = saved_pairs(tmp_path, refs, [r.split(" ", 1)[1] for r in refs])
    table = bootstrap_table(df)
    assert list(table["sentences"]) == [80] and table["seeds"].iloc[0] == "0,1"
    assert table["diff"].iloc[0] > 0 and table["low"].iloc[0] > 0
    sections = dict(seed_sections(df, sweep_dir=tmp_path))
    assert "paired bootstrap" in " ".join(sections)
    # the hypotheses gone (a copied results folder): the table is read back from paired_bootstrap.csv
    for f in tmp_path.glob("*/checkpoint_000001/val_hypotheses.txt"):
        f.unlink()
    again = dict(seed_sections(df, sweep_dir=tmp_path))
    assert [k for k in again if "bootstrap" in k] == [k for k in sections if "bootstrap" in k]


# -- the convergence stop --------------------------------------------------------------------------


def test_stop_when_is_checked_at_dry_run():
    from sweeps.spec import SpecError, load_spec

    sweep = load_spec("sweeps/k_vs_length.yaml", profile="cpu")
    assert sweep.spec.stop_when.describe() == "val/bleu >= 100 at 2 report(s) in a row"
    assert len(sweep.spec.seeds) >= 3
    with pytest.raises(SpecError, match="exactly one of at_least"):
        load_spec(
            "sweeps/quickstart.yaml",
            overrides=["stop_when={metric: val/bleu, at_least: 1, at_most: 2}"],
        )
    with pytest.raises(SpecError, match="stop_when.metric"):
        load_spec("sweeps/quickstart.yaml", overrides=["stop_when={metric: bleu, at_least: 1}"])


def test_convergence_stops_a_real_fit_and_flags_the_report(quiet_trainer):
    import lightning.pytorch as pl
    import torch

    from sweeps.trial.stop_when import StopWhenSpec, make_callback

    class Toy(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))

        def training_step(self, batch, i):
            return (self.w - 1).pow(2).sum()

        def validation_step(self, batch, i):
            self.log("val/bleu", 40.0 if self.global_step < 20 else 100.0)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def train_dataloader(self):
            return torch.utils.data.DataLoader(torch.zeros(1000, 1), batch_size=1)

        def val_dataloader(self):
            return torch.utils.data.DataLoader(torch.zeros(2, 1), batch_size=1)

    flags: dict = {}
    stop = make_callback(StopWhenSpec(metric="val/bleu", at_least=100, reports=2), flags)
    trainer = quiet_trainer(
        max_steps=200,
        val_check_interval=10,
        check_val_every_n_epoch=None,
        callbacks=[stop],
        num_sanity_val_steps=0,
    )
    trainer.fit(Toy())
    assert trainer.global_step == 30 and flags["converged"] == 1.0  # 100 at steps 20 and 30


def test_a_converged_trial_is_its_own_status_and_finished():
    from sweeps.report.results import FINISHED, row_from_result

    class R:
        metrics = {"val/bleu": 100.0, "step": 2000, "converged": 1.0}
        error = None
        checkpoint = None
        path = "/x/trial_1"
        config = {}

    from sweeps.spec import load_spec

    plan = next(
        p
        for p in load_spec("sweeps/quickstart.yaml").plans
        if p.model.get("attention") == "bahdanau"
    )
    row = row_from_result(R(), plan, [], max_steps=3000, tune_status="TERMINATED")
    assert row["status"] == "converged" and "converged" in FINISHED
    R.metrics = {"val/bleu": 90.0, "step": 2000, "converged": 0.0}
    assert (
        row_from_result(R(), plan, [], max_steps=3000, tune_status="TERMINATED")["status"]
        == "stopped"
    )


def test_a_trial_whose_saved_state_predates_its_reports_takes_them_from_its_folder(tmp_path):
    """Ctrl-C twice: Tune stops without its last save, and the state it saved before holds the
    trial with no report. Its row takes the last report of its own result.json (unfinished, as
    it is), not empty figures."""
    import json

    from sweeps.report.results import row_from_result
    from sweeps.spec import load_spec

    folder = tmp_path / "t1_attention=bahdanau"
    folder.mkdir()
    reports = [
        {"trial_id": "t1", "step": 10, "val/bleu": 5.0},
        {"trial_id": "t1", "step": 20, "val/bleu": 7.5},
    ]
    (folder / "result.json").write_text("".join(json.dumps(r) + "\n" for r in reports))

    class R:
        metrics = {}
        error = None
        checkpoint = None
        path = str(folder)
        config = {}

    plan = load_spec("sweeps/quickstart.yaml").plans[0]
    row = row_from_result(R(), plan, [], max_steps=1200, tune_status="PENDING")
    assert (row["trial_id"], row["step"], row["val/bleu"], row["status"]) == (
        "t1",
        20,
        7.5,
        "unfinished",
    )
    R.path = str(tmp_path / "never_started")
    assert row_from_result(R(), plan, [], max_steps=1200, tune_status="PENDING")["step"] is None


# -- packing ---------------------------------------------------------------------------------------


def test_the_searcher_hands_out_the_longest_trials_first():
    from sweeps.plan.cost import estimated_cost
    from sweeps.plan.units import Unit
    from sweeps.search.compose import per_unit_searcher

    trainer = {"max_steps": 3000}
    cells = [
        (10, {"attention": "none"}),
        (10, {"attention": "bahdanau"}),
        (40, {"attention": "memory", "K": 4}),
        (40, {"attention": "bahdanau"}),
        (20, {"attention": "memory", "K": 32}),
    ]
    units = [
        Unit(f"s/{i}", i, 0, {"cell": i}, 3000, estimated_cost({"max_length": L}, m, trainer))
        for i, (L, m) in enumerate(cells)
    ]
    searcher = per_unit_searcher(units, num_samples=1, metric="val/bleu", mode="max")
    order = [searcher.suggest(f"t{i}")["cell"] for i in range(len(units))]
    assert order == [3, 2, 4, 1, 0]


# -- length-bucketed copy batches ------------------------------------------------------------------


def test_bucketed_copy_batches_cover_the_epoch_pad_less_and_resume_exactly():
    import torch

    from datamodules.copy_task import CopyTaskDataModule

    def loader():
        dm = CopyTaskDataModule(
            max_length=40, train_size=5000, batch_size=64, bucket_batches=True, seed=3
        )
        dm.setup()
        return dm, dm.train_dataloader()

    dm, dl = loader()
    batches = dl.batch_sampler.batches()
    assert sorted(i for b in batches for i in b) == list(range(5000)) and len(batches) == len(dl)
    lengths = dm.datasets["train"].lengths()
    assert np.mean([lengths[b].max() for b in batches]) < 25  # random batches of 64 pad to ~40
    it = iter(dl)
    first = [next(it)["src"] for _ in range(4)]
    _, again = loader()
    again.load_state_dict({"epoch": 0, "batches": 2})
    it2 = iter(again)
    assert torch.equal(next(it2)["src"], first[2]) and torch.equal(next(it2)["src"], first[3])
    dl.batch_sampler.set_epoch(1)
    assert dl.batch_sampler.batches() != batches


# -- the overhead benchmark's arithmetic --------------------------------------------------------------


def test_overhead_breakdown_sums_to_the_measured_difference():
    import benchmarks.sweep_overhead as bench

    plain = [
        {"spawned": 0.0, "entered": 1.0, "imported": 3.0, "setup": 0.5, "fit": 20.0, "left": 24.0},
        {"spawned": 0.0, "entered": 1.0, "imported": 3.0, "setup": 0.5, "fit": 20.0, "left": 24.0},
    ]
    phases = {
        "setup": 0.5,
        "wandb_init": 2.0,
        "fit": 21.0,
        "checkpoint": 0.5,
        "report": 0.5,
        "heatmaps": 1.0,
        "wandb_close": 0.2,
    }
    trials = [
        {"entered": 110.0, "left": 136.0, "phases": phases},
        {"entered": 111.0, "left": 137.0, "phases": phases},
    ]
    info = {
        "spawned": 100.0,
        "ended": 140.0,
        "stages": {
            "ray_start_start": 102.0,
            "ray_start_end": 105.0,
            "tune_start": 106.0,
            "tune_end": 138.0,
        },
    }
    parts, per_trial = bench.breakdown(25.0, plain, 41.0, info, trials, concurrency=2)
    assert sum(parts.values()) == pytest.approx(41.0 - 25.0, abs=0.05)
    assert (
        parts["ray_start_s"] == 3.0 and parts["wandb_init_s"] == 2.0 and parts["heatmaps_s"] == 1.0
    )
    assert per_trial["worker_start"] == pytest.approx(
        4.5
    )  # slots free at 106: trials enter at 110, 111


# -- end to end (slow) -------------------------------------------------------------------------------


@pytest.mark.slow
def test_two_seeds_with_a_convergence_stop_end_to_end(tmp_path: Path):
    """The launcher on the quickstart, 2 seeds, a stop at BLEU >= 50: Bahdanau converges early and
    says so, every trial saves its hypotheses, results.md judges the findings and bootstraps."""
    import subprocess
    import sys

    from sweeps.report.results import read_results

    cmd = [
        sys.executable,
        "sweeps/launch.py",
        "sweeps/quickstart.yaml",
        "--output",
        str(tmp_path),
        "--address",
        "local",
        "--verbose",
        "0",
        "--set",
        "trainer.max_steps=200",
        "--set",
        "trainer.val_check_interval=100",
        "--set",
        "task.train_size=3000",
        "--set",
        "seeds=[0,1]",
        "--set",
        "timing.enabled=false",
        "--set",
        "stop_when={metric: val/bleu, at_least: 50, reports: 1}",
    ]
    proc = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "WANDB_MODE": "offline"},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = tmp_path / "quickstart"
    df = read_results(out / "results.csv")
    bahdanau = df[df["attention"] == "bahdanau"]
    assert set(bahdanau["status"]) == {"converged"} and (bahdanau["step"] < 200).all()
    assert set(df[df["attention"] == "none"]["status"]) == {"done"}
    for ckpt in df["checkpoint"]:
        assert (Path(ckpt).parent / "val_hypotheses.txt").is_file()
    md = (out / "results.md").read_text()
    assert "The paper's findings, judged on the intervals" in md and "paired bootstrap" in md
    assert (out / "paired_bootstrap.csv").is_file()
    assert len(list(out.glob("*/phases.json"))) == len(df)


@pytest.mark.slow
def test_the_overhead_benchmark_prints_one_json_line():
    import json
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "benchmarks/sweep_overhead.py", "--quick"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert len(lines) == 1
    result = json.loads(lines[0])
    assert result["overhead_ratio"] == pytest.approx(
        result["launcher_s"] / result["plain_s"], rel=1e-2
    )
    assert sum(result["breakdown"].values()) == pytest.approx(result["difference_s"], abs=0.2)
    assert result["bleu_plain"] == result["bleu_launcher"]  # the same trainings, both ways


def test_the_bootstrap_table_names_its_seeds_as_seeds_not_as_a_count():
    table = pd.DataFrame(
        [
            {"length": 12, "memory": "memory K=16", "diff": -2.84, "low": -5.32, "high": -0.85,
             "p": 0.014, "sentences": 200, "seeds": "0"},
            {"length": 40, "memory": "memory K=32", "diff": -4.91, "low": -5.88, "high": -4.0,
             "p": 0.001, "sentences": 600, "seeds": "0,1,2"},
        ]
    )  # fmt: skip
    rows = bootstrap_markdown(table).splitlines()[2:]
    assert rows[0].endswith("| 200 (seed 0) |"), rows[0]
    assert rows[1].endswith("| 600 (seeds 0,1,2) |"), rows[1]


def test_a_translation_sweeps_bootstrap_is_keyed_by_pair_in_its_csv_and_its_table():
    """paired_bootstrap.csv put a translation sweep's language pair under a column named
    `length`; it is `pair`, and a file written before (pairs under `length`) still reads as pairs."""
    from sweeps.report.findings import bootstrap_markdown

    figures = dict(
        memory="memory K=32", seeds="0", sentences=50, diff=0.5, low=0.1, high=0.9, p=0.04
    )
    for column in ("pair", "length"):
        text = bootstrap_markdown(pd.DataFrame([{column: "en-de", **figures}]))
        assert text.splitlines()[0].startswith("| pair | best memory |"), column
        assert text.splitlines()[2].startswith("| en-de | memory K=32 | +0.50 | [+0.10, +0.90]")
    lengths = bootstrap_markdown(pd.DataFrame([{"length": 40, **figures}]))
    assert lengths.splitlines()[0].startswith("| L |") and "| 40 |" in lengths


def test_the_bootstrap_table_names_the_trials_it_compared(tmp_path):
    refs = [f"{i} {i + 1} {i + 2} {i + 3}" for i in range(20)]
    table = bootstrap_table(saved_pairs(tmp_path, refs, [r[:3] for r in refs], trial_ids=True))
    assert table[["seeds", "memory_trials", "bahdanau_trials"]].values.tolist() == [
        ["0,1", "m0,m1", "b0,b1"]
    ]
