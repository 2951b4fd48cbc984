"""Sweeps end to end on a real local Ray instance, real Optuna and W&B in offline mode."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ray = pytest.importorskip("ray")

from sweep_helpers import (  # noqa: E402
    PLANNING,
    SECRET,
    counting_calls,
    interrupt_env,
    interrupted_trials,
    result_steps,
    tiny_spec,
    wandb_read,
    write_spec,
)

from sweeps.launch import main  # noqa: E402
from sweeps.layout import wandb_command  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


def test_sweep_end_to_end(local_ray, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WANDB_API_KEY", SECRET)  # offline mode must still never write it anywhere
    spec = write_spec(
        tmp_path,
        tiny_spec(
            "e2e",
            task={
                "name": "copy",
                "max_length": 4,
                "train_size": 256,
                "val_size": 16,
                "test_size": 32,
                "batch_size": 16,
            },
            heldout={"enabled": True},
            wandb={"project": "test", "tags": ["pytest"]},  # with its attention heatmaps
            timing={
                "enabled": True,
                "processes": 2,
                "precision": 0.05,
                "max_seconds": 2,
                "calibration_seconds": 0.3,
            },
        ),
    )
    out = tmp_path / "out"
    with counting_calls() as calls:
        assert main([str(spec), "--output", str(out), "--verbose", "0"]) == 0
    printed = capsys.readouterr().out
    # the launch works its plan out once and every stage reads it; the report makes its summary
    # of the cells once for every table and plot
    assert calls(PLANNING) == {name: 1 for name in PLANNING}, calls(PLANNING)
    assert calls({"cell_summary": "sweeps/report/summary.py"}) == {"cell_summary": 1}

    sweep_dir = out / "e2e"
    df = pd.read_csv(sweep_dir / "results.csv", dtype={"trial_id": str})
    assert len(df) == 2
    assert set(df["attention"]) == {"none", "memory"}
    assert (df["status"] == "done").all()
    assert df.loc[df["attention"] == "memory", "K"].tolist() == [4]
    for col in (
        "val/bleu",
        "decode_seconds",
        "decode_seconds_iqr",
        "val/decode_seconds",
        "val/loss",
        "train_time_s",
        "length",
        "seed",
    ):
        assert df[col].notna().all(), col
    # the timing stage: one timing.json beside each trial, the median of at least 5 repeats taken
    # alone, more until the median was known to 5% (or the time cap came first, and the record says so)
    timings = {
        p.parent.name.split("_")[0]: json.loads(p.read_text())
        for p in (out / "e2e").glob("*/timing.json")
    }
    assert sorted(timings) == sorted(df["trial_id"])
    for row in df.itertuples():
        t = timings[row.trial_id]["timing"]
        assert row.decode_seconds == pytest.approx(t["decode_seconds"]) and t["repeats"] >= 5
        assert (
            row.decode_repeats == t["repeats"]
            # the row carries the record's passes; how many a repeat takes (several for this
            # few-ms split on a quiet machine, one when a loaded host slowed the last warm-up
            # pass past MIN_REPEAT_S) is tests/sweeps/timing/test_timing.py's to check
            and row.decode_passes_per_repeat == t["passes_per_repeat"] >= 1
        )
        # where it was timed, as results.md says it: this machine's CPU, by the name torch sees
        assert (row.timing_device, row.timing_device_name) == ("cpu", t["device_name"])
        assert (
            t["device_name"]
            and f"on CPU ({t['device_name']}) in processes pinned"
            in (sweep_dir / "results.md").read_text()
        )
        if not t["contended"]:  # (a contended timing claims no precision and says so in results.md)
            assert t["stopped_by"] in ("precision", "time cap", "repeat cap"), t["stopped_by"]
            assert (
                t["precision"] <= 0.05 if t["stopped_by"] == "precision" else t["precision"] > 0.05
            )
        # two fresh processes timed it; the figure is the faster one's median
        assert len(t["process_medians"]) == 2 == row.decode_processes and t[
            "decode_seconds"
        ] == min(t["process_medians"])
        assert row.decode_seconds_iqr == pytest.approx(t["iqr_seconds"])
        # training cost, by default measured beside decode time in the same processes
        train, memory = timings[row.trial_id]["train"], timings[row.trial_id]["memory"]
        assert row.train_step_seconds == pytest.approx(train["step_seconds"]) and train["steps"] > 0
        assert len(train["process_medians"]) == 2 and train["step_seconds"] == min(
            train["process_medians"]
        )
        assert row.train_tokens_per_second == pytest.approx(train["tokens_per_second"])
        assert row.train_peak_mb == pytest.approx(memory["train_peak_mb"])
        assert row.decode_peak_mb == pytest.approx(memory["decode_peak_mb"])
        assert (
            min(train["tokens_per_second"], memory["train_peak_mb"], memory["decode_peak_mb"]) > 0
        )
        assert len(memory["train_samples"]) == 1  # a fresh process of its own per model
    assert (df["step"] == 20).all()
    for ckpt in df["checkpoint"]:
        assert ckpt.endswith("/checkpoint.ckpt") and Path(ckpt).stat().st_size > 0  # loads as it is
    md = (sweep_dir / "results.md").read_text()
    assert "| memory K=4" in md.replace("  ", " ") or "memory K=4" in md
    # one length and one K: bar charts per model, not one-point line plots
    assert (sweep_dir / "decode_by_model.png").exists() and (
        sweep_dir / "bleu_by_model.png"
    ).exists()
    assert (
        not (sweep_dir / "decode_vs_length.png").exists()
        and not (sweep_dir / "bleu_vs_k.png").exists()
    )

    assert "Training cost by length and model" in md and "train step s" in md
    assert "Quality vs training cost" in md
    assert (sweep_dir / "train_step_by_model.png").exists()
    assert (sweep_dir / "train_peak_by_model.png").exists()

    runs = sorted((sweep_dir / "wandb").glob("offline-run-*"))
    assert len(runs) == 2, "one W&B run per trial, none duplicated"
    # the timing stage's figures in each run's summary, as W&B's own reader shows them
    for run in runs:
        summary = wandb_read(run)["summary"]
        row = df[df["trial_id"] == run.name.rsplit("-", 1)[-1]].iloc[0]
        for col in ("decode_seconds", "train_step_seconds", "train_peak_mb", "decode_peak_mb"):
            assert summary[col] == pytest.approx(row[col]), (run.name, col)
        # the reported training loss under results.csv's name (Lightning's logger wrote only
        # train/loss_step and train/loss_epoch, neither the reported value), and the model's
        # mechanism and K as results.csv's columns name them
        assert summary["train/loss"] == pytest.approx(row["train/loss"]), run.name
        config = wandb_read(run)["config"]
        assert config["attention"] == row["attention"]
        assert config.get("K") == (None if pd.isna(row.get("K")) else row["K"])
    assert all(list(r.glob("*.wandb")) for r in runs)
    # attention heatmaps logged as W&B images (drawn for the memory-attention run's alpha/beta too)
    assert all(list(r.glob("files/media/images/val/attention_*.png")) for r in runs)

    # the held-out stage: without a search every trial is its (cell, seed)'s choice, evaluated
    # once on the copy task's test draw; its figures in results.csv, heldout.json and results.md's
    # held-out table, validation beside test (the W&B summary: test_experiment's surfaces test)
    assert df["chosen"].all() and df["test/bleu"].notna().all()
    assert (df["test_split"] == "copy test draw").all()
    tested = {
        p.parent.name.split("_")[0]: json.loads(p.read_text())
        for p in sweep_dir.glob("*/heldout.json")
    }
    assert sorted(tested) == sorted(df["trial_id"])
    for row in df.itertuples():
        assert tested[row.trial_id]["metrics"]["test/bleu"] == pytest.approx(
            df.set_index("trial_id").loc[row.trial_id, "test/bleu"]
        )
    held = md.split("## Held-out test results of the chosen configurations")[1]
    assert "L=4 valid" in held and "L=4 test" in held and "copy test draw" in held

    leaked = [p for p in out.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert not leaked, f"the W&B key was written to {leaked}"

    # the printed upload command (run as printed by test_study's ASHA surfaces test)
    hint = printed.split("upload the runs with:\n")[1].splitlines()[0].strip()
    assert hint.startswith(f"{wandb_command()} sync ") and "--include-offline" not in hint

    # --resume of a finished sweep does not time a trial twice
    # (nor evaluate one on test twice)
    before = {
        p: p.read_text()
        for p in (out / "e2e").glob("*/*.json")
        if p.name in ("timing.json", "heldout.json")
    }
    assert main([str(spec), "--output", str(out), "--verbose", "0", "--resume"]) == 0
    said = capsys.readouterr().out
    assert "already timed" in said and "already evaluated" in said
    # every trial finished: Tune is not run again, and the launch says so in one line
    assert (
        "nothing to resume in training: every trial (2) finished in an earlier run of this sweep"
        in said
    ), said
    assert {
        p: p.read_text()
        for p in (out / "e2e").glob("*/*.json")
        if p.name in ("timing.json", "heldout.json")
    } == before
    assert (
        pd.read_csv(sweep_dir / "results.csv", dtype={"trial_id": str})["decode_seconds"].tolist()
        == df["decode_seconds"].tolist()
    )

    # a resume that turns the measuring stages off says which figures results.csv now leaves out,
    # and keeps their files: turned on again, results.csv has them back
    resume = [str(spec), "--output", str(out), "--verbose", "0", "--resume"]
    off = ["--set", "timing.enabled=false", "--set", "heldout.enabled=false"]
    assert main([*resume, *off]) == 0
    said = capsys.readouterr().out
    for key, what in (("timing", "decode timings"), ("heldout", "test-split figures")):
        assert (
            f"{key}.enabled is false: the {what} an earlier run measured for 2 trial(s)" in said
        ), said
    assert "test/bleu" not in pd.read_csv(sweep_dir / "results.csv")
    assert {
        p: p.read_text()
        for p in (out / "e2e").glob("*/*.json")
        if p.name in ("timing.json", "heldout.json")
    } == before
    on = ["--set", "timing.enabled=true", "--set", "heldout.enabled=true"]
    assert main([*resume, *on]) == 0
    back = pd.read_csv(sweep_dir / "results.csv", dtype={"trial_id": str})
    assert back["decode_seconds"].tolist() == df["decode_seconds"].tolist()
    assert back["test/bleu"].tolist() == df["test/bleu"].tolist()


def test_trial_that_fails_once_resumes_from_its_checkpoint(
    local_ray, tmp_path, capsys, monkeypatch
):
    # Tune's copy of the trial's logs in storage is one report behind when the trial fails (it
    # was, by chance, in CI): the retry must still keep the step-20 report in result.json
    monkeypatch.setenv("RAY_TUNE_CALLBACKS", "stale_logs_hook.StaleLogsAtStep")
    monkeypatch.setenv("STALE_LOGS_AT_STEP", "20")
    monkeypatch.setenv("TUNE_GLOBAL_CHECKPOINT_S", "3600")  # no copy to storage replaces it
    spec = tiny_spec(
        "chaos",
        grid={"model": [{"attention": "bahdanau"}]},
        trainer={"max_steps": 40, "val_check_interval": 10},
        chaos={"fail_once_at_step": 25},
        failure={"max_failures": 1},
        storage={"keep_checkpoints": 8},  # no forced copy to storage either
        wandb={"mode": "offline", "log_heatmaps": False},
        timing={"enabled": False},
    )
    out = tmp_path / "out"
    assert main([str(write_spec(tmp_path, spec)), "--output", str(out), "--verbose", "0"]) == 0
    df = pd.read_csv(out / "chaos" / "results.csv", dtype={"trial_id": str})
    assert df["status"].tolist() == ["done"] and df["step"].tolist() == [40]
    # done, but not as if nothing happened: the retry is counted in results.csv and on the console
    assert df["retries"].tolist() == [1]
    assert "1 trial(s) failed and were retried (1 retries in all" in capsys.readouterr().out
    # the retry continued the trial's own W&B run: two offline segments, one run id (the trial's)
    runs = sorted((out / "chaos" / "wandb").glob("offline-run-*"))
    assert len(runs) == 2 and {r.name.rsplit("-", 1)[-1] for r in runs} == {df["trial_id"][0]}
    # read with wandb's own reader: the crashed attempt's segment says so, the retry's ends finished
    wandb_bin = str(Path(sys.executable).parent / "wandb")
    read = [
        json.loads(
            subprocess.run(
                [wandb_bin, "leet", "inspect", "--summary", "--json", str(r)],
                capture_output=True,
                text=True,
                timeout=120,
            ).stdout
        )
        for r in runs
    ]
    assert [r["state"] for r in read] == ["failed", "finished"]
    assert read[1]["summary"]["val/bleu"] == pytest.approx(df["val/bleu"][0])
    assert len(list((out / "chaos" / "chaos").glob("*.failed"))) == 1, (
        "the injected failure happened"
    )
    trial_dir = next(p for p in (out / "chaos").iterdir() if (p / "result.json").exists())
    steps = result_steps(trial_dir)
    # resumed from the step-20 checkpoint: no step reported twice, nothing restarted from zero
    assert steps == [10, 20, 30, 40]


def test_a_failed_trial_is_an_error_row_and_resume_skips_its_truncated_newest_checkpoint(
    local_ray, tmp_path, capsys
):
    """A trial that fails with no retry left: the launcher fails, names the trial and the command
    that goes on, and results.md lists it. Its newest checkpoint then torn (a crash in the middle
    of writing it): ``--resume`` skips that one and finishes the trial from the one before. (Trials
    that fail before their first report, or never start, have their rows too: the teacher pairs'
    failing launch, tests/sweeps/search/test_pairs.py.)"""
    spec = tiny_spec(
        "torn",
        grid={"model": [{"attention": "bahdanau"}]},
        trainer={"max_steps": 40, "val_check_interval": 10},
        chaos={"fail_once_at_step": 25},
        failure={"max_failures": 0},  # the trial stays failed, with checkpoints at steps 10 and 20
        wandb={"mode": "disabled"},
    )
    path, out = write_spec(tmp_path, spec), tmp_path / "out"
    args = [str(path), "--output", str(out), "--verbose", "0"]
    assert main(args) == 1
    failed = pd.read_csv(out / "torn" / "results.csv", dtype={"trial_id": str})
    assert failed["status"].tolist() == ["error"]
    assert failed["retries"].fillna(0).tolist() == [0], "max_failures 0: no retry"
    assert failed["error"].str.contains("chaos: injected failure at step 25").all(), failed["error"]
    md = (out / "torn" / "results.md").read_text()
    assert "Trials: 1 error" in md and "## Failed trials" in md
    err = capsys.readouterr().err
    assert (
        "1 of 1 trial(s) failed" in err and "attention=bahdanau seed=0" in err and "--resume" in err
    )
    # a resume keeps the plan's settings: a failure one of them causes needs a new sweep
    assert "change it with another --output, a new sweep" in err

    trial_dir = next(p for p in (out / "torn").iterdir() if (p / "result.json").exists())
    assert result_steps(trial_dir) == [10, 20]
    newest = sorted(trial_dir.glob("checkpoint_*"))[-1] / "checkpoint.ckpt"
    data = newest.read_bytes()
    newest.write_bytes(data[: len(data) // 2])  # a crash in the middle of writing it

    assert main(args + ["--resume"]) == 0
    lines = [
        json.loads(line)
        for line in (trial_dir / "result.json").read_text().splitlines()
        if line.strip()
    ]
    # continued from step 10 (the intact checkpoint): step 20 is reported again, nothing from step 0
    assert [r["step"] for r in lines] == [10, 20, 20, 30, 40]
    assert (
        lines[-1]["skipped_checkpoints"] == 1 and lines[-1]["resumed_from"] == "checkpoint_000000"
    )
    df = pd.read_csv(out / "torn" / "results.csv", dtype={"trial_id": str})
    assert df["status"].tolist() == ["done"]


def test_when_no_checkpoint_loads_the_trial_restarts_from_step_0_and_says_so(tmp_path):
    import torch
    from ray import tune

    from sweeps.layout import CHECKPOINT_FILE
    from sweeps.trial.checkpoints import restore_checkpoint

    for i, content in enumerate([b"torn", b""]):
        (tmp_path / f"checkpoint_00000{i}").mkdir()
        (tmp_path / f"checkpoint_00000{i}" / CHECKPOINT_FILE).write_bytes(content)
    said = []
    newest = tune.Checkpoint.from_directory(str(tmp_path / "checkpoint_000001"))
    restored = restore_checkpoint(newest, str(tmp_path), log=said.append)
    assert restored.ckpt_path is None and restored.skipped == 2
    assert (
        "checkpoint_000001 does not load" in said[0]
        and "checkpoint_000000 does not load" in said[1]
    )
    assert "restarts from step 0" in said[-1]

    torch.save(
        {"state_dict": {}}, tmp_path / "checkpoint_000000" / CHECKPOINT_FILE
    )  # the older one is whole
    said.clear()
    local = tmp_path / "local"
    local.mkdir()
    restored = restore_checkpoint(newest, str(local), log=said.append)
    assert (restored.name, restored.skipped) == ("checkpoint_000000", 1)
    assert restored.ckpt_path == str(local / CHECKPOINT_FILE) and "resuming from" in said[-1]


def test_unreachable_address_fails_with_one_clear_line(tmp_path, capsys):
    """Checked first, even in a process that already runs Ray (this module's fixture)."""
    spec = write_spec(tmp_path, tiny_spec("addr"))
    code = main([str(spec), "--address", "127.0.0.1:1", "--output", str(tmp_path / "o")])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert "cannot reach the Ray cluster at 127.0.0.1:1" in err and "--address" in err
    assert len(err.splitlines()) == 1, err


def test_a_launch_takes_its_wandb_mode_out_of_the_environment_when_it_returns(
    tmp_path, monkeypatch, capsys
):
    """The launcher sets WANDB_MODE for its trials. Left set, it decided the next launch in the same
    process: a sweep with ``wandb.mode: auto`` after one with ``disabled`` logged no W&B run."""
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "false")
    spec = write_spec(tmp_path, tiny_spec("modes", wandb={"mode": "disabled"}))
    # refused where Ray is joined, after the mode is set (not before anything is written)
    monkeypatch.setattr("sweeps.stages.setup.check_given_address", lambda address: None)
    code = main([str(spec), "--address", "127.0.0.1:1", "--output", str(tmp_path / "o")])
    assert code == 2 and "cannot reach the Ray cluster" in capsys.readouterr().err
    assert "WANDB_MODE" not in os.environ and os.environ["WANDB_SILENT"] == "false"


def test_a_preempted_sweep_resumes_to_the_results_of_an_uninterrupted_run(
    local_ray, tmp_path, monkeypatch, capsys
):
    """A scheduler's preemption (SIGTERM; SLURM's time-limit warning, SIGUSR1, takes the same
    path, and Ctrl-C too, with exit status 130: the multi-objective study's and the teacher pairs'
    tests) when the second trial reports step 20, the first one finished: the launcher exits 75,
    the unfinished trial is `preempted` (not failed, no retry charged). --resume keeps the first
    run's --set overrides and sweep file (a changed one is refused), runs no finished trial again, continues the
    preempted one from its checkpoint, and ends with the BLEU of a run that was never stopped."""
    spec = tiny_spec(
        "resume",
        grid={"model": [{"attention": "none"}, {"attention": "bahdanau"}]},
        trainer={"max_steps": 3000, "val_check_interval": 10},  # the first run's --set makes it 60
        max_concurrent_trials=1,
        wandb={"mode": "disabled"},
    )
    spec["task"]["max_length"] = 3
    path = write_spec(tmp_path, spec)
    out = tmp_path / "out"
    # the same flags for every launch below, the uninterrupted one too
    flags = ["--num-cpus", "2", "--verbose", "0", "--address", "local"]
    args = [str(path), "--output", str(out), *flags]
    exp = out / "resume"
    with monkeypatch.context() as hooked:
        for name, value in interrupt_env(exp, step=20, signal="SIGTERM").items():
            hooked.setenv(name, value)
        code = main(args + ["--set", "trainer.max_steps=60"])
    finished, running = interrupted_trials(exp)
    assert code == 75
    said = capsys.readouterr()
    assert "preempted (SIGTERM)" in said.out and "--resume" in said.out
    finished_lines = (finished / "result.json").read_text()
    assert result_steps(finished)[-1] == 60
    before = result_steps(running)
    assert (
        20 <= before[-1] < 60
    )  # a trial runs at most a report ahead of Tune: it stopped by step 40
    df = pd.read_csv(exp / "results.csv", dtype={"trial_id": str})
    assert sorted(df["status"]) == ["done", "preempted"], "results written for what finished"
    assert df["retries"].fillna(0).eq(0).all(), "a preemption is not a failure"
    assert "preempted" in (exp / "results.md").read_text()
    stale = {
        p.name: p.read_text() for p in exp.glob("experiment_state-*.json")
    }  # Tune's record, now

    # a --set that changes the first run's overrides is refused before anything starts
    assert main(args + ["--resume", "--set", "trainer.max_steps=50"]) == 2
    refused = capsys.readouterr().err
    assert "--resume continues the first run with its own overrides" in refused
    assert "trainer.max_steps=60" in refused and len(refused.strip().splitlines()) == 1
    # so is a sweep file edited since in what plans its trials (the launch recorded the first
    # one's); the rest (here its budget) may change
    first_file = path.read_text()
    edited = {
        **spec,
        "trainer": {**spec["trainer"], "val_check_interval": 20},
        "budget": {"hours": 1},
    }
    write_spec(tmp_path, edited)
    assert main(args + ["--resume"]) == 2
    refused = capsys.readouterr().err
    assert (
        "the sweep file plans its trials otherwise than at the first run: "
        "trainer.val_check_interval was 10, is 20." in refused
    )
    assert len(refused.strip().splitlines()) == 1
    path.write_text(first_file)

    # resumed without --set: the first run's trainer.max_steps=60 still holds (not the file's 3000)
    assert main(args + ["--resume"]) == 0
    assert (
        "resuming with the recorded overrides: --set trainer.max_steps=60"
        in capsys.readouterr().out
    )
    assert (finished / "result.json").read_text() == finished_lines, "a finished trial was re-run"
    steps = result_steps(running)
    after = steps[len(before) :]
    assert steps[: len(before)] == before and after and after[-1] == 60
    # continued from its last checkpoint (at most one report interval is redone), not from step 0
    assert after[0] >= before[-1] > 10, f"restarted instead of continuing: {before} then {after}"
    df = pd.read_csv(exp / "results.csv", dtype={"trial_id": str})
    assert sorted(df["status"]) == ["done", "done"]

    # kill -9 after the second trial finished but before Tune wrote its state again: the state on
    # disk says that trial is still running, at a checkpoint Tune has since deleted. A launcher
    # process of its own, on a Ray of its own: the trial's own line reaches the console too.
    for p in exp.glob("experiment_state-*.json"):
        p.unlink()
    for name, text in stale.items():
        (exp / name).write_text(text)
    cmd = [sys.executable, str(ROOT / "sweeps" / "launch.py")] + args + ["--resume"]
    code = subprocess.run(
        cmd,
        cwd=ROOT,
        env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert code.returncode == 0, code.stdout[-3000:] + code.stderr[-3000:]
    assert f"repaired: trial folder {running.name}: its recorded checkpoint" in code.stdout, (
        code.stdout[-3000:]
    )
    assert "finished in an earlier run of this sweep (step 60)" in code.stdout + code.stderr, (
        code.stdout[-3000:] + code.stderr[-3000:]
    )
    assert result_steps(running)[: len(steps)] == steps and set(
        result_steps(running)[len(steps) :]
    ) <= {60}
    again = pd.read_csv(exp / "results.csv", dtype={"trial_id": str})
    assert (
        sorted(again["status"]) == ["done", "done"]
        and again["val/bleu"].tolist() == df["val/bleu"].tolist()
    )

    # the whole output folder moved (a sweep copied from a cluster to a workstation): a resume
    # finds every checkpoint where it is now (it repointed them at "step 0" and emptied their
    # rows' checkpoints and figures), and a warm start from it reuses its trials
    moved = tmp_path / "moved"
    out.rename(moved)
    assert main([str(path), "--output", str(moved), *flags, "--resume"]) == 0
    said = capsys.readouterr().out
    assert "repaired" not in said and "lost their checkpoint" not in said, said[-2000:]
    kept = pd.read_csv(moved / "resume" / "results.csv", dtype={"trial_id": str})
    assert kept["val/bleu"].tolist() == again["val/bleu"].tolist()
    assert all(str(moved) in c and Path(c).is_file() for c in kept["checkpoint"]), kept[
        "checkpoint"
    ]
    warm = {**spec, "warm_start": str(moved / "resume")}
    warm["trainer"] = {**spec["trainer"], "max_steps": 60}  # the first run's --set
    (tmp_path / "w").mkdir()
    dry = [str(write_spec(tmp_path / "w", warm)), "--output", str(tmp_path / "w"), "--dry-run"]
    assert main(dry) == 0
    assert "2 trial(s) reused" in capsys.readouterr().out

    # the same sweep never stopped: the same BLEU per model, to the last digit
    straight = [str(path), "--output", str(tmp_path / "straight"), *flags]
    assert main(straight + ["--set", "trainer.max_steps=60"]) == 0
    whole = pd.read_csv(tmp_path / "straight" / "resume" / "results.csv", dtype={"trial_id": str})
    assert whole.set_index("model")["val/bleu"].to_dict() == (
        again.set_index("model")["val/bleu"].to_dict()
    )


def test_no_gpu_on_a_local_machine_falls_back_to_cpu_and_a_cluster_keeps_the_request(
    local_ray, tmp_path, capsys
):
    """check_cluster against this machine's real Ray instance, which has no GPU."""
    from sweeps.driver.cluster import check_cluster
    from sweeps.plan.sweep_plan import Paths
    from sweeps.spec import load_spec

    assert not ray.cluster_resources().get("GPU")
    sweep = load_spec(write_spec(tmp_path, tiny_spec("fit", resources={"cpu": 1, "gpu": 0.5})))
    paths = Paths(output=tmp_path, storage=str(tmp_path))
    assert check_cluster(sweep, paths, address=None).gpu == 0
    assert sweep.spec.resources.gpu == 0.5, "the validated spec is left as written"
    assert "trials run on CPU" in capsys.readouterr().out
    # a cluster (an --address) may still get GPU nodes from its autoscaler: warn, keep the request
    assert check_cluster(sweep, paths, address="127.0.0.1:6379").gpu == 0.5
    assert "the cluster has no GPU now" in capsys.readouterr().out


def test_results_csv_never_loses_a_finished_row_and_a_damaged_tune_state_is_refused(tmp_path):
    from sweeps.driver.cluster import LaunchError
    from sweeps.driver.resume_check import check_experiment_state
    from sweeps.report.results import keep_finished, read_results, write_results_csv

    row = {"cell": "c", "model": "none", "length": 4, "seed": 0}
    first = [
        {
            **row,
            "trial_id": "01e13825",
            "status": "done",
            "val/bleu": 70.0,
        },  # not the number 1e13825
        {**row, "trial_id": "a", "status": "done", "val/bleu": 90.0},
        {**row, "trial_id": "b", "status": "done", "val/bleu": 80.0},
    ]
    write_results_csv(first, tmp_path)
    # a later run that lost Tune's record of both: one errored row for "a", a placeholder for the other
    later = [
        {**row, "trial_id": "a", "status": "error", "error": "never started"},
        {**row, "trial_id": None, "status": "error", "error": "never started"},
    ]
    rows, kept = keep_finished(later, tmp_path / "results.csv")
    assert kept == 3 and sorted((r["trial_id"], r["status"], r["val/bleu"]) for r in rows) == [
        ("01e13825", "done", 70.0),
        ("a", "done", 90.0),
        ("b", "done", 80.0),
    ]
    assert read_results(tmp_path / "results.csv")["trial_id"].tolist()[0] == "01e13825"

    (tmp_path / "experiment_state-2026.json").write_text('{"trial_data": [')
    with pytest.raises(LaunchError, match="experiment_state-2026.json is damaged"):
        check_experiment_state(tmp_path)
