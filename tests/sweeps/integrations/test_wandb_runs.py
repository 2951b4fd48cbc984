"""W&B offline runs read and amended with wandb's own tools: the transaction-log framing, the
timing stage's summary written into a finished run, incomplete runs kept out of the upload command."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("wandb")

from sweeps.integrations.wandb_env import wandb_sync_hint  # noqa: E402
from sweeps.integrations.wandb_runs import (  # noqa: E402
    BLOCK,
    RunLogError,
    add_offline_summary,
    add_run_summary,
    close_cut_run,
    read_chunks,
    read_records,
    run_log,
    run_problem,
    write_chunks,
)
from sweeps.layout import wandb_command  # noqa: E402

WANDB = str(Path(sys.executable).parent / "wandb")


#: every real W&B run the module's tests use (its id: the steps it logs); 1,500 records of ~100
#: bytes: the long run's log spans several 32 KiB blocks, so records are split across them
RUNS = {
    "long0001": 1500,
    "short001": 3,
    "good0001": 3,
    "dead0001": 3,
    "ahead001": 3,
    "done0001": 3,
    "early001": 1,
    "good0002": 2,
    "sync0001": 2,
    "held0001": 2,
}


def make_offline_runs(root: Path, runs: dict[str, int]) -> dict[str, Path]:
    """Real offline runs written and finished by wandb, all in one process of their own (each
    fresh process costs seconds of imports), each run under a root folder of its own,
    ``root/<id>/wandb/offline-run-*-<id>``."""
    code = f"""
import os, wandb
for run_id, steps in {runs!r}.items():
    folder = os.path.join({str(root)!r}, run_id)
    os.makedirs(folder)
    run = wandb.init(project="t", id=run_id, dir=folder, config={{"attention": "memory", "K": 4}})
    for step in range(steps):
        run.log({{"val/bleu": float(step), "pad": "x" * 40}}, step=step)
    run.finish()
"""
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=300)
    made = {}
    for run_id in runs:
        (made[run_id],) = sorted((root / run_id / "wandb").glob(f"offline-run-*-{run_id}"))
    return made


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict[str, Path]:
    """The module's runs, made once; a test that reads or changes one takes its own copy
    (:func:`offline_run`), except the framing test, which only reads the long one."""
    return make_offline_runs(tmp_path_factory.mktemp("wb"), RUNS)


def offline_run(made: dict[str, Path], run_id: str, root: Path) -> Path:
    """A copy of the made run ``run_id`` in ``root``'s ``wandb`` folder, where wandb would have
    written it with ``dir=root``: this test's own."""
    copy = root / "wandb" / made[run_id].name
    shutil.copytree(made[run_id], copy)
    return copy


def cut_after_last_history(run_dir: Path) -> None:
    """Cut a finished run's log after its last history record, where a kill before
    ``wandb.finish`` leaves a run that had flushed its history (the log keeps its framing)."""
    header, chunks = read_chunks(run_log(run_dir).read_bytes())
    kinds = [r.WhichOneof("record_type") for r in read_records(run_log(run_dir))]
    last_history = max(i for i, k in enumerate(kinds) if k == "history")
    run_log(run_dir).write_bytes(write_chunks(header, chunks[: last_history + 1]))


def inspect(run_dir: Path) -> dict:
    done = subprocess.run(
        [WANDB, "leet", "inspect", "--summary", "--json", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.train
def test_the_framing_reads_and_writes_wandbs_own_file_byte_for_byte(made):
    data = run_log(made["long0001"]).read_bytes()
    assert len(data) > 3 * BLOCK, "the run must span blocks for this test to mean anything"
    header, records = read_chunks(data)
    assert write_chunks(header, records) == data
    with pytest.raises(RunLogError, match="checksum"):
        read_chunks(data[:200] + bytes([data[200] ^ 0xFF]) + data[201:])


@pytest.mark.train
def test_timing_summary_lands_in_the_finished_run_as_wandb_reads_it(made, tmp_path):
    runs = {"long": offline_run(made, "long0001", tmp_path), "root": tmp_path}
    runs["short"] = offline_run(made, "short001", tmp_path)
    before = inspect(runs["long"])
    values = {"decode_seconds": 0.01234, "decode_seconds_iqr": 0.0002, "decode_contended": True}
    add_offline_summary(runs["long"], values)
    after = inspect(runs["long"])
    assert after["state"] == before["state"] == "finished"
    assert after["summary"]["val/bleu"] == 1499.0  # the history's last value is still the summary's
    assert {k: after["summary"][k] for k in values} == values
    # published again (a resume of the finished sweep): the run's file stays as it is
    data = run_log(runs["long"]).read_bytes()
    add_offline_summary(runs["long"], values)
    assert run_log(runs["long"]).read_bytes() == data, "the same figures written a second time"
    assert len(sorted((runs["root"] / "wandb").glob("offline-run-*-long0001"))) == 1, (
        "no second folder for the run"
    )
    dry = subprocess.run(
        [WANDB, "sync", "--dry-run", str(runs["long"])], capture_output=True, text=True, timeout=120
    )
    assert dry.returncode == 0 and "ERROR" not in dry.stdout + dry.stderr
    # the same through the stage's entry point, which finds the run's folder by id
    add_run_summary("offline", runs["root"], "short001", {"decode_seconds": 0.5})
    assert inspect(runs["short"])["summary"]["decode_seconds"] == 0.5
    with pytest.raises(RunLogError, match="no offline W&B run"):
        add_run_summary("offline", runs["root"], "missing1", {"decode_seconds": 0.5})


@pytest.mark.train
def test_an_unfinished_run_is_named_and_left_out_of_the_upload_command(made, tmp_path):
    good = offline_run(made, "good0001", tmp_path)
    dead = offline_run(made, "dead0001", tmp_path)
    cut_after_last_history(dead)
    assert run_problem(good) is None
    assert run_problem(dead) is not None
    with pytest.raises(RunLogError, match="never finished"):
        add_offline_summary(dead, {"decode_seconds": 1.0})
    hint, broken, empty = wandb_sync_hint(tmp_path)
    assert [name for name, _ in broken] == [dead.name] and empty == []
    assert str(good) in hint and dead.name not in hint
    # the command as printed reads every run it names without an error
    dry = subprocess.run(
        hint.replace(" sync ", " sync --dry-run ", 1),
        shell=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert dry.returncode == 0 and "ERROR" not in dry.stdout + dry.stderr


@pytest.mark.train
def test_a_run_part_cut_before_its_exit_is_closed_and_reads_back_finished(made, tmp_path):
    """A trial killed before wandb.finish (Tune's 5 s at the end of a stopped run): its log ends
    after its last history record. Made here from a real finished run, cut where the kill would
    cut it; the launcher's close_cut_run gives it an exit record, and wandb reads it finished with
    its history, and uploads it."""
    cut = offline_run(made, "short001", tmp_path)
    cut_after_last_history(cut)
    assert run_problem(cut) == "the run was never finished (no exit record)"

    assert close_cut_run(cut) and not close_cut_run(cut) and not close_cut_run(made["short001"])
    assert run_problem(cut) is None
    info = inspect(cut)
    assert info["state"] == "finished" and info["summary"]["val/bleu"] == 2.0
    assert wandb_sync_hint(tmp_path).broken == []  # no longer left out of the upload command


@pytest.mark.train  # the module's runs: a wandb process of seconds, as its other users
def test_a_part_a_later_part_of_its_run_follows_is_closed(made, tmp_path):
    """A launcher killed (or its head lost) mid-trial leaves the trial's run part without an exit
    record; the resume goes on in a new part of the same run id, and the old part was left out of
    the upload command: the run's history before the kill never reached W&B."""
    from sweeps.integrations.wandb_runs import close_superseded_parts

    newest = offline_run(made, "short001", tmp_path)
    cut = newest.with_name("offline-run-20000101_000000-short001")  # the same run, earlier
    shutil.copytree(made["short001"], cut)
    cut_after_last_history(cut)
    alone = newest.with_name("offline-run-20000101_000000-alone001")  # no later part: left open
    shutil.copytree(made["short001"], alone)
    cut_after_last_history(alone)
    assert [name for name, _ in wandb_sync_hint(tmp_path).broken] == [alone.name, cut.name]

    assert close_superseded_parts(tmp_path / "wandb") == 1
    assert run_problem(cut) is None and inspect(cut)["state"] == "finished"
    assert run_problem(alone) == "the run was never finished (no exit record)"
    assert [name for name, _ in wandb_sync_hint(tmp_path).broken] == [alone.name]
    assert close_superseded_parts(tmp_path / "wandb") == 0


def test_a_run_folder_without_its_log_has_nothing_to_close(tmp_path):
    """A trial stopped by a budget while W&B was starting leaves ``offline-run-*`` with ``files``,
    ``logs`` and ``tmp`` but no ``run-<id>.wandb``: the launcher's closing of cut runs passes over
    it (it raised, and the launch ended in a traceback after writing its results)."""
    folder = tmp_path / "wandb" / "offline-run-20261129_225625-8372f1eb"
    for sub in ("files", "logs", "tmp"):
        (folder / sub).mkdir(parents=True)
    assert close_cut_run(folder) is False
    assert sorted(p.name for p in folder.iterdir()) == ["files", "logs", "tmp"]


@pytest.mark.train
def test_a_stopped_trials_run_says_what_results_csv_says(made, tmp_path, capsys):
    """A stop can land after a trial logged a validation to W&B and before Tune took its report:
    results.csv (and a resume) go on from the report before. The launcher writes results.csv's
    figures and status into such a run's summary, and the status of a trial it trained to its end
    into that one's (W&B's state says "finished" of both); a folder without a log and a trial that
    never started a run are left alone, without a word."""
    from types import SimpleNamespace

    from sweeps.stages.publish import publish_stopped, stopped_figures

    ahead = offline_run(made, "ahead001", tmp_path)  # logged val/bleu 0, 1, 2: summary 2.0
    done = offline_run(made, "done0001", tmp_path)  # 3 steps too
    early = offline_run(made, "early001", tmp_path)  # logged val/bleu 0.0, never reported
    nolog = tmp_path / "wandb" / "offline-run-20261129_225625-nolog001"
    (nolog / "files").mkdir(parents=True)
    nan = float("nan")
    rows = [
        {
            "trial_id": "ahead001",
            "status": "budget",
            "step": 10.0,
            "val/bleu": 1.0,
            "val/loss": nan,
            "val/sacrebleu": nan,  # a copy task's trial never logs it
        },
        {"trial_id": "done0001", "status": "done", "step": 20.0, "val/bleu": 9.0},
        {"trial_id": "early001", "status": "budget", "step": nan, "val/bleu": nan},
        {"trial_id": "nolog001", "status": "budget", "step": nan},
        {"trial_id": "never001", "status": "unfinished"},
    ]
    cut = {"status": "budget", "step": None, "error": None}
    assert stopped_figures(rows, ("budget", "unfinished"), "val/bleu") == {
        "ahead001": {"val/bleu": 1.0, "val/loss": None, "val/sacrebleu": None, **cut, "step": 10.0},
        "early001": {"val/bleu": None, **cut},
        "nolog001": {"val/bleu": None, **cut},
        "never001": {"val/bleu": None, "status": "unfinished", "step": None, "error": None},
    }
    settings = SimpleNamespace(
        wandb=SimpleNamespace(mode="offline", project=None, entity=None),
        wandb_dir=str(tmp_path),
        spec=SimpleNamespace(metric=SimpleNamespace(name="val/bleu")),
    )
    # a trial this launch trained to its end: its status and step, nothing else
    publish_stopped(rows, settings, ("budget", "unfinished"), trained={"done0001", "ahead001"})
    stopped = inspect(ahead)
    assert stopped["state"] == "finished" and stopped["summary"]["val/bleu"] == 1.0
    # W&B's state says "finished" of a cut run too: the run's summary says what results.csv does
    assert stopped["summary"]["status"] == "budget" and stopped["summary"]["step"] == 10.0
    finished = inspect(done)["summary"]
    assert finished["status"] == "done" and finished["step"] == 20.0
    assert stopped["summary"].get("val/loss") is None  # results.csv has none
    # a key the run never logged is not added to its log as a null (W&B's page would list it)
    written = {
        item.key
        for r in read_records(run_log(ahead))
        if r.WhichOneof("record_type") == "summary"
        for item in r.summary.update
    }
    assert "val/bleu" in written and "val/sacrebleu" not in written, written
    nulled = inspect(early)["summary"]  # a key it logged: nulled, as results.csv has none
    assert nulled.get("val/bleu") is None and nulled["_step"] == 0, nulled
    assert inspect(done)["summary"]["val/bleu"] == 2.0
    assert sorted(p.name for p in nolog.iterdir()) == ["files"]
    assert "could not" not in capsys.readouterr().err


@pytest.mark.train
def test_test_figures_of_a_trial_no_longer_chosen_leave_its_run_and_its_study(made, tmp_path):
    """A resume that chose another trial (an errored one finished better) leaves the earlier
    choice's row without test figures in results.csv: its W&B summary's test figures become null
    and its entry leaves the study's ``heldout`` attribute, the new choice's goes in."""
    from types import SimpleNamespace

    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    from sweeps.stages.publish import publish_heldout

    before = offline_run(made, "held0001", tmp_path)
    add_offline_summary(before, {"test/bleu": 41.0, "test/loss": 1.5})
    journal = tmp_path / "optuna.journal"
    storage = JournalStorage(JournalFileBackend(str(journal)))
    study = optuna.create_study(study_name="s/c", storage=storage, direction="maximize")
    for number, tid in enumerate(("held0001", "next0001")):
        trial = study.ask()
        trial.set_user_attr("ray_trial_id", tid)
        study.tell(trial, 40.0 + number)
    study.set_user_attr("heldout", {"0": {"test/bleu": 41.0, "test/loss": 1.5}})
    settings = SimpleNamespace(
        wandb=SimpleNamespace(mode="offline", project=None, entity=None), wandb_dir=str(tmp_path)
    )
    publish_heldout({"next0001": {"test/bleu": 44.0}}, settings, journal, dropped=["held0001"])
    summary = inspect(before)["summary"]
    assert summary.get("test/bleu") is None and summary.get("test/loss") is None, summary
    assert summary["val/bleu"] == 1.0  # its own figures stay
    held = optuna.load_study(study_name="s/c", storage=storage).user_attrs["heldout"]
    assert held == {"1": {"test/bleu": 44.0}}


def test_figures_go_on_a_retry_not_on_the_failed_trial_it_retried(tmp_path):
    """A failed trial a resume ran again is a new Optuna trial (retry_of) with the same Ray trial
    id: the figures measured after the run went on both, counted twice."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    from sweeps.stages.publish import record_trial_attrs

    journal = tmp_path / "optuna.journal"
    storage = JournalStorage(JournalFileBackend(str(journal)))
    study = optuna.create_study(study_name="s/c", storage=storage, direction="maximize")
    failed = study.ask()
    failed.set_user_attr("ray_trial_id", "t1")
    study.tell(failed, state=optuna.trial.TrialState.FAIL)
    study.enqueue_trial(failed.params, user_attrs={"retry_of": failed.number})
    retry = study.ask()
    retry.set_user_attr("ray_trial_id", "t1")
    study.tell(retry, 40.0)
    assert record_trial_attrs(str(journal), "heldout", {"t1": {"test/bleu": 41.0}}) == 1
    held = optuna.load_study(study_name="s/c", storage=storage).user_attrs["heldout"]
    assert held == {"1": {"test/bleu": 41.0}}


@pytest.mark.train
def test_run_folders_with_nothing_logged_are_left_out_quietly(made, tmp_path):
    """Folders of trials stopped before W&B wrote a record (no log while W&B was starting, or a
    log that ends within its header: a process killed before W&B's service flushed anything)
    hold nothing: they are not runs of their ids, not named incomplete at every later launch,
    and the upload command lists the real runs beside them."""
    from sweeps.integrations.wandb_runs import offline_run_dirs, run_is_empty

    good = offline_run(made, "good0002", tmp_path)  # 2 steps
    bare = tmp_path / "wandb" / "offline-run-20991231_235959-good0002"  # a later, empty part
    for sub in ("files", "logs", "tmp"):
        (bare / sub).mkdir(parents=True)
    header_only = tmp_path / "wandb" / "offline-run-20991231_235959-lone0001"
    header_only.mkdir()  # the header alone: what a process killed after wandb.init leaves, as a rule
    (header_only / "run-lone0001.wandb").write_bytes(read_chunks(run_log(good).read_bytes())[0])
    assert run_is_empty(bare) and run_is_empty(header_only) and not run_is_empty(good)
    assert offline_run_dirs(tmp_path / "wandb", "good0002") == [good]
    assert offline_run_dirs(tmp_path / "wandb", "lone0001") == []
    hint = wandb_sync_hint(tmp_path)
    assert hint.broken == [] and sorted(hint.empty) == sorted([bare.name, header_only.name])
    assert hint.command == f"{wandb_command()} sync {good}"
    # the summary of a stopped trial still lands in its run, not in the empty later folder
    add_run_summary("offline", tmp_path, "good0002", {"val/bleu": 7.5})
    assert inspect(good)["summary"]["val/bleu"] == 7.5


@pytest.mark.train
def test_a_wandb_report_needs_credentials_and_the_runs_uploaded(
    made, tmp_path, monkeypatch, capsys
):
    """`python -m sweeps.report DIR --wandb` ended in wandb's traceback without an API key, and
    with offline runs never synced would have built a Report of runs W&B does not hold: it says
    which, with the fix, after writing the local report (exit 2). "Synced" is wandb's own mark."""
    from wandb.cli import beta_sync

    from sweeps.integrations.wandb_env import unsynced_runs
    from sweeps.report import moo
    from sweeps.report.local import main
    from sweeps.report.results import write_results_csv
    from sweeps.report.wandb_report import report_problem as _wandb_problem

    out = tmp_path / "sweep"
    write_results_csv(
        [{"trial_id": "t1", "cell": "c", "model": "m", "length": 4, "seed": 0, "status": "done",
          "val/bleu": 1.0}], out,
    )  # fmt: skip
    run = offline_run(made, "sync0001", out)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc login
    monkeypatch.setenv("NETRC", str(tmp_path / "none"))
    with pytest.raises(SystemExit) as stop:
        main([str(out), "--wandb"])
    assert stop.value.code == 2 and (out / "results.md").exists()
    assert "no W&B credentials here: `wandb login`" in capsys.readouterr().err
    (out / "optuna.journal").touch()  # no study in it: no section, then the same check
    assert moo.main([str(out), "--wandb"]) == 2  # the multi-objective section's command alike
    assert "no W&B credentials here" in capsys.readouterr().err
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert unsynced_runs(out) == [run.name]
    problem = _wandb_problem(out)
    assert "1 of the sweep's W&B runs ran offline and are not uploaded" in problem
    assert f"wandb sync {out / 'wandb'}/offline-run-*" in problem
    (log,) = run.glob("*.wandb")
    log.with_suffix(".wandb.synced").touch()  # what wandb sync leaves once a run is uploaded
    assert beta_sync._is_synced(log) and unsynced_runs(out) == [] and _wandb_problem(out) is None
    # a key W&B does not take, or no W&B to reach (a port on this machine that nothing serves):
    # the same one line and exit 2 where wandb's traceback ended the command (about 20 s)
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")
    # wandb.Api()'s wait for an answer (19 s by default): WANDB_HTTP_TIMEOUT, which wandb reads
    # once, as it first imports wandb.apis.public.api (set on the class too, for where an earlier
    # test has imported it: Api._HTTP_TIMEOUT, wandb 0.31; monkeypatch fails where it is gone)
    monkeypatch.setenv("WANDB_HTTP_TIMEOUT", "3")
    from wandb.apis.public import api as public_api

    monkeypatch.setattr(public_api.Api, "_HTTP_TIMEOUT", 3)
    with pytest.raises(SystemExit) as stop:
        main([str(out), "--wandb"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "--wandb: W&B did not take the report (" in err, err
    assert "Traceback" not in err and "the local report above is written" in err
