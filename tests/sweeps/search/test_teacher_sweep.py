"""Dependent trials, the searcher's side without Ray's run: students withheld until their
teacher ends, then handed its best checkpoint (or its failure); a student's Optuna trial naming its
teacher; reused teacher rows teaching. The launcher end to end (fused teachers and students, a stop
while the students wait, resume, warm start): test_pairs.py."""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray")

from sweeps.plan.units import Unit  # noqa: E402
from sweeps.search.compose import per_unit_searcher  # noqa: E402
from sweeps.search.teachers import TeacherBook  # noqa: E402

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
