"""Fused sweeps end to end, on the shared local Ray, real Optuna, W&B offline: each member of a
fused group is a trial of its own everywhere a user looks (results.csv, W&B, Optuna, its
checkpoint, the timing and held-out stages), a preempted fused sweep resumes to the results of an
uninterrupted one, and a fused run trains what the unfused run of the same seeds trains. (A member
ASHA stops leaves its group while the others finish: the ASHA study of
tests/sweeps/stages/test_train.py, whose samples train as one fused group.)"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

ray = pytest.importorskip("ray")

from sweep_helpers import (  # noqa: E402
    interrupt_env,
    result_steps,
    tiny_spec,
    wandb_read,
    write_spec,
)

from sweeps.launch import main  # noqa: E402

SEEDS = [0, 1]  # two members make a group: each more is one more trial process
#: the tests that read the ``fused`` sweep run in one xdist worker, so it runs once
ON_FUSED = pytest.mark.xdist_group("fused-sweep")


def seeds_spec(name: str, **over) -> dict:
    """The quickstart's shape at test size: one model over :data:`SEEDS`, fused as one group."""
    base = {
        "grid": {"model": [{"attention": "memory", "K": 4}]},
        "seeds": SEEDS,
        "trainer": {"max_steps": 30, "val_check_interval": 10},
        "wandb": {"mode": "disabled"},
    }
    spec = tiny_spec(name, **{**base, **over})
    spec["task"]["test_size"] = 32
    return spec


def launch(tmp: Path, spec: dict, *extra: str) -> int:
    return main(
        [str(write_spec(tmp, spec)), "--output", str(tmp / "out"), "--verbose", "0", *extra]
    )


def rows(tmp: Path, name: str) -> pd.DataFrame:
    df = pd.read_csv(tmp / "out" / name / "results.csv", dtype={"trial_id": str})
    return df.sort_values("seed").reset_index(drop=True)


#: the fused sweep with W&B offline and the timing and held-out stages on
FUSED = {
    "wandb": {"mode": "offline", "project": "test"},
    "timing": {
        "enabled": True,
        "processes": 1,
        "precision": 0.5,
        "max_seconds": 2,
        "calibration_seconds": 0.3,
        "measure": ["decode", "train"],
    },
    "heldout": {"enabled": True},
}


@pytest.fixture(scope="module")
def fused(local_ray, tmp_path_factory) -> SimpleNamespace:
    """The seeds sweep fused, preempted (SIGTERM) when its group's first member reports step 20,
    then resumed to the end: the run the tests below read."""
    tmp = tmp_path_factory.mktemp("fused")
    exp = tmp / "out" / "fused"
    spec = seeds_spec("fused", **FUSED)
    with pytest.MonkeyPatch.context() as hooked:
        for name, value in interrupt_env(exp, step=20, finished=0, signal="SIGTERM").items():
            hooked.setenv(name, value)
        first = launch(tmp, spec)
    preempted = rows(tmp, "fused")
    states = sorted(p.name for p in (exp / "fused").glob("g1/state-*"))
    before = {t.name: result_steps(t) for t in exp.glob("*_attention=*")}
    code = launch(tmp, spec, "--resume")
    return SimpleNamespace(
        first=first,
        preempted=preempted,
        states=states,
        before=before,
        code=code,
        tmp=tmp,
        exp=exp,
        df=rows(tmp, "fused") if code == 0 else None,
    )


@ON_FUSED
def test_a_preempted_fused_sweep_resumes_every_member_from_the_groups_state(fused):
    """Every member is ``preempted``, the group's states wait for --resume; resumed, each member
    continues from where it reported last (a report in flight at the stop may come again, as for
    an unfused trial) to max_steps, and the group's states are gone once all are done."""
    assert fused.first == 75 and (fused.preempted["status"] == "preempted").all()
    assert fused.states, "the group's state waits for --resume"
    assert fused.code == 0
    assert (fused.df["status"] == "done").all() and (fused.df["fused_with"] == "g1").all()
    for trial, before in fused.before.items():
        steps = result_steps(fused.exp / trial)
        assert steps[: len(before)] == before and steps[-1] == 30, (trial, steps)
        after = steps[len(before) :]
        assert after and after[0] >= before[-1], f"{trial} restarted: {before} then {after}"
    assert any(len(b) >= 2 for b in fused.before.values()), "stopped after a step-20 report"
    assert not list((fused.exp / "fused").glob("*/state-*")), "a finished group keeps no state"


@ON_FUSED
def test_each_member_of_a_fused_group_is_a_trial_of_its_own(fused):
    import torch

    from lightning_modules.module import Seq2SeqModule

    assert fused.code == 0
    df, sweep_dir = fused.df, fused.tmp / "out" / "fused"
    assert len(df) == len(SEEDS) and df["seed"].tolist() == SEEDS
    assert (df["status"] == "done").all() and (df["step"] == 30).all()
    assert (df["fused_with"] == "g1").all(), "results.csv names each member's group"
    # and each member's Tune config (params.json): which group, which member
    members = sorted(
        (json.loads(p.read_text()) for p in fused.exp.glob("*/params.json")),
        key=lambda c: c["seed"],
    )
    assert [(c["fused_with"], c["fused_member"]) for c in members] == [("g1", "1/2"), ("g1", "2/2")]
    # every member's checkpoint is a plain model of its own: it loads alone, at its last step
    weights = []
    for ckpt in df["checkpoint"]:
        model = Seq2SeqModule.load_from_checkpoint(ckpt, map_location="cpu")
        assert model.hparams.attention == "memory"
        raw = torch.load(ckpt, map_location="cpu", weights_only=False)
        assert raw["global_step"] == 30 and raw["optimizer_states"], "with its own Adam state"
        weights.append(round(sum(float(p.detach().abs().sum()) for p in model.parameters()), 4))
    assert len(set(weights)) == len(SEEDS), "a different model per member"
    # one W&B run per member (a segment per launch: preempted, then resumed), its config naming
    # the group, its last segment finished with the row's figures
    runs = sorted((sweep_dir / "wandb").glob("offline-run-*"))
    assert {r.name.rsplit("-", 1)[-1] for r in runs} == set(df["trial_id"])
    for row in df.to_dict("records"):
        last = wandb_read([r for r in runs if r.name.endswith(row["trial_id"])][-1])
        assert last["state"] == "finished"
        assert last["config"]["fused_with"] == "g1" and last["config"]["seed"] == row["seed"]
        assert last["config"]["fused_member"] == f"{row['seed'] + 1}/{len(SEEDS)}"
        assert last["summary"]["val/bleu"] == pytest.approx(row["val/bleu"])
        assert last["summary"]["train/loss"] == pytest.approx(row["train/loss"])
        assert last["summary"]["decode_seconds"] == pytest.approx(row["decode_seconds"])
    # the timing stage: decode time per model, the training step once for the group
    assert df["decode_seconds"].notna().all() and df["train_step_seconds"].notna().all()
    assert df["train_step_seconds"].nunique() == 1, "measured once, copied to every member"
    records = [json.loads(p.read_text()) for p in sweep_dir.glob("*/timing.json")]
    assert len(records) == len(SEEDS) and sum(r.get("train") is not None for r in records) == 1
    # each member chosen in its own unit and tested once on the held-out draw
    assert df["chosen"].all() and df["test/bleu"].notna().all()
    n = len(SEEDS)
    assert (
        f"Fused: {n} of {n} trials trained in 1 fused group(s)"
        in (sweep_dir / "results.md").read_text()
    )


@ON_FUSED
def test_fusion_off_trains_each_trial_alone_and_fused_members_learn_the_same(fused, tmp_path):
    """``fusion: off`` is today's sweep (no group, no fused_with); the fused members trained on
    the same data from the same weights as the unfused trials of their seeds, to float tolerance."""
    assert launch(tmp_path, seeds_spec("fused", fusion="off")) == 0
    alone = rows(tmp_path, "fused")
    assert "fused_with" not in alone or alone["fused_with"].isna().all()
    assert not (tmp_path / "out" / "fused" / "fused").exists()
    for col in ("val/loss", "train/loss"):
        assert alone[col].tolist() == pytest.approx(fused.df[col].tolist(), rel=1e-4), col


@pytest.mark.slow
@ON_FUSED
def test_the_resumed_fused_sweep_ends_where_an_uninterrupted_one_does(fused, tmp_path):
    """The same fused sweep never stopped: every member's figures to the last digit."""
    assert launch(tmp_path, seeds_spec("fused", **FUSED)) == 0
    straight = rows(tmp_path, "fused")
    for col in ("val/bleu", "val/loss", "train/loss"):
        assert straight[col].tolist() == fused.df[col].tolist(), col


def test_cells_of_other_k_scoring_position_encoding_and_length_train_as_one_group(
    local_ray, tmp_path
):
    """A sweep planned for GPUs (its trials ask for one) joins memory attention's cells across
    K, the scoring pair, position encodings and the length into one fused group; run on this
    machine, which has no GPU, the group trains on the CPU. Every row is done and each member's
    checkpoint loads alone as the model of its own cell (its K, scoring, position encodings,
    length). (That the timing stage times each such member as its own model, not as its group:
    tests/sweeps/timing/test_timing_fused.py; the stage's processes on a fused group: above.)"""
    spec = tiny_spec(
        "mixed",
        grid={
            "task.max_length": [4, 6],
            "model": [
                {"attention": "memory", "K": 2, "encoder_scoring": "sigmoid"},
                {"attention": "memory", "K": 5, "position_encoding": True},
            ],
        },
        trainer={"max_steps": 20, "val_check_interval": 10},
        resources={"cpu": 1, "gpu": 0.5},
        wandb={"mode": "disabled"},
    )
    assert launch(tmp_path, spec) == 0
    df = pd.read_csv(tmp_path / "out" / "mixed" / "results.csv", dtype={"trial_id": str})
    assert len(df) == 4 and (df["status"] == "done").all() and (df["step"] == 20).all()
    assert df["fused_with"].nunique() == 1 and df["fused_with"].notna().all()
    from lightning_modules import Seq2SeqModule

    for row in df.itertuples():
        module = Seq2SeqModule.load_from_checkpoint(row.checkpoint, map_location="cpu")
        attention = module.model.decoder.attention
        expected = (2, "sigmoid", False) if row.K == 2 else (5, "softmax", True)
        assert (
            attention.K,
            attention.encoder_scoring,
            attention.use_position_encoding,
        ) == expected
        assert module.hparams.max_source_len == row.length + 1  # its own length (and EOS)
