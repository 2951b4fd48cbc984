"""One Tune experiment per study, on a real local Ray: compact trial configs read back with Ray's
own ExperimentAnalysis, every cell's Optuna trials running at once (read back with Optuna's own
load_study), and early stopping that never crosses cells."""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

ray = pytest.importorskip("ray")

from sweep_helpers import interrupt_env, interrupted_trials, tiny_spec, write_spec  # noqa: E402

from sweeps.launch import main  # noqa: E402

#: the tests that read the ``surfaces`` sweep run in one xdist worker, so it runs once
ON_SURFACES = pytest.mark.xdist_group("surfaces")


def two_cell_optuna_spec(name: str, **over) -> dict:
    """Cells none and bahdanau, each an Optuna study of 2 samples over the learning rate."""
    return tiny_spec(
        name,
        grid={"model": [{"attention": "none"}, {"attention": "bahdanau"}]},
        parameters={"model.lr": {"min": 1e-4, "max": 1e-2, "distribution": "log_uniform_values"}},
        num_samples=2,
        **over,
    )


def results_of(trial_dir: Path) -> list[dict]:
    return [
        json.loads(line)
        for line in (trial_dir / "result.json").read_text().splitlines()
        if line.strip()
    ]


def test_four_cell_study_reads_back_as_flat_columns(local_ray, tmp_path, capsys):
    spec = tiny_spec(
        "flat",
        grid={
            "task.max_length": [3, 4],
            "model": [{"attention": "none"}, {"attention": "memory", "K": 2}],
        },
        trainer={"max_steps": 4, "val_check_interval": 2},
        wandb={"mode": "disabled"},
        # each trial alone, in the one process Tune reuses (fused, the two groups and four
        # members take six processes): the fused config columns are test_fused_sweep.py's
        fusion="off",
    )
    out = tmp_path / "out"
    assert (
        main(
            [
                str(write_spec(tmp_path, spec)),
                "--output",
                str(out),
                "--verbose",
                "1",
                "--address",
                "local",
            ]
        )
        == 0
    )

    # the console: a trial table with the grid columns, the metric, step and training time, and a
    # progress line; no config dumps
    console = capsys.readouterr().out
    assert "Ray: joined" in console
    header = next(
        line for line in console.splitlines() if line.startswith("trial ") and " status " in line
    )
    assert header.split()[0] == "trial" and header.split()[-4:] == [
        "status",
        "val/bleu",
        "step",
        "train_s",
    ]
    assert set(header.split()[1:-4]) == {"length", "attention", "K"}
    assert "[4 trials] 4 finished, 0 running, 0 pending, 0 failed" in console
    assert "'task'" not in console and "plans" not in console
    # the last table (all four finished) names their state as results.csv does
    lines = console.splitlines()
    # (each table's columns are as wide as its widest cell: its header line is found by its words)
    last = max(i for i, line in enumerate(lines) if line.split() == header.split())
    table = itertools.takewhile(lambda line: not line.startswith("["), lines[last + 1 :])
    assert {row.split()[header.split().index("status")] for row in table} == {"done"}

    from ray.tune import ExperimentAnalysis

    exp = out / "flat"
    analysis = ExperimentAnalysis(str(exp))
    df = analysis.dataframe()
    config_cols = {c for c in df.columns if c.startswith("config/")}
    assert config_cols == {
        "config/cell",
        "config/seed",
        "config/attention",
        "config/K",
        "config/length",
    }
    assert len(df) == 4
    assert sorted(zip(df["config/length"], df["config/attention"])) == [
        (3, "memory"),
        (3, "none"),
        (4, "memory"),
        (4, "none"),
    ]
    best = analysis.get_best_config(metric="val/loss", mode="min")
    assert {"attention", "length", "seed"} <= set(best)
    params = sorted(exp.glob("*/params.json"))
    assert len(params) == 4
    for p in params:
        assert p.stat().st_size < 20_000
        config = json.loads(p.read_text())
        # only this trial's own plan: its cell's values, nothing of any other cell
        assert set(config) <= {"cell", "seed", "attention", "K", "length"}
        assert set(config["cell"].split()) == {
            f"{k}={config[k]}" for k in ("length", "attention", "K") if k in config
        }


def _span(trial_dir: Path) -> tuple[float, float]:
    """(start, end) wall-clock seconds of a trial, from its recorded results."""
    rows = results_of(trial_dir)
    first = rows[0]
    return first["timestamp"] - first["time_total_s"], rows[-1]["timestamp"]


def test_optuna_studies_of_both_cells_run_at_the_same_time(local_ray, tmp_path):
    spec = two_cell_optuna_spec(
        "both",
        trainer={"max_steps": 20, "val_check_interval": 10},
        wandb={"mode": "offline", "log_heatmaps": False},
        max_concurrent_trials=2,  # each cell's group at once (tiny_spec's cap is 1)
    )
    out = tmp_path / "out"
    assert (
        main(
            [
                str(write_spec(tmp_path, spec)),
                "--output",
                str(out),
                "--verbose",
                "0",
                "--address",
                "local",
            ]
        )
        == 0
    )

    exp = out / "both"
    spans: dict[str, list[tuple[float, float]]] = {"none": [], "bahdanau": []}
    trial_dirs = {}
    for params in exp.glob("*/params.json"):
        config = json.loads(params.read_text())
        spans[config["attention"]].append(_span(params.parent))
        trial_dirs[params.parent.name.split("_")[0]] = params.parent
    assert len(spans["none"]) == 2 and len(spans["bahdanau"]) == 2
    overlaps = [
        (a, b)
        for a in spans["none"]
        for b in spans["bahdanau"]
        if max(a[0], b[0]) < min(a[1], b[1])
    ]
    assert overlaps, f"no trial of one cell ran while a trial of the other did: {spans}"

    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    storage = JournalStorage(JournalFileBackend(str(exp / "optuna.journal")))
    names = optuna.get_all_study_names(storage)
    assert sorted(names) == ["both/attention-bahdanau-seed0", "both/attention-none-seed0"]
    lrs = []
    for name in names:
        study = optuna.load_study(study_name=name, storage=storage)
        complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
        assert len(complete) == 2
        for t in complete:
            ray_id = t.user_attrs["ray_trial_id"]
            assert ray_id in trial_dirs
            assert t.user_attrs["wandb_run_id"] == ray_id
            ckpt = Path(t.user_attrs["checkpoint_path"])
            assert (
                ckpt.name == "checkpoint.ckpt"
                and ckpt.is_file()
                and trial_dirs[ray_id] in ckpt.parents
            )
            lrs.append(t.params["lr"])
    assert len(set(lrs)) == 4, (
        "each cell's sampler has its own seed: no two cells draw the same samples"
    )
    runs = sorted((exp / "wandb").glob("offline-run-*"))
    assert {r.name.rsplit("-", 1)[-1] for r in runs} == set(trial_dirs)


def test_asha_never_stops_a_cell_because_another_scores_higher(local_ray, tmp_path):
    """Cell lr=0.05 learns, cell lr=1e-7 cannot. The strong cell runs first (one trial at a time);
    an ASHA over the whole study would stop the weak cell's trial at its first report."""
    spec = tiny_spec(
        "asha",
        grid={"model.lr": [0.05, 1e-7]},
        model={"preset": "tiny", "attention": "none"},
        metric={"name": "val/loss", "goal": "minimize"},
        early_terminate={"type": "asha", "grace_period": 1, "reduction_factor": 2},
        trainer={"max_steps": 30, "val_check_interval": 10},
        max_concurrent_trials=1,
        wandb={"mode": "disabled"},
    )
    out = tmp_path / "out"
    assert (
        main(
            [
                str(write_spec(tmp_path, spec)),
                "--output",
                str(out),
                "--verbose",
                "0",
                "--address",
                "local",
            ]
        )
        == 0
    )
    df = pd.read_csv(out / "asha" / "results.csv", dtype={"trial_id": str}).set_index("lr")
    assert df.loc[0.05, "val/loss"] < df.loc[1e-7, "val/loss"], "the cells differ as intended"
    assert df.loc[1e-7, "step"] == 30 and df.loc[1e-7, "status"] == "done"


@pytest.mark.slow
def test_interrupted_grid_x_optuna_study_resumes_and_the_journal_agrees(tmp_path):
    """SIGINT to the launcher when the second of four trials (2 cells x 2 samples) reports step 20, then
    --resume: no finished trial re-runs, and every Optuna study ends with exactly its 2 trials,
    each tied to a Ray trial."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[3]
    spec = two_cell_optuna_spec(
        "resume_optuna",
        trainer={
            "max_steps": 60,
            "val_check_interval": 10,
        },  # the interrupted trial stops by step 40
        max_concurrent_trials=1,
        # one trial at a time, so a trial reports step 20 after the first has finished; fused,
        # both groups train at once and, on a loaded machine, both are past step 20 before
        # either ends (the hook never fires). Fused resumes: tests/sweeps/trial/fused.
        fusion="off",
        wandb={"mode": "disabled"},
    )
    spec["task"]["max_length"] = 3
    path = write_spec(tmp_path, spec)
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        str(root / "sweeps" / "launch.py"),
        str(path),
        "--output",
        str(out),
        "--num-cpus",
        "2",
        "--verbose",
        "0",
        "--address",
        "local",
    ]
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    exp = out / "resume_optuna"
    first = subprocess.run(
        cmd,
        cwd=root,
        env={**env, **interrupt_env(exp, step=20, subprocess=True)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert first.returncode == 130, first.stdout[-3000:] + first.stderr[-3000:]
    finished, running = interrupted_trials(exp)
    finished_lines = (finished / "result.json").read_text()

    again = subprocess.run(
        cmd + ["--resume"], cwd=root, env=env, capture_output=True, text=True, timeout=600
    )
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert (finished / "result.json").read_text() == finished_lines, "a finished trial was re-run"
    trial_dirs = {p.parent.name.split("_")[0]: p.parent for p in exp.glob("*/params.json")}
    assert len(trial_dirs) == 4, sorted(trial_dirs)
    for d in trial_dirs.values():
        assert [r["step"] for r in results_of(d)][-1] == 60

    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    storage = JournalStorage(JournalFileBackend(str(exp / "optuna.journal")))
    names = optuna.get_all_study_names(storage)
    assert len(names) == 2
    ray_ids = []
    for name in names:
        trials = optuna.load_study(study_name=name, storage=storage).trials
        assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE] * 2, (name, trials)
        ray_ids += [t.user_attrs["ray_trial_id"] for t in trials]
    assert sorted(ray_ids) == sorted(trial_dirs), "the journal and Tune's trials agree"
    df = pd.read_csv(exp / "results.csv", dtype={"trial_id": str})
    assert sorted(df["status"]) == ["done"] * 4


LOAD_AND_VALIDATE = """
import json, sys
import lightning.pytorch as pl, torch
from datamodules import CopyTaskDataModule
from lightning_modules import Seq2SeqModule
out = []
for path in json.loads(sys.argv[1]):
    model = Seq2SeqModule.load_from_checkpoint(path, map_location="cpu")
    dm = CopyTaskDataModule(**torch.load(path, map_location="cpu", weights_only=False)["datamodule_hyper_parameters"])
    trainer = pl.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False)
    out.append(trainer.validate(model, datamodule=dm, verbose=False)[0]["val/bleu"])
print(json.dumps({"bleu": out, "imported": sorted(m for m in ("ray", "optuna", "wandb") if m in sys.modules)}))
"""


@pytest.fixture(scope="module")
def surfaces(local_ray, tmp_path_factory) -> SimpleNamespace:
    """One ASHA + Optuna study, run once, that the next two tests read: one cell (memory K=4),
    4 samples of the learning rate and the dropout. The second test changes it (--resume)."""
    tmp = tmp_path_factory.mktemp("surfaces")
    spec = tiny_spec(
        "surfaces",
        task={"name": "copy", "max_length": 4, "train_size": 256, "val_size": 32, "batch_size": 16},
        grid={"model": [{"attention": "memory", "K": 4}]},
        parameters={
            "model.lr": {"min": 1e-5, "max": 3e-2, "distribution": "log_uniform_values"},
            "model.dropout": {"values": [0.0, 0.1]},
        },
        num_samples=4,
        # the loss differs between any two samples, so ASHA (grace 1, halving) stops some for sure
        metric={"name": "val/loss", "goal": "minimize"},
        early_terminate={"type": "asha", "grace_period": 1, "reduction_factor": 2},
        trainer={"max_steps": 40, "val_check_interval": 10},
        # the timing stage inside its Ray task (no fresh processes: test_sweep covers those), briefly
        timing={
            "enabled": True,
            "precision": 0.05,
            "max_seconds": 1,
            "fresh_process": False,
            "calibration_seconds": 0.3,
        },
        wandb={
            "project": "test",
            "mode": "offline",
        },  # not the mode an earlier test left in the environment
        heldout={"enabled": True},
    )
    path, out = write_spec(tmp, spec), tmp / "out"
    printed = io.StringIO()  # the launcher's console (capsys is the tests' own)
    with contextlib.redirect_stdout(printed):
        code = main([str(path), "--output", str(out), "--verbose", "0"])
    return SimpleNamespace(
        path=path, out=out, exp=out / "surfaces", code=code, printed=printed.getvalue()
    )


@ON_SURFACES
def test_asha_study_every_surface_agrees_with_results_csv(surfaces):
    """ASHA stops trials of one (cell, seed), whose samples, asked of Optuna together, train as one
    fused group: a stopped member leaves the group and the others train on to max_steps. Read back
    with each tool's own client: every W&B run is finished with its last val/bleu and the timing
    stage's decode_seconds; Optuna holds the stopped trials as PRUNED with one intermediate value
    per report and the timings; every checkpoint path loads as it is, without Ray, Optuna or W&B,
    and validates to its row's BLEU."""
    import subprocess
    import sys

    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    assert surfaces.code == 0
    printed = surfaces.printed
    # Tune's own console (its experiment box, a TensorBoard command for a folder under /tmp/ray)
    # is off below --verbose 2: the launcher's says what happens
    assert "Configuration for experiment" not in printed and "TensorBoard" not in printed
    exp = surfaces.exp
    df = pd.read_csv(exp / "results.csv", dtype={"trial_id": str}).set_index("trial_id")
    assert len(df) == 4 and (df["status"] == "stopped").any() and (df["status"] == "done").any(), (
        df["status"]
    )
    assert df["decode_seconds"].notna().all() and (df["retries"] == 0).all()
    assert (df["fused_with"] == "g1").all(), "the four samples train as one fused group"
    assert (df.loc[df["status"] == "stopped", "step"] < 40).all()
    assert (df.loc[df["status"] == "done", "step"] == 40).all(), "the others trained on"
    reports = {
        d.name.split("_")[0]: results_of(d)
        for d in exp.glob("*_attention=*")
        if (d / "result.json").exists()
    }
    assert set(reports) == set(df.index)
    # the held-out stage: the one trial chosen on validation (the best val/loss of the cell's
    # samples) is evaluated on test, the others are not
    assert df["chosen"].sum() == 1 and df.index[df["chosen"]][0] == df["val/loss"].idxmin()
    assert df.loc[df["chosen"], "test/bleu"].notna().all()
    assert df.loc[~df["chosen"], "test/bleu"].isna().all()

    # W&B, read with wandb's own reader
    wandb_bin = str(Path(sys.executable).parent / "wandb")
    runs = sorted((exp / "wandb").glob("offline-run-*"))
    assert len(runs) == 4, runs
    for run in runs:
        read = subprocess.run(
            [wandb_bin, "leet", "inspect", "--summary", "--json", str(run)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        info = json.loads(read.stdout)
        row, summary, config = df.loc[info["run_id"]], info["summary"], info["config"]
        assert info["state"] == "finished", (info["run_id"], row["status"])
        assert (
            summary["val/bleu"]
            == pytest.approx(reports[info["run_id"]][-1]["val/bleu"])
            == pytest.approx(row["val/bleu"])
        )
        assert summary["decode_seconds"] == pytest.approx(row["decode_seconds"])
        if row["chosen"]:
            assert summary["test/bleu"] == pytest.approx(row["test/bleu"])
        else:
            assert "test/bleu" not in summary
        assert "val/attention" in summary, "the heatmaps were logged, stopped trial or not"
        assert config["K"] == 4 and config["model.hidden_size"] == 64  # the preset's size, resolved
        # this sweep's runs among the group's, for the W&B Report's panels
        assert config["sweep_id"] == json.loads((exp / "launch.json").read_text())["sweep_id"]
        assert (
            not {"model.K", "model.lr", "attention_kwargs", "lr_"} & set(config)
            and None not in config.values()
        )
    hint = printed.split("upload the runs with:\n")[1].splitlines()[0].strip()
    bin_dir = str(Path(sys.executable).parent)
    sync = subprocess.run(
        hint.replace(" sync ", " sync --dry-run ", 1),
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PATH": bin_dir + os.pathsep + os.environ["PATH"]},
    )
    said = sync.stdout + sync.stderr
    assert sync.returncode == 0 and "ERROR" not in said and said.count(".wandb") == 4, said

    # Optuna, read with its own load_study and CLI
    journal = str(exp / "optuna.journal")
    (name,) = optuna.get_all_study_names(JournalStorage(JournalFileBackend(journal)))
    study = optuna.load_study(study_name=name, storage=JournalStorage(JournalFileBackend(journal)))
    for t in study.trials:
        ray_id = t.user_attrs["ray_trial_id"]
        row = df.loc[ray_id]
        want = (
            optuna.trial.TrialState.PRUNED
            if row["status"] == "stopped"
            else optuna.trial.TrialState.COMPLETE
        )
        assert t.state == want, (ray_id, row["status"], t.state)
        assert t.user_attrs["fused_with"] == "g1"
        assert t.params["lr"] == pytest.approx(row["param:model.lr"])
        assert t.intermediate_values == {
            r["step"]: pytest.approx(r["val/loss"]) for r in reports[ray_id]
        }
        assert t.value == pytest.approx(row["val/loss"])
        assert t.user_attrs["checkpoint_path"] == row["checkpoint"]
        assert study.user_attrs["decode_timing"][str(t.number)]["decode_seconds"] == pytest.approx(
            row["decode_seconds"]
        )
        tested = study.user_attrs["heldout"].get(str(t.number))
        assert (tested or {}).get("test/bleu") == (
            pytest.approx(row["test/bleu"]) if row["chosen"] else None
        )
    assert len({t.params["lr"] for t in study.trials}) == len(study.trials) == 4, "asked together"
    # the Optuna commands the launcher prints work as printed
    trials_cmd, dashboard_cmd = printed.split("Optuna studies (one per cell and seed)")[
        1
    ].splitlines()[1:3]
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ["PATH"]}
    cli = subprocess.run(
        trials_cmd, shell=True, capture_output=True, text=True, timeout=120, env=env
    )
    assert (
        cli.returncode == 0 and cli.stdout.count("PRUNED") == (df["status"] == "stopped").sum()
    ), cli.stderr
    _dashboard_lists(dashboard_cmd, name, env)

    # one rule picks a trial's checkpoint (its last report), and Ray's own API agrees when asked for it
    from ray.tune import ExperimentAnalysis

    analysis = ExperimentAnalysis(str(exp))
    for trial in analysis.trials:
        newest = analysis.get_best_checkpoint(trial, metric="step", mode="max")
        assert f"{newest.path}/checkpoint.ckpt" == df.loc[trial.trial_id, "checkpoint"]

    # checkpoints: the path as written loads, in a Python that never imports Ray, Optuna or W&B
    paths = [str(p) for p in df["checkpoint"]]
    done = subprocess.run(
        [sys.executable, "-c", LOAD_AND_VALIDATE, json.dumps(paths)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parents[3],
    )
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert loaded["imported"] == []
    assert loaded["bleu"] == pytest.approx(df["val/bleu"].tolist())


@ON_SURFACES
def test_optuna_searches_nuisance_parameters_inside_each_cell(surfaces, capsys):
    """The study's Optuna search (learning rate and dropout, inside the one cell), and --resume of
    it after a bad line landed in the middle of its journal."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    assert surfaces.code == 0
    df = pd.read_csv(surfaces.exp / "results.csv", dtype={"trial_id": str})
    assert len(df) == 4
    lrs = df["param:model.lr"].tolist()
    assert len(set(lrs)) == 4 and all(1e-5 <= v <= 3e-2 for v in lrs)
    assert set(df["param:model.dropout"]) <= {0.0, 0.1}
    journal = surfaces.exp / "optuna.journal"
    storage = JournalStorage(JournalFileBackend(str(journal)))
    (summary,) = optuna.get_all_study_summaries(storage)
    assert summary.n_trials == 4 and "K-4" in summary.study_name

    # a garbage line in the middle of the journal: --resume names it, takes it out (keeping the
    # original), and the finished trials stay finished, in results.csv and in Optuna
    lines = journal.read_text().splitlines(keepends=True)
    journal.write_text("".join(lines[:3] + ["garbage from a bad disk\n"] + lines[3:]))
    assert (
        main([str(surfaces.path), "--output", str(surfaces.out), "--verbose", "0", "--resume"]) == 0
    )
    printed = capsys.readouterr().out
    assert "repaired:" in printed and "line 4 ('garbage from a bad disk')" in printed
    assert journal.read_text().startswith("".join(lines)) and "garbage" not in journal.read_text()
    assert list(journal.parent.glob("optuna.journal.damaged-*")), "the original is kept"
    again = pd.read_csv(surfaces.exp / "results.csv", dtype={"trial_id": str})
    assert sorted(again["trial_id"]) == sorted(df["trial_id"])
    assert (
        again.set_index("trial_id")["status"].to_dict()
        == df.set_index("trial_id")["status"].to_dict()
    )
    assert (
        optuna.get_all_study_summaries(JournalStorage(JournalFileBackend(str(journal))))[0].n_trials
        == 4
    )


def _dashboard_lists(command: str, study_name: str, env: dict) -> None:
    """Start ``optuna-dashboard`` as the launcher printed it (on a free local port) and read the
    study list from its API."""
    import socket
    import subprocess
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        f"{command.strip()} --host 127.0.0.1 --port {port}",
        shell=True,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{port}/api/studies", timeout=5
                ) as reply:
                    studies = json.loads(reply.read())["study_summaries"]
                break
            except OSError:
                assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
                assert time.monotonic() < deadline, "optuna-dashboard never answered"
                time.sleep(0.5)
        assert [s["study_name"] for s in studies] == [study_name]
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)
