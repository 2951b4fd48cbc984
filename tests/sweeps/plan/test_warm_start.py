"""Warm start from an earlier sweep: which planned trials an earlier results.csv holds
already (same resolved plan, seed and code), how the counts read at --dry-run, the errors, and the
earlier Optuna trials told to a new study. Real Optuna journals; no Ray. The launcher's run of a
study with one more length is the slow test at the end."""

from __future__ import annotations

import copy
import shutil
import zipfile
from pathlib import Path

import pandas as pd
import pytest
from sweep_helpers import tiny_spec, write_spec

from sweeps.errors import SpecError
from sweeps.plan.warm_start import (
    PLAN_HASH,
    fingerprint_rows,
    plan_fingerprint,
    plan_warm_start,
    stop_rules,
)
from sweeps.search.warm_start import tell_earlier
from sweeps.spec import load_spec

#: the earlier sweep of the warm-start launches below: one cell, two Optuna samples of lr
ONE_CELL = dict(
    grid={"task.max_length": [4], "model": [{"attention": "none"}]},
    parameters={"model.lr": {"min": 1e-4, "max": 3e-2, "distribution": "log_uniform_values"}},
    num_samples=2,
)


def launch_one_more_length(
    tmp_path: Path, name: str, **over
) -> tuple[Path, list[str], pd.DataFrame]:
    """The one-cell sweep ``name`` (:data:`ONE_CELL` with ``over``), then the same with length 6
    added, warm-started from it: the second sweep's folder, the trial folders it trained, its
    results.csv."""
    from sweeps.launch import main

    base = copy.deepcopy({**ONE_CELL, **over})  # the second sweep's grid changes below
    one = tmp_path / "one"
    one.mkdir()
    first = [str(write_spec(one, tiny_spec(name, **base))), "--output", str(tmp_path / "o1")]
    assert main([*first, "--verbose", "0"]) == 0
    more = tiny_spec(name, **base, warm_start=str(tmp_path / "o1" / name))
    more["grid"]["task.max_length"] = [4, 6]
    second = [str(write_spec(tmp_path, more)), "--output", str(tmp_path / "o2"), "--verbose", "0"]
    assert main(second) == 0
    out = tmp_path / "o2" / name
    trained = sorted(d.name for d in out.iterdir() if d.is_dir() and (d / "result.json").exists())
    return out, trained, pd.read_csv(out / "results.csv", dtype={"trial_id": str})


def _checkpoint(path: Path) -> None:
    """A stand-in for a model file, whole as torch writes one: a zip archive."""
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", b"a checkpoint")


def _earlier(tmp_path: Path, sweep, keep: int, statuses: tuple[str, ...] = ()) -> Path:
    """An earlier sweep's folder whose results.csv holds the first ``keep`` plans as finished
    (``statuses``: theirs, in order; else done), fingerprinted as that sweep's launch does."""
    folder = tmp_path / "earlier" / sweep.name
    folder.mkdir(parents=True)
    rows = [
        {
            "trial_id": f"old{i}",
            "cell": p.cell.name,
            "seed": p.seed,
            "status": statuses[i] if statuses else "done",
            "val/bleu": 10.0 + i,
            "checkpoint": str(folder / f"old{i}" / "checkpoint.ckpt"),
        }
        for i, p in enumerate(sweep.plans[:keep])
    ]
    for row in rows:  # each trial's model, as its launch left it (torch writes a zip archive)
        Path(row["checkpoint"]).parent.mkdir()
        _checkpoint(Path(row["checkpoint"]))
    plans = {r["trial_id"]: (p, "") for r, p in zip(rows, sweep.plans, strict=False)}
    fingerprint_rows(rows, plans, [], stop_rules(sweep.spec))
    pd.DataFrame(rows).to_csv(folder / "results.csv", index=False)
    return folder


def test_the_code_a_fingerprint_covers_exists_and_holds_what_builds_a_trial():
    """Every folder and file the code version digests is there (a moved package would drop out of
    it unnoticed), the trial's builder among them."""
    from sweeps import build
    from sweeps.plan import warm_start

    root = Path(warm_start.__file__).resolve().parents[2]
    absent = [p for p in warm_start.CODE_PACKAGES if not (root / p).exists()]
    assert not absent, f"CODE_PACKAGES names what is not there: {absent}"
    assert str(Path(build.__file__).resolve().relative_to(root)) in warm_start.CODE_PACKAGES


def test_identical_plans_are_reused_and_changed_ones_are_not(tmp_path, capsys):
    grid = {"task.max_length": [4, 6], "model": [{"attention": "none"}]}
    first = load_spec(write_spec(tmp_path, tiny_spec("w", grid=grid)))
    folder = _earlier(tmp_path, first, keep=2)
    again = load_spec(write_spec(tmp_path, tiny_spec("w", grid=grid, warm_start=str(folder))))
    warm = plan_warm_start(again)
    assert warm.reused_count == 2 and sorted(warm.reused) == [0, 1]
    rows = warm.rows()
    assert {r["trial_id"] for r in rows} == {"old0", "old1"} and {r["reused"] for r in rows} == {
        str(folder)
    }
    assert rows[0]["checkpoint"] == str(folder / "old0" / "checkpoint.ckpt")  # linked, as it was
    # one more length: only the new cell's trial is left to train, and --dry-run says so
    more = tiny_spec(
        "w", grid={**grid, "task.max_length": [4, 6, 8]}, warm_start=str(folder / "results.csv")
    )
    from sweeps.launch import main

    assert (
        main([str(write_spec(tmp_path, more)), "--dry-run", "--output", str(tmp_path / "o")]) == 0
    )
    said = capsys.readouterr().out
    assert "2 trial(s) reused" in said and "3 grid points" in said
    # a longer training is another trial: nothing reused
    longer = tiny_spec(
        "w", grid=grid, warm_start=str(folder), trainer={"max_steps": 40, "val_check_interval": 10}
    )
    warm = plan_warm_start(load_spec(write_spec(tmp_path, longer)))
    assert warm.reused_count == 0
    # and the dry run's line says why none is (it said "0 trial(s) reused" and nothing more)
    assert warm.summary().endswith(
        "; none of its 2 finished row(s) has a plan of this sweep: a setting, a seed or the code "
        "differs (compare the two sweeps' launch.json)"
    )


def test_a_trial_that_ended_early_is_reused_only_under_the_same_rules_for_ending_early(tmp_path):
    """A trial ASHA stopped (or stop_when ended) is not the plan's whole training: a sweep with
    other rules for ending early trains it again; one that ran to its last step is reused."""
    grid = {"task.max_length": [4, 6, 8], "model": [{"attention": "none"}]}
    asha = {"type": "asha", "grace_period": 1, "reduction_factor": 2}
    first = load_spec(write_spec(tmp_path, tiny_spec("w", grid=grid, early_terminate=asha)))
    folder = _earlier(tmp_path, first, keep=3, statuses=("done", "stopped", "converged"))

    def reused(**over) -> list[str]:
        spec = load_spec(
            write_spec(tmp_path, tiny_spec("w", grid=grid, warm_start=str(folder), **over))
        )
        return sorted(r["trial_id"] for r in plan_warm_start(spec).rows())

    assert reused(early_terminate=asha) == ["old0", "old1", "old2"]
    assert reused() == ["old0"]  # no early termination: the stopped and converged train again
    assert reused(early_terminate={**asha, "grace_period": 2}) == ["old0"]
    stop = {"metric": "val/bleu", "at_least": 99.0}
    assert reused(early_terminate=asha, stop_when=stop) == ["old0"]


def test_a_resume_after_a_code_change_keeps_what_each_trial_trained_with(tmp_path):
    """A resume fingerprints each trial by the code that trained it (results.csv's code_version),
    not by today's: one its earlier run finished keeps the old code's fingerprint (a later warm
    start under the new code trains it again); one continued across the change, or whose record
    is lost or of an older version, matches no plan; one this run trained alone is the new code's.
    launch.json keeps the versions of the sweep's runs, and the resume says the change."""
    from sweeps.plan.warm_start import CODE_COLUMN, code_version
    from sweeps.spec.launch_record import code_versions, save_launch
    from sweeps.stages.setup import code_changed_line
    from sweeps.stages.train import earlier_rows

    grid = {"task.max_length": [4, 6, 8, 10, 12, 14], "model": [{"attention": "none"}]}
    sweep = load_spec(write_spec(tmp_path, tiny_spec("c", grid=grid)))
    a, b, c, d, e, f = sweep.plans[:6]
    now = code_version()
    out = tmp_path / "out"
    save_launch(out, [], None, code="old")
    old = plan_fingerprint(a, code="old")
    rows_before = [
        {"trial_id": "a", "status": "done", PLAN_HASH: old, CODE_COLUMN: "old", "step": 60},
        {"trial_id": "b", "status": "preempted", PLAN_HASH: "x", CODE_COLUMN: "old", "step": 20},
        # an older version's rows: no code_version column
        {"trial_id": "d", "status": "done", PLAN_HASH: "legacy", "step": 60},
        {"trial_id": "e", "status": "preempted", PLAN_HASH: "y", "step": 20},
    ]
    pd.DataFrame(rows_before).to_csv(out / "results.csv", index=False)
    assert code_changed_line(code_versions(out), now).startswith("note: the trials' code")
    assert code_changed_line(code_versions(out), "old") == ""
    save_launch(out, [], None, resume=True, code=now)
    assert code_versions(out) == ["old", now]
    rows = [{"trial_id": t, "seed": 0, "status": "done"} for t in "abcdef"]
    plans = {r["trial_id"]: (p, "") for r, p in zip(rows, (a, b, c, d, e, f))}
    reported = {"b", "c", "e"}  # this run trained b and e on, and c from the start
    fingerprint_rows(rows, plans, [], None, earlier_rows(out), code_versions(out), reported)
    by = {r["trial_id"]: r for r in rows}
    assert by["a"][PLAN_HASH] == old and by["a"][CODE_COLUMN] == "old"
    assert by["b"][CODE_COLUMN] == "+".join(sorted(["old", now]))
    assert by["b"][PLAN_HASH] not in (plan_fingerprint(b), plan_fingerprint(b, code="old"))
    assert by["c"][PLAN_HASH] == plan_fingerprint(c) and by["c"][CODE_COLUMN] == now
    assert by["d"][PLAN_HASH] == "legacy", "an older version's finished row, as it was"
    assert by["e"][CODE_COLUMN] == "+".join(sorted(["unknown", now]))
    # f: finished in a run killed before it wrote results.csv, under one of two versions
    assert by["f"][CODE_COLUMN] == "unknown" and by["f"][PLAN_HASH] != plan_fingerprint(f)
    # a sweep whose runs all ran this code: a trial without a record is this code's
    again = [{k: v for k, v in r.items() if k not in (PLAN_HASH, CODE_COLUMN)} for r in rows]
    fingerprint_rows(again, plans, [], None, {}, [now], set())
    assert again[5][PLAN_HASH] == plan_fingerprint(f)
    # a first run: every row is this code's
    first = [{k: v for k, v in r.items() if k not in (PLAN_HASH, CODE_COLUMN)} for r in rows]
    fingerprint_rows(first, plans, [])
    assert [r[PLAN_HASH] for r in first] == [plan_fingerprint(p) for p in (a, b, c, d, e, f)]


def test_a_resume_of_a_sweep_that_recorded_no_code_says_so(tmp_path):
    """A sweep made before code versions were recorded: its resume says the code may differ, and
    launch.json records that its earlier runs' code is unrecorded."""
    from sweeps.plan.warm_start import code_version
    from sweeps.spec.launch_record import code_versions, save_launch

    out = tmp_path / "out"
    out.mkdir()
    (out / "launch.json").write_text('{"overrides": [], "profile": null}\n')
    from sweeps.stages.setup import code_changed_line

    assert "made by a version that did not record it" in code_changed_line(
        ["unrecorded"], code_version()
    )
    save_launch(out, [], None, resume=True, code=code_version())
    assert code_versions(out) == ["unrecorded", code_version()]


def test_a_finished_trial_whose_checkpoint_is_gone_is_said_on_resume_with_the_launch_that_retrains_it(
    tmp_path,
):
    """A trial folder deleted to have it trained again: the resume does not train it (Tune counts
    it finished) and said "nothing to resume"; now it names the trial and the warm start that
    trains it again, which reuses the others (their checkpoints are there) and not it."""
    from sweeps.driver.resume_check import lost_finished_checkpoints
    from sweeps.layout import checkpoint_here

    grid = {"task.max_length": [4, 6], "model": [{"attention": "none"}]}
    sweep = load_spec(write_spec(tmp_path, tiny_spec("g", grid=grid)))
    folder = _earlier(tmp_path, sweep, keep=2)
    gone = folder / "old1" / "checkpoint.ckpt"
    gone.unlink()  # its trial folder deleted, to have it trained again
    line = lost_finished_checkpoints(folder, "g.yaml", "out")
    assert line.startswith("note: 1 finished trial(s) have lost their checkpoint file")
    assert f"old1 ({sweep.plans[1].cell.name} seed=0)" in line and "old0" not in line
    assert f"g.yaml --set warm_start={folder} --output <another folder>" in line
    # the first run's profile and --set come along: without them no plan would match
    (folder / "launch.json").write_text('{"overrides": ["seeds=[0]"], "profile": "cpu"}\n')
    line = lost_finished_checkpoints(folder, "g.yaml", "out")
    assert f"g.yaml --profile cpu --set 'seeds=[0]' --set warm_start={folder} --output" in line
    again = tiny_spec("g", grid=grid, warm_start=str(folder))
    warm = plan_warm_start(load_spec(write_spec(tmp_path, again)))
    assert sorted(r["trial_id"] for r in warm.rows()) == ["old0"]
    assert "1 earlier finished row(s) have lost their checkpoint file" in warm.summary()
    # a checkpoint cut short on disk (a full disk, a copy killed): said, and not reused either
    _checkpoint(gone)
    whole = (folder / "old0" / "checkpoint.ckpt").read_bytes()
    (folder / "old0" / "checkpoint.ckpt").write_bytes(whole[: len(whole) // 2])
    line = lost_finished_checkpoints(folder, "g.yaml", "out")
    assert "1 finished trial(s) have a damaged checkpoint file (cut short" in line, line
    assert "old0" in line and "old1" not in line and "lost their" not in line
    warm = plan_warm_start(load_spec(write_spec(tmp_path, again)))
    assert sorted(r["trial_id"] for r in warm.rows()) == ["old1"]
    assert "1 earlier finished row(s) have a damaged checkpoint file" in warm.summary()
    (folder / "old0" / "checkpoint.ckpt").write_bytes(whole)
    assert lost_finished_checkpoints(folder, "g.yaml", "out") == ""
    # a launch's relative path, read from another working folder: found under the sweep's folder
    assert checkpoint_here(f"sweep-results/{folder.name}/old1/checkpoint.ckpt", folder) is not None
    assert checkpoint_here(f"sweep-results/{folder.name}/old9/checkpoint.ckpt", folder) is None
    # a copy of the sweep folder (cp -r) whose checkpoint went: its results.csv still names the
    # original's file, which is there, but the copy is judged by its own files
    copied = tmp_path / "copy" / folder.name
    shutil.copytree(folder, copied)
    (copied / "old1" / "checkpoint.ckpt").unlink()
    line = lost_finished_checkpoints(copied, "g.yaml", "out")
    assert line.startswith("note: 1 finished trial(s) have lost their checkpoint file"), line
    assert "old1 (" in line and "old0" not in line
    assert checkpoint_here(str(folder / "old1" / "checkpoint.ckpt"), copied) is None
    assert checkpoint_here(str(folder / "old0" / "checkpoint.ckpt"), copied) == str(
        copied / "old0" / "checkpoint.ckpt"
    ), "the copy's own file, not the original's"


def test_a_student_is_reused_with_its_teacher_and_named_by_its_teachers_fingerprint(tmp_path):
    """A student's fingerprint names its teacher's, not the checkpoint path it was given (which
    a new plan cannot know): written teacher first whatever the rows' order, and reused when its
    teacher is; a student of another teacher than the one it would get now trains again."""
    student = {
        "attention": "memory",
        "K": 4,
        "distill_weight": 1.0,
        "teacher": {"cell": {"attention": "bahdanau"}},
    }
    grid = {"model": [{"attention": "bahdanau"}, student]}
    first = load_spec(write_spec(tmp_path, tiny_spec("t", grid=grid)))
    teacher_plan, student_plan = first.plans
    taught = student_plan.with_values(0, {"model.teacher_checkpoint": "/old/t.ckpt"}, {}, {})
    rows = [
        {"trial_id": "s", "cell": student_plan.cell.name, "seed": 0, "teacher": "t"},
        {"trial_id": "t", "cell": teacher_plan.cell.name, "seed": 0},
    ]
    fingerprint_rows(rows, {"s": (taught, ""), "t": (teacher_plan, "")}, [])
    assert rows[1][PLAN_HASH] == plan_fingerprint(teacher_plan)
    assert rows[0][PLAN_HASH] == plan_fingerprint(student_plan, rows[1][PLAN_HASH])
    assert rows[0][PLAN_HASH] == plan_fingerprint(taught, rows[1][PLAN_HASH]), "no path in it"
    folder = tmp_path / "earlier" / "t"
    folder.mkdir(parents=True)
    for row in rows:
        checkpoint = folder / f"{row['trial_id']}.ckpt"
        _checkpoint(checkpoint)
        row.update({"status": "done", "val/bleu": 50.0, "checkpoint": str(checkpoint)})
    pd.DataFrame(rows).to_csv(folder / "results.csv", index=False)
    again = load_spec(write_spec(tmp_path, tiny_spec("t", grid=grid, warm_start=str(folder))))
    warm = plan_warm_start(again)
    assert {i: [r["trial_id"] for r in rs] for i, rs in warm.reused.items()} == {0: ["t"], 1: ["s"]}
    # the teacher's checkpoint gone (its folder moved): it trains again, and so do its students
    # (they were counted reused, then failed for the missing file)
    (folder / "t.ckpt").unlink()
    assert plan_warm_start(again).reused == {}
    _checkpoint(folder / "t.ckpt")
    rows[0]["teacher"] = "another"
    pd.DataFrame(rows).to_csv(folder / "results.csv", index=False)
    assert sorted(plan_warm_start(again).reused) == [0]


def test_a_resume_keeps_the_warm_start_its_first_launch_recorded(tmp_path, capsys):
    """launch.json keeps what the first launch reused (its rows and counts, as they read back);
    a resume plans with it, and its spec loads though the earlier folder is gone."""
    from sweeps.spec.launch_record import recorded_warm_start, save_launch

    grid = {"task.max_length": [4, 6], "model": [{"attention": "none"}]}
    folder = _earlier(tmp_path, load_spec(write_spec(tmp_path, tiny_spec("w", grid=grid))), keep=2)
    path = write_spec(tmp_path, tiny_spec("w", grid=grid, warm_start=str(folder)))
    sweep = load_spec(path)
    warm = plan_warm_start(sweep)
    out = tmp_path / "o" / "w"
    save_launch(out, [], None, warm=warm.to_record())
    # a resume records it again as it was, whatever it is given
    save_launch(out, [], None, resume=True, warm={"folder": "elsewhere"})
    first = recorded_warm_start(out)
    assert first == warm.to_record()
    shutil.rmtree(folder)
    with pytest.raises(SpecError, match="is not an earlier sweep's output"):
        load_spec(path)
    resumed = load_spec(path, resumed=tmp_path / "o")
    kept = plan_warm_start(resumed, first)
    assert kept.reused == warm.reused and kept.reused_count == 2
    assert kept.rows() == warm.rows() and kept.summary() == warm.summary()
    # so do the launcher's look for trials stored elsewhere and the cluster job's MPS decision
    from sweeps.driver.mps import main as mps_main
    from sweeps.launch import stored_elsewhere

    assert stored_elsewhere(out, str(path)) is False
    assert mps_main(["plan", str(path), "--resume", "--output", str(tmp_path / "o")]) == 0
    assert "did not load" not in capsys.readouterr().out
    # a record edited out of shape is said, not a traceback
    from sweeps.errors import LaunchError

    for damaged in ({"reused": {}}, {**first, "reused": {"x": []}}, {**first, "configurations": 3}):
        with pytest.raises(LaunchError, match='remove its "warm_start" entry'):
            plan_warm_start(resumed, damaged)
    # a sweep of a version that recorded none keeps none: each resume plans it as before
    (out / "launch.json").write_text('{"overrides": [], "profile": null}')
    save_launch(out, [], None, resume=True, warm=warm.to_record())
    assert recorded_warm_start(out) is None


def test_an_earlier_sweep_whose_files_are_damaged_is_said_not_a_traceback(tmp_path, capsys):
    """An earlier results.csv emptied, garbled or without its columns, or a journal with a broken
    line (a killed run), stops the dry run with the file and the fix; it crashed in pandas or
    Optuna."""
    from sweeps.errors import LaunchError
    from sweeps.launch import main

    folder = tmp_path / "earlier" / "w"
    folder.mkdir(parents=True)
    spec = tiny_spec("w", warm_start=str(folder))
    for text, said in [
        ("", "cannot be read (No columns to parse from file)"),
        ('trial_id,cell\nx,"y\n', "cannot be read ("),
        ("trial_id,cell\nx,y\n", "has no status column"),
    ]:
        (folder / "results.csv").write_text(text)
        with pytest.raises(LaunchError, match="a --resume of that sweep writes it again") as exc:
            plan_warm_start(load_spec(write_spec(tmp_path, spec)))
        assert said in str(exc.value) and str(folder / "results.csv") in str(exc.value)
    (folder / "results.csv").unlink()
    (folder / "optuna.journal").write_text('{"op_code": 0}\nnot json\n')
    with_lr = tiny_spec(
        "w", warm_start=str(folder), **{k: ONE_CELL[k] for k in ("parameters", "num_samples")}
    )
    path = write_spec(tmp_path, with_lr)
    assert main([str(path), "--dry-run", "--output", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "line 2 is not one of Optuna's records" in err and "mends its journal" in err
    # a last record cut short (the earlier run killed while writing it) is one Optuna reads past
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    (folder / "optuna.journal").unlink()
    storage = JournalStorage(JournalFileBackend(str(folder / "optuna.journal")))
    study = optuna.create_study(study_name="w/any", storage=storage)
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=3)
    whole = (folder / "optuna.journal").read_bytes()
    (folder / "optuna.journal").write_bytes(whole[:-10])
    warm = plan_warm_start(load_spec(path))
    assert [len(t) for t in warm.told.values()] == [2]


def test_a_warm_start_that_is_no_sweep_output_fails_at_load(tmp_path):
    with pytest.raises(SpecError, match="warm_start: .* is not an earlier sweep's output"):
        load_spec(write_spec(tmp_path, tiny_spec("w", warm_start=str(tmp_path / "nothing"))))


def test_earlier_trials_are_told_when_they_fit_the_new_space(tmp_path):
    import optuna

    space = {"lr": optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True)}
    old = optuna.create_study(direction="maximize")
    for lr, value in ((1e-3, 5.0), (5e-3, 7.0), (5e-2, 9.0)):  # the last lies outside the new range
        old.add_trial(
            optuna.trial.create_trial(
                params={"lr": lr},
                distributions={"lr": optuna.distributions.FloatDistribution(1e-4, 1e-1, log=True)},
                value=value,
                intermediate_values={10: value / 2},
            )
        )
    new = optuna.create_study(direction="maximize")
    assert tell_earlier(new, old.trials, space, tmp_path) == 2
    assert [t.value for t in new.trials] == [5.0, 7.0] and new.best_trial.params == {"lr": 5e-3}
    assert new.trials[0].intermediate_values == {10: 2.5}
    assert new.trials[0].user_attrs["warm_start_from"] == str(tmp_path)


@pytest.mark.slow
def test_one_more_length_trains_only_the_new_cells(local_ray, tmp_path, capsys):
    """A finished study re-run with one more length and warm_start (about a minute here): only the
    new cell's trials have trial folders; results.csv has every cell, the earlier ones reused; the
    new Optuna studies of the earlier cells start with the earlier trials."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    out, trained, df = launch_one_more_length(tmp_path, "w")
    assert len(trained) == 2 and all("length=6" in name for name in trained)
    assert len(df) == 4 and (df["status"] == "done").all()
    assert (df["reused"].notna() == (df["length"] == 4)).all()
    # the reused rows' W&B runs are the first sweep's: the upload line names them too
    earlier = sorted((tmp_path / "o1" / "w" / "wandb").glob("offline-run-*"))
    assert len(earlier) == 2, earlier
    said = capsys.readouterr().out
    assert "2 W&B run(s) of the 2 reused row(s) are the earlier sweep's" in said
    assert all(str(run) in said for run in earlier)
    storage = JournalStorage(JournalFileBackend(str(out / "optuna.journal")))
    old = optuna.load_study(study_name="w/attention-none_length-4-seed0", storage=storage)
    assert len(old.trials) == 2 and all("warm_start_from" in t.user_attrs for t in old.trials)
    assert sorted(t.user_attrs["ray_trial_id"] for t in old.trials) == sorted(
        df[df["length"] == 4]["trial_id"]
    )
    # a resume keeps the trials the first launch reused, whatever the earlier folder holds now:
    # one of their checkpoints deleted (the resume wanted to train it, Tune's searcher would not:
    # every resume ended "interrupted"), then the folder moved (the resume was refused at load)
    from sweeps.launch import main

    spec = next(p for p in tmp_path.glob("*.yaml"))
    again = [str(spec), "--output", str(tmp_path / "o2"), "--resume", "--verbose", "0"]
    Path(df[df["length"] == 4]["checkpoint"].iloc[0]).unlink()
    assert main(again) == 0
    (tmp_path / "o1" / "w").rename(tmp_path / "o1" / "moved")
    assert main(again) == 0
    kept = pd.read_csv(out / "results.csv", dtype={"trial_id": str})
    assert sorted(kept["trial_id"]) == sorted(df["trial_id"])
    assert (kept["status"] == "done").all() and kept["reused"].notna().sum() == 2


@pytest.mark.slow
def test_configurations_over_seeds_are_reused_whole(local_ray, tmp_path):
    """The same with configurations judged over seeds (about a minute here): the earlier cell's
    configurations come back whole (both seeds, their numbers those of the told trials in the new
    cell study), only the new cell trains, and Optuna's new study holds them with their values."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    out, trained, df = launch_one_more_length(
        tmp_path, "c", seeds={"values": [0, 1], "per_configuration": True}
    )
    assert len(trained) == 4 and all("length=6" in name for name in trained)
    assert len(df) == 8 and (df["reused"].notna() == (df["length"] == 4)).all()
    storage = JournalStorage(JournalFileBackend(str(out / "optuna.journal")))
    study = optuna.load_study(study_name="c/attention-none_length-4", storage=storage)
    assert len(study.trials) == 2
    for t in study.trials:
        rows = df[(df["length"] == 4) & (df["configuration"] == t.number)]
        assert sorted(rows["seed"]) == [0, 1] and t.value == pytest.approx(rows["val/bleu"].mean())


def test_a_multi_objective_study_is_told_its_earlier_vectors_and_constraints(tmp_path):
    import optuna

    space = {"lr": optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True)}
    old = optuna.create_study(directions=["maximize", "minimize"])
    for lr, values in ((1e-3, [5.0, 0.3]), (5e-3, [7.0, 0.1])):
        old.add_trial(
            optuna.trial.create_trial(
                params={"lr": lr}, distributions=space, values=values, constraints={"mb": -1.0}
            )
        )
    new = optuna.create_study(directions=["maximize", "minimize"])
    assert tell_earlier(new, old.trials, space, tmp_path) == 2
    assert [t.values for t in new.trials] == [[5.0, 0.3], [7.0, 0.1]]
    assert new.trials[1].constraints == {"mb": -1.0}
    assert [t.number for t in new.best_trials] == [1]  # (7, 0.1) dominates (5, 0.3)
    # a study of one objective is not told two-valued results, nor the reverse
    assert tell_earlier(optuna.create_study(), old.trials, space, tmp_path) == 0


@pytest.mark.slow
def test_a_multi_objective_study_with_one_more_length_trains_only_the_new_cell(local_ray, tmp_path):
    """Warm start of the multi-objective searcher (about a minute here): the earlier cell's trials
    are reused (no trial folder), and its new study starts with the earlier two-valued trials."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    out, trained, df = launch_one_more_length(
        tmp_path,
        "m",
        objectives=[
            {"name": "val/bleu", "goal": "maximize"},
            {"name": "val/loss", "goal": "minimize"},
        ],
    )
    assert len(trained) == 2 and all("length=6" in name for name in trained)
    assert len(df) == 4 and (df["reused"].notna() == (df["length"] == 4)).all()
    storage = JournalStorage(JournalFileBackend(str(out / "optuna.journal")))
    old = optuna.load_study(study_name="m/attention-none_length-4-seed0", storage=storage)
    assert len(old.trials) == 2 and all(len(t.values) == 2 for t in old.trials)
    assert sorted(t.user_attrs["ray_trial_id"] for t in old.trials) == sorted(
        df[df["length"] == 4]["trial_id"]
    )
