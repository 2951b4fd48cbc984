"""Configurations judged over seeds, without a Ray instance: the aggregate Optuna is
told, the searcher's order and bookkeeping on a real Optuna journal, and the rung rule that stops a
configuration's seeds together, driven with the events Tune would send. The launcher's end-to-end
run of the mode is the slow test at the end."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

pytest.importorskip("ray")

from ray.tune.experiment import Trial  # noqa: E402
from ray.tune.schedulers import TrialScheduler  # noqa: E402

from sweeps.plan.units import Unit  # noqa: E402
from sweeps.report.selection import aggregate  # noqa: E402
from sweeps.schedulers.config_rungs import ConfigRungs  # noqa: E402
from sweeps.search.base import SweepSearcher  # noqa: E402
from sweeps.search.handout import OneAtATime  # noqa: E402
from sweeps.search.objective import SingleObjective  # noqa: E402
from sweeps.search.over_seeds import OverSeeds  # noqa: E402


def test_aggregate_is_the_mean_or_the_pessimistic_end_of_the_t_interval():
    assert aggregate([10.0, 14.0]) == 12.0
    # sd = 2.828, t(1) = 12.706: 12 -+ 12.706 * 2.828 / sqrt(2) = 12 -+ 25.41
    assert aggregate([10.0, 14.0], "lcb", "max") == pytest.approx(12.0 - 25.412, abs=1e-2)
    assert aggregate([10.0, 14.0], "lcb", "min") == pytest.approx(12.0 + 25.412, abs=1e-2)
    assert aggregate([7.0], "lcb", "max") == 7.0


def _searcher(tmp_path: Path, limit=None) -> SweepSearcher:
    import optuna.distributions as od

    units = [
        Unit(f"s/c{c}-seed{s}", c, s, {"cell": f"c{c}", "seed": s}, max_steps=30)
        for c in range(2)
        for s in (0, 1)
    ]
    scope = OverSeeds(
        units,
        SingleObjective("val/bleu", "max"),
        num_samples=2,
        space={"lr": od.FloatDistribution(1e-4, 1e-2, log=True)},
        journal=str(tmp_path / "optuna.journal"),
        studies=["s/c0", "s/c1"],
        how="mean",
    )
    searcher = SweepSearcher(units, scope, OneAtATime())
    searcher.set_max_concurrency(limit)
    return searcher


def test_a_configuration_runs_on_every_seed_and_optuna_is_told_its_mean(tmp_path):
    import optuna

    searcher = _searcher(tmp_path)
    first, second = searcher.suggest("t1"), searcher.suggest("t2")
    # the seeds of one configuration come first, with the same sampled values
    assert (first["seed"], second["seed"]) == (0, 1)
    assert first["cell"] == second["cell"] and first["lr"] == second["lr"]
    assert first["configuration"] == second["configuration"] == 0
    third = searcher.suggest("t3")  # the next configuration: the other cell's first
    assert third["cell"] != first["cell"] and third["configuration"] == 0
    searcher.on_trial_result("t1", {"val/bleu": 4.0, "step": 10})
    searcher.on_trial_result("t2", {"val/bleu": 6.0, "step": 10})
    searcher.on_trial_complete("t1", {"val/bleu": 10.0, "step": 30})
    study = searcher.scope.cell_study(0)
    assert study.trials[0].state == optuna.trial.TrialState.RUNNING  # a seed is still training
    searcher.on_trial_complete("t2", {"val/bleu": 14.0, "step": 30})
    (t,) = [t for t in searcher.scope.cell_study(0).trials if t.number == 0]
    assert t.state == optuna.trial.TrialState.COMPLETE and t.value == 12.0
    assert t.intermediate_values == {10: 5.0, 30: 12.0}
    assert t.user_attrs["seed=0"] == {
        "ray_trial_id": "t1",
        "value": 10.0,
        "state": "COMPLETE",
        "step": 30,
    }
    assert t.user_attrs["seed=1"]["ray_trial_id"] == "t2" and t.user_attrs["seed_values"] == [
        10.0,
        14.0,
    ]
    # one study per cell, none per (cell, seed)
    assert sorted(optuna.get_all_study_names(searcher.scope.journal.storage)) == ["s/c0", "s/c1"]


def test_a_configuration_told_fail_whose_seed_a_resume_finishes_is_told_as_a_retry(tmp_path):
    """A seed that failed made its configuration FAIL in Optuna once every seed had ended; on
    --resume the seed runs again and finishes, and Optuna, which takes no later tell, kept FAIL
    while results.csv said done. The configuration goes on as a new trial of the same values
    (retry_of the failed one), with the other seed's outcome and curve, told the mean."""
    import pickle

    import optuna

    searcher = _searcher(tmp_path)
    first, _ = searcher.suggest("t1"), searcher.suggest("t2")
    searcher.on_trial_result("t1", {"val/bleu": 4.0, "step": 10})
    searcher.on_trial_result("t2", {"val/bleu": 6.0, "step": 10})
    searcher.on_trial_complete("t1", {"val/bleu": 10.0, "step": 30})
    searcher.on_trial_complete("t2", None, error=True)  # failed past its retries: error
    (failed,) = searcher.scope.cell_study(0).trials
    assert failed.state == optuna.trial.TrialState.FAIL
    saved = str(tmp_path / "searcher.pkl")
    searcher.save(saved)
    resumed = pickle.loads(pickle.dumps(searcher))  # --resume (resume_errored): t2 runs again
    resumed.restore(saved)
    assert resumed.scope.held() == {resumed.live["t2"].storage_id}  # RUNNING until t2 ends
    resumed.on_trial_result("t2", {"val/bleu": 8.0, "step": 20})
    resumed.on_trial_complete("t2", {"val/bleu": 14.0, "step": 30})
    old, retry = resumed.scope.cell_study(0).trials
    assert old.state == optuna.trial.TrialState.FAIL  # as it was
    assert retry.state == optuna.trial.TrialState.COMPLETE and retry.value == 12.0
    assert retry.params == old.params == {"lr": first["lr"]} and retry.user_attrs["retry_of"] == 0
    assert retry.user_attrs["seed=0"] == old.user_attrs["seed=0"]  # t1's outcome, carried over
    assert retry.user_attrs["seed=1"]["ray_trial_id"] == "t2"
    assert retry.user_attrs["seed=1"]["state"] == "COMPLETE"
    assert retry.intermediate_values == {10: 5.0, 30: 12.0}
    assert retry.user_attrs["seed_values"] == [10.0, 14.0]
    # the retry is no new configuration: the cell still draws its second one
    assert resumed.scope.drawn(0) == 1
    assert {resumed.suggest(f"n{k}")["cell"] for k in range(4)} == {"c0", "c1"}


def test_a_seed_retried_before_its_configuration_is_told_replaces_its_failed_outcome(tmp_path):
    """A seed failed while its sibling still ran; on --resume the sibling ended first: the
    configuration was told FAIL from the failed seed's old outcome while its retry still ran,
    and the retry's finish was then lost."""
    import pickle

    import optuna

    searcher = _searcher(tmp_path)
    for trial_id in ("u1", "u2"):
        searcher.suggest(trial_id)
    searcher.on_trial_complete("u1", None, error=True)  # u2 still running
    saved = str(tmp_path / "searcher.pkl")
    searcher.save(saved)
    resumed = pickle.loads(pickle.dumps(searcher))
    resumed.restore(saved)
    resumed.on_trial_complete("u2", {"val/bleu": 14.0, "step": 30})  # the sibling ends first
    (trial,) = resumed.scope.cell_study(0).trials
    assert trial.state == optuna.trial.TrialState.RUNNING  # u1's retry still runs
    resumed.on_trial_complete("u1", {"val/bleu": 10.0, "step": 30})
    (trial,) = resumed.scope.cell_study(0).trials
    assert trial.state == optuna.trial.TrialState.COMPLETE and trial.value == 12.0
    assert trial.user_attrs["seed=0"]["state"] == "COMPLETE"


def test_paused_seeds_hold_no_slot_of_the_searchers_limit(tmp_path):
    searcher = _searcher(tmp_path, limit=1)
    assert searcher.suggest("t1") is not None
    assert searcher.suggest("t2") is None  # one running: the limit
    ConfigRungs("val/bleu", "max", 2, 1, 2.0, 3, 30, searcher.rung_state)  # its state, shared
    searcher.rung_state["waiting"]["t1"] = ("c0", 0, 1)  # paused at a rung
    assert searcher.suggest("t2")["seed"] == 1  # its sibling may start


def _trial(tid, config, seed):
    return SimpleNamespace(
        trial_id=tid,
        config={"cell": "c", "configuration": config, "seed": seed},
        status=Trial.RUNNING,
    )


class _Controller:
    def __init__(self, trials):
        self.trials, self.stopped = trials, []

    def get_trials(self):
        return self.trials

    def stop_trial(self, trial):
        self.stopped.append(trial.trial_id)

    def _set_trial_status(self, trial, status):
        trial.status = status


def test_a_configuration_is_judged_on_its_seeds_mean_and_its_seeds_stop_together():
    rungs = ConfigRungs("val/bleu", "max", 2, 1, 2.0, 3, 30, {})
    good0, good1, bad0, bad1 = (
        _trial("g0", 0, 0),
        _trial("g1", 0, 1),
        _trial("b0", 1, 0),
        _trial("b1", 1, 1),
    )
    ctl = _Controller([good0, good1, bad0, bad1])
    report = lambda v: {"val/bleu": v, "training_iteration": 1, "step": 10}  # noqa: E731
    # the first seed at the rung waits for its sibling (paused)
    assert rungs.on_trial_result(ctl, good0, report(30.0)) == TrialScheduler.PAUSE
    good0.status = Trial.PAUSED
    assert rungs.choose_trial_to_run(ctl) is not good0  # still waiting
    assert (
        rungs.on_trial_result(ctl, good1, report(20.0)) == TrialScheduler.CONTINUE
    )  # mean 25 kept
    assert rungs.choose_trial_to_run(ctl) is good0  # released: its configuration goes on
    # the second configuration: one seed is better than the first's mean, but its mean (15) is not
    assert rungs.on_trial_result(ctl, bad0, report(28.0)) == TrialScheduler.PAUSE
    bad0.status = Trial.PAUSED
    assert rungs.on_trial_result(ctl, bad1, report(2.0)) == TrialScheduler.STOP
    rungs.choose_trial_to_run(ctl)
    assert ctl.stopped == ["b0"] and rungs.state["stopped"] == {"c#1": 1}  # both at rung 1
    assert rungs.state["rungs"]["c@1"] == {"0": 25.0, "1": 15.0}
    # a later report of a stopped configuration's seed stops too
    assert rungs.on_trial_result(ctl, bad0, report(50.0)) == TrialScheduler.STOP


def test_a_failed_seed_stops_its_configuration():
    rungs = ConfigRungs("val/bleu", "max", 2, 1, 2.0, 3, 30, {})
    a, b = _trial("a", 0, 0), _trial("b", 0, 1)
    ctl = _Controller([a, b])
    assert (
        rungs.on_trial_result(ctl, a, {"val/bleu": 1.0, "training_iteration": 1, "step": 10})
        == "PAUSE"
    )
    a.status = Trial.PAUSED
    b.should_recover = lambda: True  # a failure Tune retries from the checkpoint: nothing stops
    rungs.on_trial_error(ctl, b)
    rungs.choose_trial_to_run(ctl)
    assert ctl.stopped == [] and not rungs.state["stopped"]
    b.should_recover = lambda: False  # the last failure
    rungs.on_trial_error(ctl, b)
    rungs.choose_trial_to_run(ctl)
    assert ctl.stopped == ["a"]


@pytest.mark.slow
def test_configurations_over_seeds_end_to_end(local_ray, tmp_path):
    """The launcher in the new mode (about a minute here): the journal holds one study per cell,
    each COMPLETE trial's value the mean over that configuration's seeds in results.csv; a stopped
    configuration's seeds all stopped at the same step; the held-out stage tests every seed of each
    cell's chosen configuration."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend
    from sweep_helpers import tiny_spec, write_spec

    from sweeps.launch import main

    spec = tiny_spec(
        "cfg",
        task={
            "name": "copy",
            "max_length": 4,
            "train_size": 256,
            "val_size": 16,
            "test_size": 16,
            "batch_size": 16,
        },
        parameters={"model.lr": {"min": 1e-4, "max": 3e-2, "distribution": "log_uniform_values"}},
        num_samples=3,
        seeds={"values": [0, 1], "per_configuration": True},
        metric={"name": "val/loss", "goal": "minimize"},
        early_terminate={"type": "asha", "grace_period": 1, "reduction_factor": 2},
        trainer={"max_steps": 30, "val_check_interval": 10},
        heldout={"enabled": True},
    )
    out = tmp_path / "out"
    assert main([str(write_spec(tmp_path, spec)), "--output", str(out), "--verbose", "0"]) == 0
    df = pd.read_csv(out / "cfg" / "results.csv", dtype={"trial_id": str})
    assert len(df) == 12 and df["configuration"].notna().all()
    storage = JournalStorage(JournalFileBackend(str(out / "cfg" / "optuna.journal")))
    assert sorted(optuna.get_all_study_names(storage)) == [
        "cfg/K-4_attention-memory",
        "cfg/attention-none",
    ]
    for _, seeds in df.groupby(["cell", "configuration"]):
        assert sorted(seeds["seed"]) == [0, 1]
        if (seeds["status"] == "stopped").any():
            assert (seeds["status"] == "stopped").all() and seeds["step"].nunique() == 1
    for name in optuna.get_all_study_names(storage):
        for t in optuna.load_study(study_name=name, storage=storage).trials:
            ids = [v["ray_trial_id"] for k, v in t.user_attrs.items() if k.startswith("seed=")]
            rows = df[df["trial_id"].isin(ids)]
            assert len(rows) == 2 and rows["configuration"].nunique() == 1
            if t.state == optuna.trial.TrialState.COMPLETE:
                assert t.value == pytest.approx(rows["val/loss"].mean())
            else:
                assert (
                    t.state == optuna.trial.TrialState.PRUNED
                    and (rows["status"] == "stopped").all()
                )
    chosen = df[df["chosen"]]
    assert chosen.groupby("cell")["configuration"].nunique().eq(1).all()
    assert (
        chosen.groupby("cell")["seed"].nunique().eq(2).all() and chosen["test/bleu"].notna().all()
    )
    # W&B: each seed's run carries its configuration and the aggregate over the seeds
    import subprocess
    import sys

    row = chosen.iloc[0]
    runs = sorted((out / "cfg" / "wandb").glob(f"offline-run-*-{row['trial_id']}"))
    read = subprocess.run(
        [
            str(Path(sys.executable).parent / "wandb"),
            "leet",
            "inspect",
            "--summary",
            "--json",
            str(runs[-1]),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    info = json.loads(read.stdout)
    mine = chosen[chosen["cell"] == row["cell"]]
    assert info["summary"]["configuration/val/loss"] == pytest.approx(mine["val/loss"].mean())
    assert info["summary"]["test/bleu"] == pytest.approx(row["test/bleu"])
    assert info["config"]["configuration_id"].endswith(f"#{row['configuration']}")
    md = (out / "cfg" / "results.md").read_text()
    assert "Held-out test results of the chosen configurations" in md


def test_a_configurations_wandb_label_fits_wandbs_64_characters():
    from sweeps.trial.wandb_run import configuration_label

    assert configuration_label("attention-none", 3) == "attention-none#3"
    long_a, long_b = configuration_label("x" * 100, 12), configuration_label("x" * 99 + "y", 12)
    assert len(long_a) == 64 and long_a.endswith("#12") and long_a != long_b


def test_opening_a_study_prints_no_optuna_info_line(tmp_path):
    """Optuna's "A new study created in Journal with name: ..." cut into the progress output once
    per study (minimal_k: 4 lines); the launch names its studies once at its end."""
    import logging

    import optuna

    from sweeps.search.journal import Journal

    class Kept(logging.Handler):
        def __init__(self) -> None:
            super().__init__()
            self.lines: list[str] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.lines.append(record.getMessage())

    kept = Kept()
    journal = Journal(str(tmp_path / "optuna.journal"))
    before = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.INFO)  # Optuna's default
    logging.getLogger("optuna").addHandler(kept)
    try:
        study = journal.study(
            "s/length-4-seed0",
            lambda storage, name: optuna.create_study(study_name=name, storage=storage),
        )
        assert optuna.logging.get_verbosity() == optuna.logging.INFO, "the caller's is kept"
    finally:
        logging.getLogger("optuna").removeHandler(kept)
        optuna.logging.set_verbosity(before)
    assert study.study_name == "s/length-4-seed0"
    assert not [line for line in kept.lines if "A new study created" in line], kept.lines


def test_configurations_with_no_rung_to_compare_at_run_to_the_end_under_fifo():
    """tune_optuna's over-seeds profile with num_samples 1: --dry-run said every configuration's
    seeds run to the end, fused, but the launch still put them under the configurations' rungs,
    which pause a seed until its siblings arrive; a paused member cannot come back to its fused
    group, so the trials failed. Where no rung compares configurations, the scheduler is FIFO."""
    from sweeps.plan.fusion import plan_fusion
    from sweeps.schedulers.per_unit import SweepFIFO, make_scheduler
    from sweeps.spec import load_spec

    spec = Path(__file__).resolve().parents[3] / "sweeps" / "tune_optuna.yaml"
    searcher = SimpleNamespace(rung_state={}, comeback=None)
    one = load_spec(str(spec), overrides=["num_samples=1"], profile="over-seeds")
    assert plan_fusion(one).active  # the seeds of each configuration train fused
    assert type(make_scheduler(one, searcher)) is SweepFIFO
    three = load_spec(str(spec), profile="over-seeds")  # 3 configurations a cell: compared
    assert not plan_fusion(three).active and type(make_scheduler(three, searcher)) is ConfigRungs
