"""The pairs of features that must compose, each run by the launcher on the shared local Ray, real
Optuna, W&B off (its part is the same in every pair; the fused and teacher tests read it):

- fused groups x multi-objective search: a unit's samples asked of Optuna together, trained as
  one group behind the unit's baseline model, each told its own vector and constraints;
- fused groups x teachers: teachers fuse with teachers, their students (alone while the fused
  model has no teacher pass) wait for them;
- fused groups x warm start: reused trials fuse with nobody, the rest fuse;
- teachers x warm start: a student whose teacher is reused is reused too;
- teachers x resume: a teacher that failed and is fixed on ``--resume`` lets its student train.

(Fused groups x ASHA and x configurations over seeds: tests/sweeps/trial/fused/; multi-objective
x configurations over seeds: test_moo_configs.py; the searcher's side of each pair without Ray:
test_compose.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch

ray = pytest.importorskip("ray")

from sweep_helpers import tiny_spec, write_spec  # noqa: E402

from sweeps.launch import main  # noqa: E402
from sweeps.plan.warm import PLAN_HASH, plan_warm_start  # noqa: E402
from sweeps.spec import load_spec  # noqa: E402

BAHDANAU = {"attention": "bahdanau"}
STUDENT = {
    "attention": "memory",
    "K": 4,
    "distill_weight": 1.0,
    "init_from_teacher": "encoder",
    "teacher": {"cell": BAHDANAU},
}


def launch(tmp: Path, spec: dict, out: str = "out", *extra: str) -> int:
    path = write_spec(tmp, spec)
    return main([str(path), "--output", str(tmp / out), "--verbose", "0", *extra])


def rows(tmp: Path, name: str, out: str = "out") -> pd.DataFrame:
    df = pd.read_csv(
        tmp / out / name / "results.csv", dtype={"trial_id": str, "teacher": str, "fused_with": str}
    )
    return df.sort_values(["attention", "seed"]).reset_index(drop=True)


def reports(exp: Path, trial_id: str) -> list[dict]:
    (folder,) = [d for d in exp.iterdir() if d.name.startswith(trial_id + "_")]
    text = (folder / "result.json").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def teacher_spec(name: str, **over) -> dict:
    """A teacher cell (bahdanau) and its student (memory K=4, distilled and started from its
    encoder) over ``seeds``."""
    base = {"grid": {"model": [BAHDANAU, STUDENT]}, "wandb": {"mode": "disabled"}}
    return tiny_spec(name, **{**base, **over})


def test_fused_multi_objective_samples_are_asked_together_and_told_their_own_vectors(
    local_ray, tmp_path
):
    """One unit's three samples of lr, asked of Optuna together, train as one fused group after
    the unit's baseline (alone); the Pareto rung rule with ``promotion: immediate`` judges them;
    each member is its own Optuna trial with its own vector and constraints."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    spec = tiny_spec(
        "mofused",
        model={"preset": "tiny", "attention": "memory"},
        grid={"task.max_length": [4]},
        metric=None,
        objectives=[
            {"name": "val/bleu", "goal": "maximize"},
            {"name": "val/loss", "goal": "minimize"},
        ],
        constraints=[
            {"name": "val/loss", "max": 100.0},
            {"name": "val/bleu", "within": 100.0, "of": BAHDANAU},
        ],
        parameters={"model.lr": {"min": 1e-3, "max": 3e-2, "distribution": "log_uniform_values"}},
        num_samples=3,
        search={"sampler": "random", "seed": 0},
        early_terminate={"type": "pareto", "grace_period": 1, "promotion": "immediate"},
        trainer={"max_steps": 30, "val_check_interval": 10},
        wandb={"mode": "disabled"},
    )
    del spec["metric"]
    assert launch(tmp_path, spec) == 0
    out = tmp_path / "out" / "mofused"
    df = pd.read_csv(out / "results.csv", dtype={"trial_id": str, "fused_with": str})
    baseline = df[df["attention"] == "bahdanau"]
    members = df[df["attention"] == "memory"]
    assert len(baseline) == 1 and baseline["fused_with"].isna().all(), "the baseline trains alone"
    assert len(members) == 3 and (members["fused_with"] == "g1").all()
    first_member_report = min(reports(out, t)[0]["timestamp"] for t in members["trial_id"])
    assert reports(out, baseline["trial_id"].iloc[0])[-1]["timestamp"] <= first_member_report
    storage = JournalStorage(JournalFileBackend(str(out / "optuna.journal")))
    (name,) = optuna.get_all_study_names(storage)
    study = optuna.load_study(study_name=name, storage=storage)
    trials = {t.user_attrs["ray_trial_id"]: t for t in study.trials}
    assert set(trials) == set(members["trial_id"]), "one Optuna trial per member"
    asked = max(t.datetime_start for t in trials.values())
    assert asked < min(t.datetime_complete for t in trials.values()), "asked together"
    assert study.user_attrs["baseline"]["metrics"]["val/bleu"] is not None
    for row in members.to_dict("records"):
        t = trials[row["trial_id"]]
        assert t.user_attrs["fused_with"] == "g1" and t.params["lr"] == pytest.approx(
            row["param:model.lr"]
        )
        assert t.state.name in ("COMPLETE", "PRUNED")
        if t.state.name == "COMPLETE":
            assert t.values == pytest.approx([row["val/bleu"], row["val/loss"]])
            assert set(t.constraints) == {
                "val/loss <= 100",
                "val/bleu within 100 of attention=bahdanau",
            }


def test_teachers_fuse_with_teachers_and_their_students_wait_for_them(local_ray, tmp_path):
    """Two seeds: the teachers train as one fused group, the students as another, which starts
    after both teachers ended, each member taught by its own seed's teacher (the fused model's
    teacher pass: each student's checkpoint names its own teacher's)."""
    spec = teacher_spec("fuseteach", seeds=[0, 1], max_concurrent_trials=2)
    assert launch(tmp_path, spec) == 0
    df = rows(tmp_path, "fuseteach")
    exp = tmp_path / "out" / "fuseteach"
    teachers, students = df[df["attention"] == "bahdanau"], df[df["attention"] == "memory"]
    assert (df["status"] == "done").all() and len(teachers) == len(students) == 2
    assert (teachers["fused_with"] == "g1").all(), "the teachers fused"
    assert (students["fused_with"] == "g2").all(), "the students fused, apart from the teachers"
    ended = max(reports(exp, t)[-1]["timestamp"] for t in teachers["trial_id"])
    for seed in (0, 1):
        teacher = teachers[teachers["seed"] == seed].iloc[0]
        student = students[students["seed"] == seed].iloc[0]
        assert student["teacher"] == teacher["trial_id"], "each student its own seed's teacher"
        assert reports(exp, student["trial_id"])[0]["timestamp"] >= ended
        hparams = torch.load(student["checkpoint"], map_location="cpu", weights_only=False)[
            "hyper_parameters"
        ]
        assert hparams["teacher_checkpoint"] == teacher["checkpoint"]


def test_a_warm_start_reuses_its_trials_alone_and_fuses_the_rest(local_ray, tmp_path):
    """Two seeds trained; the same sweep over four seeds warm-started from it reuses the first
    two (they fuse with nobody) and trains the other two as one fused group."""
    base = {"grid": {"model": [{"attention": "memory", "K": 4}]}, "wandb": {"mode": "disabled"}}
    assert launch(tmp_path, tiny_spec("warmfuse", **base, seeds=[0, 1]), "o1") == 0
    earlier = rows(tmp_path, "warmfuse", "o1")
    more = tiny_spec(
        "warmfuse", **base, seeds=[0, 1, 2, 3], warm_start=str(tmp_path / "o1" / "warmfuse")
    )
    assert launch(tmp_path, more, "o2") == 0
    df = rows(tmp_path, "warmfuse", "o2")
    reused, trained = df[df["reused"].notna()], df[df["reused"].isna()]
    assert sorted(reused["trial_id"]) == sorted(earlier["trial_id"])
    assert reused["seed"].tolist() == [0, 1] and trained["seed"].tolist() == [2, 3]
    assert (trained["fused_with"] == "g1").all() and (trained["status"] == "done").all()
    exp = tmp_path / "o2" / "warmfuse"
    trained_here = [d for d in exp.iterdir() if (d / "result.json").exists()]
    assert len(trained_here) == 2, "the reused trials did not train again"


def test_a_student_whose_teacher_is_reused_is_reused_too(local_ray, tmp_path):
    """The teacher sweep, then the same sweep warm-started from it: the teacher and its student
    are both reused, nothing trains. A student's fingerprint names its teacher's, so a changed
    teacher retrains its student."""
    assert launch(tmp_path, teacher_spec("warmteach"), "o1") == 0
    earlier = rows(tmp_path, "warmteach", "o1")
    again = teacher_spec("warmteach", warm_start=str(tmp_path / "o1" / "warmteach"))
    assert launch(tmp_path, again, "o2") == 0
    df = rows(tmp_path, "warmteach", "o2")
    assert df["reused"].notna().all() and len(df) == 2
    assert sorted(df["trial_id"]) == sorted(earlier["trial_id"])
    student = df[df["attention"] == "memory"].iloc[0]
    assert student["teacher"] == df[df["attention"] == "bahdanau"].iloc[0]["trial_id"]
    assert not [d for d in (tmp_path / "o2" / "warmteach").glob("*/result.json")], "none trained"
    # the teacher's model changed (its dropout): neither it nor its student is the same training
    changed = teacher_spec(
        "warmteach",
        grid={"model": [{**BAHDANAU, "dropout": 0.3}, {**STUDENT, "teacher": {"cell": BAHDANAU}}]},
        warm_start=str(tmp_path / "o1" / "warmteach"),
    )
    assert plan_warm_start(load_spec(write_spec(tmp_path, changed))).reused_count == 0
    assert earlier[PLAN_HASH].nunique() == 2


def test_a_teacher_that_failed_and_is_fixed_on_resume_lets_its_student_train(local_ray, tmp_path):
    """The teacher fails (the spec's chaos block) and its student fails for want of it; the cause
    removed, ``--resume`` runs the teacher again, and the student, held until it has ended, trains
    with its checkpoint."""
    failing = teacher_spec(
        "fixteach", chaos={"fail_before_first_report": True}, failure={"max_failures": 0}
    )
    assert launch(tmp_path, failing) == 1
    df = rows(tmp_path, "fixteach")
    assert (df["status"] == "error").all()
    student = df[df["attention"] == "memory"].iloc[0]
    assert student["error"].startswith("its teacher (attention=bahdanau seed=0) failed: trial ")
    fixed = teacher_spec("fixteach", failure={"max_failures": 0})
    assert launch(tmp_path, fixed, "out", "--resume") == 0
    df = rows(tmp_path, "fixteach")
    assert (df["status"] == "done").all(), df[["attention", "status", "error"]]
    teacher = df[df["attention"] == "bahdanau"].iloc[0]
    student = df[df["attention"] == "memory"].iloc[0]
    assert student["teacher"] == teacher["trial_id"] and pd.isna(student["error"])
    exp = tmp_path / "out" / "fixteach"
    trained = [r for r in reports(exp, student["trial_id"]) if r["step"] > 0]
    assert trained[-1]["step"] == 20, "it trained, from its first step (its failed try left none)"
    assert trained[0]["timestamp"] >= reports(exp, teacher["trial_id"])[-1]["timestamp"]
    hparams = torch.load(student["checkpoint"], map_location="cpu", weights_only=False)[
        "hyper_parameters"
    ]
    assert hparams["teacher_checkpoint"] == teacher["checkpoint"]
