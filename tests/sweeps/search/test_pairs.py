"""The pairs of features that must compose, each run by the launcher on the shared local Ray, real
Optuna; W&B off for the multi-objective pair, offline for the teacher pairs (where a student's run
names its teacher's):

- fused groups x multi-objective search: a unit's samples asked of Optuna together, trained as
  one group behind the unit's baseline model, each told its own vector and constraints;
- teachers x resume x fused groups: fused teachers fail (the spec's chaos block), their students
  fail with their teacher's reason; the cause removed, ``--resume`` trains the teachers as one
  group, and is Ctrl-C'd the moment both have ended while their students wait; ``--resume``
  again trains the students as another group, no teacher twice, each student taught by its own
  seed's teacher (its checkpoint and its W&B run name that teacher's);
- fused groups x warm start, teachers x warm start: that sweep over four seeds, warm-started from
  it, reuses the first two seeds' teachers and students (a student whose teacher is reused is
  reused too; they fuse with nobody) and trains the other two seeds' as fused groups.

The teacher pairs share one module run of four launches (each launch costs seconds of process
starts on two cores); each test reads the launches it is about. (The searcher's holding back of
students, without Ray: test_teacher_sweep.py.)

(Fused groups x ASHA: the ASHA study of tests/sweeps/stages/test_train.py, whose samples train as
one group; x configurations over seeds: tests/sweeps/trial/fused/; multi-objective x configurations
over seeds: test_moo_configs.py; the searcher's side of each pair without Ray: test_compose.py.)"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pandas as pd
import pytest
import torch

ray = pytest.importorskip("ray")

from sweep_helpers import tiny_spec, wandb_read, wandb_run_record, write_spec  # noqa: E402

from sweeps.integrations.wandb_runs import read_records, run_log, summary_values  # noqa: E402
from sweeps.launch import main  # noqa: E402
from sweeps.plan.warm_start import PLAN_HASH, plan_warm_start  # noqa: E402
from sweeps.spec import load_spec  # noqa: E402

BAHDANAU = {"attention": "bahdanau"}
#: the tests that read the teacher launches run in one worker: one worker runs the launches once
ON_TEACHERS = pytest.mark.xdist_group("teacher-pairs")
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
    """The trial's reports to Tune, oldest first; none for a trial that never started."""
    found = [d / "result.json" for d in exp.iterdir() if d.name.startswith(trial_id + "_")]
    text = found[0].read_text() if found and found[0].exists() else ""
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def teacher_spec(name: str, **over) -> dict:
    """A teacher cell (bahdanau) and its student (memory K=4, distilled and started from its
    encoder) over ``seeds``, W&B offline without the attention heatmaps (none of these tests reads
    them; a fused member's are read in the ASHA study of tests/sweeps/stages/test_train.py, and
    drawing them took about a second per member in the group's process)."""
    base = {
        "grid": {"model": [BAHDANAU, STUDENT]},
        "wandb": {"mode": "offline", "project": "test", "log_heatmaps": False},
    }
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
    # marked in results.csv, and so never its cell's chosen model (the members are)
    assert (
        baseline["baseline"].astype(str).tolist() == ["True"] and members["baseline"].isna().all()
    )
    if "chosen" in df:
        assert not baseline["chosen"].astype(str).eq("True").any()
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


@pytest.fixture(scope="module")
def teacher_runs(local_ray, tmp_path_factory) -> dict:
    """Four launches of a teacher (bahdanau) and its student over seeds 0 and 1: with the
    teachers failing; resumed with the cause removed and Ctrl-C'd once both teachers have ended
    (tests/interrupt_hook.py); resumed again; then the sweep over seeds 0-3 warm-started from it.
    Each launch's exit status, results.csv, (the first) stderr, and what the hook saw."""
    tmp = tmp_path_factory.mktemp("teachers")
    runs: dict = {"tmp": tmp}
    failing = teacher_spec(
        "pairs",
        seeds=[0, 1],
        max_concurrent_trials=2,
        chaos={"fail_before_first_report": True},
        failure={"max_failures": 0},
    )
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        runs["failed"] = launch(tmp, failing)
    runs["failed_rows"], runs["failed_err"] = rows(tmp, "pairs"), err.getvalue()
    found = sorted((tmp / "out" / "pairs" / "wandb").glob("offline-run-*"))
    runs["failed_wandb"] = {d.name.rsplit("-", 1)[-1]: wandb_read(d) for d in found}
    fixed = teacher_spec("pairs", seeds=[0, 1], max_concurrent_trials=2)
    record = tmp / "interrupted.json"
    with pytest.MonkeyPatch.context() as hooked:
        hooked.setenv("RAY_TUNE_CALLBACKS", "interrupt_hook.InterruptOnComplete")
        hooked.setenv("INTERRUPT_ON_COMPLETE", "attention=bahdanau")
        hooked.setenv("INTERRUPT_ON_COMPLETE_COUNT", "2")
        hooked.setenv("INTERRUPT_RECORD", str(record))
        runs["interrupted"] = launch(tmp, fixed, "out", "--resume")
    runs["seen"] = json.loads(record.read_text()) if record.exists() else None
    runs["interrupted_rows"] = rows(tmp, "pairs")
    exp = tmp / "out" / "pairs"
    runs["interrupted_md"] = (exp / "results.md").read_text()
    students = runs["interrupted_rows"].query("attention == 'memory'")["trial_id"]
    runs["student_steps"] = {
        t: [r["step"] for r in reports(exp, t) if r["step"] > 0] for t in students
    }
    runs["teacher_logs"] = {
        d.name: (d / "result.json").read_text()
        for d in exp.iterdir()
        if "attention=bahdanau" in d.name and (d / "result.json").exists()
    }
    runs["fixed"] = launch(tmp, fixed, "out", "--resume")
    runs["fixed_rows"] = rows(tmp, "pairs")
    more = teacher_spec(
        "pairs", seeds=[0, 1, 2, 3], max_concurrent_trials=2, warm_start=str(tmp / "out" / "pairs")
    )
    runs["warm"] = launch(tmp, more, "o2")
    runs["warm_rows"] = rows(tmp, "pairs", "o2")
    return runs


@ON_TEACHERS
def test_a_failed_teacher_fails_its_students_with_the_reason(teacher_runs):
    assert teacher_runs["failed"] == 1
    df = teacher_runs["failed_rows"]
    assert (df["status"] == "error").all() and len(df) == 4
    for seed in (0, 1):
        teacher = df[(df["attention"] == "bahdanau") & (df["seed"] == seed)].iloc[0]
        student = df[(df["attention"] == "memory") & (df["seed"] == seed)].iloc[0]
        assert "chaos: injected failure before the first report" in teacher["error"]
        assert student["teacher"] == teacher["trial_id"]
        assert student["error"].startswith(
            f"its teacher (attention=bahdanau seed={seed}) failed: trial {teacher['trial_id']}: "
        )
        assert "chaos: injected failure" in student["error"] and "\n" not in student["error"]
    assert "its teacher" in teacher_runs["failed_err"]
    # none opened a W&B run before it failed: the launcher opened one for each, which says what
    # results.csv says (state failed, its status and error, its config as a trial makes it)
    runs = teacher_runs["failed_wandb"]
    assert set(runs) == set(df["trial_id"]), sorted(runs)
    for row in df.to_dict("records"):
        run = runs[row["trial_id"]]
        assert run["state"] == "failed", run["state"]
        assert run["summary"]["status"] == "error" and run["summary"]["error"] == row["error"]
        assert run["config"]["attention"] == row["attention"]
        assert run["config"]["seed"] == row["seed"] and run["config"]["trial_id"] == row["trial_id"]


@ON_TEACHERS
def test_a_stop_while_the_students_wait_then_resume_trains_no_teacher_twice(teacher_runs):
    """Ctrl-C the moment both fused teachers have ended: no student had started (they wait); the
    teachers are done. The next ``--resume`` leaves every teacher's records as they were (none
    trained twice) and trains the students only."""
    assert teacher_runs["interrupted"] == 130
    seen, df = teacher_runs["seen"], teacher_runs["interrupted_rows"]
    teachers = set(df[df["attention"] == "bahdanau"]["trial_id"])
    assert seen is not None and seen["finished"] in teachers
    # the hook runs as Tune takes in the second teacher's end: the first has ended, the students
    # wait (held back, never started)
    (other,) = teachers - {seen["finished"]}
    assert seen["status"][other] == "TERMINATED", seen
    assert set(seen["trials"]) - teachers == set(df[df["attention"] == "memory"]["trial_id"])
    assert not {seen["status"][t] for t in set(seen["trials"]) - teachers} & {
        "RUNNING",
        "TERMINATED",
    }, seen
    assert teacher_runs["student_steps"] and not any(teacher_runs["student_steps"].values()), (
        "a student trained a step before its teachers' stop"
    )
    assert (df[df["attention"] == "bahdanau"]["status"] == "done").all()
    # the students wait to run again: unfinished, not failed (their teacher's failure in the first
    # launch is no longer their outcome)
    held = df[df["attention"] == "memory"]
    assert (held["status"] == "unfinished").all() and held["error"].isna().all(), held
    assert "## Failed trials" not in teacher_runs["interrupted_md"]
    assert teacher_runs["fixed"] == 0
    exp = teacher_runs["tmp"] / "out" / "pairs"
    assert len(teacher_runs["teacher_logs"]) == 2
    for name, log in teacher_runs["teacher_logs"].items():
        assert (exp / name / "result.json").read_text() == log, f"{name} trained again"
    trained = [d for d in exp.iterdir() if d.is_dir() and (d / "result.json").exists()]
    assert len(trained) == 4, "two teachers, two students, each trained once"


@ON_TEACHERS
def test_fixed_on_resume_the_teachers_fuse_and_their_students_wait_for_them(teacher_runs):
    """The resumes train the teachers as one fused group and the students as another, which
    starts after both teachers ended, each member taught by its own seed's teacher (the fused
    model's teacher pass: each student's checkpoint names its own teacher's; its W&B run names
    its teacher's run: config, tags, notes)."""
    assert teacher_runs["fixed"] == 0
    df = teacher_runs["fixed_rows"]
    exp = teacher_runs["tmp"] / "out" / "pairs"
    teachers, students = df[df["attention"] == "bahdanau"], df[df["attention"] == "memory"]
    assert (df["status"] == "done").all(), df[["attention", "status", "error"]]
    assert len(teachers) == len(students) == 2 and df["error"].isna().all()
    assert teachers["fused_with"].nunique() == 1 and teachers["fused_with"].notna().all()
    assert students["fused_with"].nunique() == 1 and students["fused_with"].notna().all()
    assert set(teachers["fused_with"]) != set(students["fused_with"]), "apart from the teachers"
    ended = max(reports(exp, t)[-1]["timestamp"] for t in teachers["trial_id"])
    for seed in (0, 1):
        teacher = teachers[teachers["seed"] == seed].iloc[0]
        student = students[students["seed"] == seed].iloc[0]
        assert student["teacher"] == teacher["trial_id"], "each student its own seed's teacher"
        trained = [r for r in reports(exp, student["trial_id"]) if r["step"] > 0]
        assert trained[-1]["step"] == 20, (
            "it trained, from its first step (its failed try left none)"
        )
        assert trained[0]["timestamp"] >= ended
        # its distillation term is a results.csv column, as Tune's last report (and W&B) has it
        assert student["train/distill"] == pytest.approx(trained[-1]["train/distill"], rel=1e-9)
        assert student["train/distill"] > 0 and pd.isna(teacher["train/distill"])
        hparams = torch.load(student["checkpoint"], map_location="cpu", weights_only=False)[
            "hyper_parameters"
        ]
        assert hparams["teacher_checkpoint"] == teacher["checkpoint"]
        assert hparams["distill_weight"] == 1.0 and Path(teacher["checkpoint"]).is_file()
        (run,) = sorted((exp / "wandb").glob(f"offline-run-*-{student['trial_id']}"))[-1:]
        # the run the launcher opened for its failed first try holds that try's error; the
        # folder that trained it clears it (one W&B run once uploaded): its summary is the row's
        # (W&B's reader leaves a null out: the run's own records hold it)
        summary = wandb_read(run)["summary"]
        assert summary["status"] == "done" and summary.get("error") is None
        assert summary_values(read_records(run_log(run)))["error"] == "null"
        record = wandb_run_record(run)
        assert record["config"]["update"]["teacher"] == teacher["trial_id"]
        assert record["config"]["update"]["teacher_checkpoint"] == teacher["checkpoint"]
        assert f"teacher:{teacher['trial_id']}" in record["tags"]
        assert record["notes"].startswith(f"Taught by W&B run {teacher['trial_id']} (checkpoint ")


@ON_TEACHERS
def test_a_warm_start_reuses_teachers_and_their_students_and_fuses_the_rest(teacher_runs):
    assert teacher_runs["warm"] == 0
    earlier, df = teacher_runs["fixed_rows"], teacher_runs["warm_rows"]
    reused, trained = df[df["reused"].notna()], df[df["reused"].isna()]
    assert sorted(reused["trial_id"]) == sorted(earlier["trial_id"])
    assert sorted(reused["seed"]) == [0, 0, 1, 1] and sorted(trained["seed"]) == [2, 2, 3, 3]
    for seed in (0, 1):
        student = reused[(reused["attention"] == "memory") & (reused["seed"] == seed)].iloc[0]
        teacher = reused[(reused["attention"] == "bahdanau") & (reused["seed"] == seed)].iloc[0]
        assert student["teacher"] == teacher["trial_id"], "a reused student keeps its teacher"
    before = earlier.set_index("trial_id")["fused_with"]
    assert reused.set_index("trial_id")["fused_with"].equals(before[reused["trial_id"]]), (
        "a reused row keeps the group it trained in"
    )
    assert (trained["status"] == "done").all() and trained["fused_with"].notna().all()
    for attention in ("bahdanau", "memory"):
        assert trained[trained["attention"] == attention]["fused_with"].nunique() == 1
    assert not set(trained["fused_with"]) & set(reused["fused_with"]), (
        "reused trials fuse with nobody, and the new groups take names of their own"
    )
    assert df["fused_with"].nunique() == 4
    exp = teacher_runs["tmp"] / "o2" / "pairs"
    assert len(list(exp.glob("*/result.json"))) == 4, "the reused trials did not train again"


@ON_TEACHERS
def test_a_changed_teacher_retrains_its_student(teacher_runs, tmp_path):
    """A student's fingerprint names its teacher's: the teacher's model changed (its dropout),
    neither it nor its student is the same training."""
    changed = teacher_spec(
        "pairs",
        grid={"model": [{**BAHDANAU, "dropout": 0.3}, {**STUDENT, "teacher": {"cell": BAHDANAU}}]},
        seeds=[0, 1],
        warm_start=str(teacher_runs["tmp"] / "out" / "pairs"),
    )
    assert plan_warm_start(load_spec(write_spec(tmp_path, changed))).reused_count == 0
    assert teacher_runs["fixed_rows"][PLAN_HASH].nunique() == 4
