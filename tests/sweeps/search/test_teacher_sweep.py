"""Dependent trials on a real local Ray, real Optuna-free searcher and W&B offline: a teacher
cell and its student in one Tune run; the launcher Ctrl-C'd the moment the teacher ends while
its student waits, then resumed: no teacher is trained twice, the student trains with the
teacher checkpoint its row names, and its W&B run names the teacher's run. The searcher's
holding back, without Ray, first. (A failed teacher and its students: test_pairs.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

ray = pytest.importorskip("ray")

from sweep_helpers import tiny_spec, write_spec  # noqa: E402

from sweeps.launch import main  # noqa: E402
from sweeps.plan.units import Unit  # noqa: E402
from sweeps.search.compose import per_unit_searcher  # noqa: E402
from sweeps.search.teachers import TeacherBook  # noqa: E402

BAHDANAU = "attention=bahdanau"
STUDENT = {
    "attention": "memory",
    "K": 4,
    "distill_weight": 1.0,
    "init_from_teacher": "encoder",
    "teacher": {"cell": {"attention": "bahdanau"}},
}


def teacher_spec(name: str, teacher: dict | None = None, **over) -> dict:
    return tiny_spec(
        name,
        grid={"model": [teacher or {"attention": "bahdanau"}, STUDENT]},
        **over,
    )


# -- the searcher, without Ray's run ------------------------------------------------------------


def test_the_searcher_withholds_students_until_their_teacher_ends():
    units = [
        Unit("s/t", 0, 0, {"cell": "T", "seed": 0}),
        Unit("s/a", 1, 0, {"cell": "A", "seed": 0}),
        Unit("s/s", 2, 0, {"cell": "S", "seed": 0}, teacher=0),
    ]
    searcher = per_unit_searcher(units, num_samples=2, metric="val/bleu", mode="max")
    first = [searcher.suggest(f"t{i}") for i in range(2)]
    assert [c["cell"] for c in first] == ["T", "T"], "the teacher's trials start first"
    assert searcher.suggest("a0")["cell"] == "A" and searcher.suggest("a1")["cell"] == "A"
    assert searcher.suggest("x") is None, "the student waits: nothing now, not finished"
    searcher.teachers.checkpoints.update({"t0": "/c/t0.ckpt", "t1": "/c/t1.ckpt"})
    searcher.on_trial_complete("t0", {"val/bleu": 50.0})
    assert searcher.suggest("x") is None, "one of the teacher's two trials is still running"
    searcher.on_trial_complete("t1", {"val/bleu": 70.0})
    student = searcher.suggest("s0")
    assert student["cell"] == "S"
    assert (student["teacher"], student["teacher_checkpoint"]) == ("t1", "/c/t1.ckpt")

    # a teacher unit whose trials all failed: the student gets the reason instead
    failed = per_unit_searcher(units, num_samples=1, metric="val/bleu", mode="max")
    failed.suggest("t0")
    failed.teachers.errors["t0"] = "ValueError: out of memory"
    failed.on_trial_complete("t0", error=True)
    failed.suggest("a0")
    config = failed.suggest("s0")
    assert (
        config["teacher_error"]
        == "its teacher (T seed=0) failed: trial t0: ValueError: out of memory"
    )
    assert failed.suggest("x") is ray.tune.search.Searcher.FINISHED


def test_a_students_optuna_trial_names_its_teacher(tmp_path):
    import optuna

    units = [
        Unit("s/t", 0, 0, {"cell": "T", "seed": 0}),
        Unit("s/s", 1, 0, {"cell": "S", "seed": 0}, teacher=0),
    ]
    space = {"lr": optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True)}
    journal = str(tmp_path / "optuna.journal")
    searcher = per_unit_searcher(units, 1, "val/bleu", "max", space=space, journal=journal)
    searcher.suggest("t0")
    searcher.teachers.checkpoints["t0"] = "/c/t0.ckpt"
    searcher.on_trial_complete("t0", {"val/bleu": 60.0, "step": 10})
    assert searcher.suggest("s0")["teacher"] == "t0"
    (student,) = searcher.scope.study(1).trials
    assert student.user_attrs["teacher"] == "t0"
    assert student.user_attrs["teacher_checkpoint"] == "/c/t0.ckpt"


def test_reused_teacher_rows_teach():
    book = TeacherBook([None, 0], ["T seed=0", "S seed=0"], 1, "val/bleu", "max")
    assert book.waiting(1)
    book.adopt({0: [{"trial_id": "old1", "val/bleu": 90.0, "checkpoint": "/old/c.ckpt"}]})
    assert not book.waiting(1)
    assert book.assignment(1) == {"teacher": "old1", "teacher_checkpoint": "/old/c.ckpt"}


# -- the launcher --------------------------------------------------------------------------------


def _wandb_run_record(run: Path) -> dict:
    """The run record of an offline W&B run (config, tags, notes), as W&B's own reader prints it."""
    shown = subprocess.run(
        [str(Path(sys.executable).parent / "wandb"), "leet", "inspect", "--json", str(run)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    records = [json.loads(line) for line in shown.stdout.splitlines() if line.strip()]
    return next(r["run"] for r in records if r.get("type") == "run")


def test_kill_while_the_student_waits_then_resume_trains_no_teacher_twice(
    local_ray, tmp_path, monkeypatch, capsys
):
    out = tmp_path / "out"
    args = [
        str(write_spec(tmp_path, teacher_spec("teach"))),
        "--output",
        str(out),
        "--verbose",
        "0",
    ]
    exp = out / "teach"
    record = tmp_path / "interrupted.json"
    with monkeypatch.context() as hooked:
        hooked.setenv("RAY_TUNE_CALLBACKS", "interrupt_hook.InterruptOnComplete")
        hooked.setenv("INTERRUPT_ON_COMPLETE", BAHDANAU)
        hooked.setenv("INTERRUPT_RECORD", str(record))
        assert main(args) == 130
    seen = json.loads(record.read_text())
    assert seen["trials"] == [seen["finished"]], "the student had not started: it waited"
    (teacher_dir,) = [d for d in exp.iterdir() if d.is_dir() and BAHDANAU in d.name]
    teacher_log = (teacher_dir / "result.json").read_text()
    df = pd.read_csv(exp / "results.csv", dtype={"trial_id": str, "teacher": str})
    assert sorted(df["status"]) == ["done", "unfinished"]
    capsys.readouterr()

    assert main(args + ["--resume"]) == 0
    assert (teacher_dir / "result.json").read_text() == teacher_log, "the teacher trained again"
    trial_dirs = [d for d in exp.iterdir() if d.is_dir() and (d / "result.json").exists()]
    assert len(trial_dirs) == 2 and sum(BAHDANAU in d.name for d in trial_dirs) == 1
    df = pd.read_csv(exp / "results.csv", dtype={"trial_id": str, "teacher": str})
    assert (df["status"] == "done").all()
    teacher = df[df["attention"] == "bahdanau"].iloc[0]
    student = df[df["attention"] == "memory"].iloc[0]
    assert pd.isna(teacher["teacher"]) and student["teacher"] == teacher["trial_id"]
    # the checkpoint the student's plan used (its model's hyperparameters) is the one its row names
    hparams = torch.load(student["checkpoint"], map_location="cpu", weights_only=False)[
        "hyper_parameters"
    ]
    assert hparams["teacher_checkpoint"] == teacher["checkpoint"]
    assert hparams["distill_weight"] == 1.0 and Path(teacher["checkpoint"]).is_file()
    # the student's W&B run names its teacher's run (config, tags, notes)
    (run,) = sorted((exp / "wandb").glob(f"offline-run-*-{student['trial_id']}"))
    record = _wandb_run_record(run)
    assert record["config"]["update"]["teacher"] == teacher["trial_id"]
    assert record["config"]["update"]["teacher_checkpoint"] == teacher["checkpoint"]
    assert f"teacher:{teacher['trial_id']}" in record["tags"]
    assert record["notes"].startswith(f"Taught by W&B run {teacher['trial_id']} (checkpoint ")
