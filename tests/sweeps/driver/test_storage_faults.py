"""A full disk under a running sweep: one line, a non-zero exit, finished results kept,
and a resume that continues from them once there is room again."""

from __future__ import annotations

import errno
import json
import logging
import os
import pickle
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from sweep_helpers import result_steps, tiny_spec, write_spec

ROOT = Path(__file__).resolve().parents[3]


def test_a_storage_fault_is_found_inside_rays_wrapping_and_named_in_one_line():
    from ray.exceptions import RayTaskError

    from sweeps.storage import StorageFault, describe, find_storage_fault

    # what pyarrow raises when Ray copies a checkpoint to a full disk: errno set, no filename
    full = OSError(
        errno.ENOSPC, "Error writing bytes to file. Detail: [errno 28] No space left on device"
    )
    assert describe(find_storage_fault(full), "trial t1") == "No space left on device (trial t1)"
    try:
        try:
            raise full
        except OSError as exc:
            raise RuntimeError("wandb teardown failed") from exc
    except RuntimeError as outer:
        assert find_storage_fault(outer) is full, "found through the chain of causes"
    assert find_storage_fault(OSError(errno.ENOENT, "No such file", "/x")) is None
    assert find_storage_fault(ValueError("No space left on device? no: not an OSError")) is None
    ro = OSError(errno.EROFS, "Read-only file system", "/mnt/out/state.json")
    assert describe(ro, "saving") == "Read-only file system: /mnt/out/state.json (saving)"

    # the trial's own one-line error, as the driver receives it from the worker
    wrapped = RayTaskError(
        "train",
        "Traceback ...\nlong worker traceback",
        StorageFault("No space left on device (trial t2)"),
    )
    wrapped = wrapped.as_instanceof_cause()
    assert isinstance(wrapped, StorageFault) and "long worker traceback" in str(wrapped)
    assert describe(find_storage_fault(wrapped), "x") == "No space left on device (trial t2)"


def test_the_guard_keeps_the_traceback_off_the_console_and_interrupts_once(caplog):
    from sweeps.storage import StorageFault, StorageGuard

    received = []
    previous = signal.signal(signal.SIGINT, lambda *a: received.append(a[0]))
    guard = StorageGuard("/mnt/out")
    log = logging.getLogger("ray.tune.execution.tune_controller")
    try:
        with guard.watching(), caplog.at_level(logging.ERROR):
            log.error("Trial task failed for trial a", exc_info=ValueError("an ordinary crash"))
            assert received == [] and guard.fault is None
            for trial in "bc":
                log.error(
                    f"Trial task failed for trial {trial}",
                    exc_info=StorageFault(f"No space left on device (trial {trial})"),
                )
            logging.getLogger("ray._private.worker").error(
                "Unhandled error: ray::train() StorageFault: No space ..."
            )
    finally:
        signal.signal(signal.SIGINT, previous)
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["Trial task failed for trial a"], "the storage faults were printed"
    assert received == [signal.SIGINT], "interrupted once, on the first fault"
    assert guard.fault == "No space left on device (trial b)"
    assert "/mnt/out" not in guard.fault and "--resume" in guard.message()


def tune_state(experiment: Path, *trials: str) -> str:
    """An ``experiment_state-*.json`` as Tune writes it for a run whose storage is
    ``experiment`` (its parent, and its folder's name): each trial's ``storage`` a pickled object
    with the attributes of Ray's ``StorageContext`` that say where it wrote."""
    storage = SimpleNamespace(
        experiment_dir_name=experiment.name,
        trial_dir_name="t",
        storage_fs_path=str(experiment.parent),
    )
    fallback = {"_type": "CLOUDPICKLE_FALLBACK", "value": pickle.dumps(storage).hex()}
    entries = [[json.dumps({"trial_id": t, "storage": fallback}), "{}"] for t in trials]
    return json.dumps({"trial_data": entries, "runner_data": {}})


def test_a_cut_short_tune_state_is_restored_from_the_drivers_own_copy(tmp_path, monkeypatch):
    from sweeps.driver.cluster import LaunchError
    from sweeps.driver.resume_check import check_experiment_state

    stamp = "2026-11-22_22-49-16"
    exp = tmp_path / "out" / "study"
    exp.mkdir(parents=True)
    good = json.loads(tune_state(exp, "t1"))
    # the staging folder's stamp is a second off the state file's, as Tune makes them
    staging = (
        tmp_path
        / "raytmp"
        / "ray"
        / "session_x"
        / "artifacts"
        / "2026-11-22_22-49-15"
        / "study"
        / "driver_artifacts"
    )
    staging.mkdir(parents=True)
    (staging / f"experiment_state-{stamp}.json").write_text(json.dumps(good))
    (staging / f"search_gen_state-{stamp}.json").write_bytes(pickle.dumps({"gen": 2}))
    (staging / f"searcher-state-{stamp}.pkl").write_bytes(pickle.dumps({"started": 2}))
    # the storage's copy cut short by the full disk; the two pickles written whole, one snapshot older
    (exp / f"experiment_state-{stamp}.json").write_text(json.dumps(good)[:20])
    (exp / f"search_gen_state-{stamp}.json").write_bytes(pickle.dumps({"gen": 1}))
    (exp / f"searcher-state-{stamp}.pkl").write_bytes(pickle.dumps({"started": 1}))

    monkeypatch.setenv(
        "RAY_TMPDIR", str(tmp_path / "elsewhere")
    )  # a machine without the driver's copy
    with pytest.raises(LaunchError, match=f"experiment_state-{stamp}.json is damaged"):
        check_experiment_state(exp)

    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "raytmp"))
    said = check_experiment_state(exp)
    assert len(said) == 1 and "cut short" in said[0] and str(staging) in said[0]
    assert json.loads((exp / f"experiment_state-{stamp}.json").read_text()) == good
    assert pickle.loads((exp / f"searcher-state-{stamp}.pkl").read_bytes()) == {"started": 2}, (
        "one snapshot, all of it"
    )
    assert [p.name.split(".damaged-")[0] for p in exp.glob("*.damaged-*")] == [
        f"experiment_state-{stamp}.json"
    ]
    assert check_experiment_state(exp) == [], "whole now"


def test_trial_files_cut_short_on_the_storage_are_restored_from_the_drivers_copy(
    tmp_path, monkeypatch
):
    """Only where the storage's copy is a strict prefix of the staged one; nothing from a staging
    folder of another run (no state file of this experiment's), nor from the staging folder of
    the sweep folder this one is a copy of (the same state file names, another storage)."""
    from sweeps.driver.resume_check import restore_trial_files

    stamp = "2026-11-22_22-49-16"
    exp = tmp_path / "out" / "study"
    (exp / "t1_attention=none").mkdir(parents=True)
    (exp / "t2_attention=none").mkdir()
    (exp / f"experiment_state-{stamp}.json").write_text(tune_state(exp, "t1"))
    artifacts = tmp_path / "raytmp" / "ray" / "session_x" / "artifacts"
    staging = artifacts / "2026-11-22_22-49-15" / "study" / "driver_artifacts"
    other = artifacts / "2026-11-20_10-00-00" / "study" / "driver_artifacts"  # an older sweep
    # the run of the folder this one was copied from (cp -r), resumed there: its staging folder
    # holds the same state file, and the original's files, longer than the copy's
    original = tmp_path / "original" / "study"
    original.mkdir(parents=True)  # still there: this folder is its copy, not the folder moved
    theirs = tmp_path / "raytmp" / "ray" / "session_y" / "artifacts" / "2026-11-22_22-49-15"
    theirs = theirs / "study" / "driver_artifacts"
    for folder, state in ((staging, stamp), (other, "2026-11-20_10-00-00"), (theirs, stamp)):
        (folder / "t1_attention=none").mkdir(parents=True)
        (folder / "t2_attention=none").mkdir()
        (folder / f"experiment_state-{state}.json").write_text(tune_state(exp, "t1"))
    (theirs / f"experiment_state-{stamp}.json").write_text(tune_state(exp, "t1"))
    (theirs / "experiment_state-2026-11-23_08-00-00.json").write_text(tune_state(original, "t1"))
    (exp / "t4_attention=none").mkdir()  # never trained in the copy
    (theirs / "t4_attention=none").mkdir()
    (theirs / "t4_attention=none" / "result.json").write_text('{"step": 60, "done": true}\n')
    reports = '{"step": 10}\n{"step": 20}\n'
    (staging / "t1_attention=none" / "result.json").write_text(reports)
    (staging / "t1_attention=none" / "progress.csv").write_text("step\n10\n20\n")
    (staging / "t1_attention=none" / "params.json").write_text('{"lr": 1}')
    (staging / "t2_attention=none" / "result.json").write_text(reports)
    (other / "t2_attention=none" / "params.json").write_text('{"lr": 9}')
    (exp / "t1_attention=none" / "result.json").write_text("")  # emptied by the full disk
    (exp / "t1_attention=none" / "progress.csv").write_text("step\n10\n")  # a line short
    (exp / "t1_attention=none" / "params.json").write_text('{"lr": 2}')  # not a prefix: kept
    (exp / "t2_attention=none" / "result.json").write_text(reports + '{"step": 30}\n')  # longer
    # what a Ctrl-C leaves as a matter of course: the events file a line behind, brought up to
    # date without a word
    events = "events.out.tfevents.1796031557.vm"
    (exp / "t3_attention=none").mkdir()
    (staging / "t3_attention=none").mkdir()
    (staging / "t3_attention=none" / events).write_text("a\nb\n")
    (exp / "t3_attention=none" / events).write_text("a\n")

    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "raytmp"))
    said = restore_trial_files(exp)
    assert (exp / "t1_attention=none" / "result.json").read_text() == reports
    assert (exp / "t1_attention=none" / "progress.csv").read_text() == "step\n10\n20\n"
    assert (exp / "t1_attention=none" / "params.json").read_text() == '{"lr": 2}'
    assert (exp / "t2_attention=none" / "result.json").read_text().endswith('{"step": 30}\n')
    assert not (exp / "t2_attention=none" / "params.json").exists(), "another run's file"
    assert len(said) == 1 and "1 trial(s)" in said[0], said
    assert "t1_attention=none: progress.csv, result.json" in said[0], said
    # a killed launcher leaves them behind too, not only a full disk: the line names both
    assert "did not run: the launcher was killed, the disk was full, or a copy" in said[0], said
    assert "t3" not in said[0] and (exp / "t3_attention=none" / events).read_text() == "a\nb\n"
    assert not list((exp / "t4_attention=none").iterdir()), "the original's files, in its copy"
    assert restore_trial_files(exp) == [], "whole now"
    # a folder moved (its recorded place holds it no longer) is the same sweep: its run's staging
    # copy serves it, as before the copy check; a copy's original still there does not
    from sweeps.driver.resume_check import staged_for

    assert not staged_for(theirs, exp)
    shutil.rmtree(original)
    assert staged_for(theirs, exp)


@pytest.fixture
def small_disk(tmp_path):
    """A 6 MiB tmpfs: room for one tiny trial's checkpoints, not two. Needs root (mount). A trial
    here keeps two checkpoints of 1.6 MB and ~0.3 MB of W&B and Tune files: one trial with a
    checkpoint's temporary copy takes ~5.3 MB, two trials' four checkpoints alone 6.4 MB (5 MiB
    left the first trial no margin: it filled the disk once, under the two-worker test run)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(disk)],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        pytest.skip(
            f"cannot mount a small tmpfs here ({made.stderr.strip()}): the full-disk test needs root"
        )
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_full_disk_stops_the_sweep_with_one_line_and_a_resume_finishes_it(small_disk, tmp_path):
    """Two launcher processes (the storage fault stops its own process with a SIGINT), each on a
    private Ray of its own (``--address local``). (They joined the tests' shared Ray once, to
    start no Ray twice; in one run that Ray then held one of its two CPUs after both launchers had
    ended, and the next test's timing stage, which waits for a whole free node, waited for ever.)"""
    spec = tiny_spec(
        "fulldisk",
        grid={"model": [{"attention": "none"}, {"attention": "memory", "K": 4}]},
        trainer={"max_steps": 20, "val_check_interval": 10},
        max_concurrent_trials=1,
    )
    path = write_spec(tmp_path, spec)
    out = small_disk / "out"
    cmd = [
        sys.executable,
        str(ROOT / "sweeps" / "launch.py"),
        str(path),
        "--output",
        str(out),
        "--address",
        "local",
    ]
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "WANDB_MODE": "offline"}
    run = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    log = run.stdout + run.stderr
    assert run.returncode == 1, log[-3000:]
    errors = [ln for ln in run.stderr.splitlines() if ln.startswith("error:")]
    assert (
        len(errors) == 1
        and "No space left on device" in errors[0]
        and str(out / "fulldisk") in errors[0]
    ), log[-3000:]
    assert "--resume" in run.stderr
    assert "Traceback" not in log and len(log.splitlines()) < 200, log[-5000:]
    exp = out / "fulldisk"
    # Tune rewrites each trial's log files on the storage at every snapshot, and on the full disk
    # that empties them, the finished trial's too: the resume restores them from the driver's copy
    checkpoints = {p: p.read_bytes() for p in exp.glob("*/checkpoint_*/*") if p.is_file()}
    # one trial at a time: the one whose last checkpoint (step 20) is oldest finished first, whole
    last = sorted(exp.glob("*/checkpoint_000001/checkpoint.ckpt"), key=lambda p: p.stat().st_mtime)
    assert last, "the disk filled before any trial finished: the tmpfs is too small for this test"
    finished = last[0].parent.parent

    subprocess.run(["mount", "-o", "remount,size=64m", str(small_disk)], check=True)
    run = subprocess.run(
        cmd + ["--resume"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    df = pd.read_csv(exp / "results.csv", dtype={"trial_id": str})
    assert sorted(df["status"]) == ["done"] * 2
    for row in df.itertuples():
        (folder,) = exp.glob(f"{row.trial_id}_*")
        steps = result_steps(folder)
        assert steps[:1] == [10] and steps[-1:] == [20], (folder.name, steps, run.stdout[-2000:])
    # the trial that finished before the disk filled is not trained again: the same two reports,
    # the same checkpoints
    assert result_steps(finished) == [10, 20]
    kept = {p: data for p, data in checkpoints.items() if p.is_relative_to(finished)}
    assert len({p.parent for p in kept}) == 2, kept
    assert all(p.read_bytes() == data for p, data in kept.items()), (
        f"{finished.name} finished before the disk filled and was re-run"
    )


def test_a_finished_trial_whose_checkpoint_is_gone_keeps_its_figures_and_is_said_once(
    tmp_path, monkeypatch
):
    """A finished trial's checkpoint deleted (or a copy made without it): Tune counts it finished
    and does not train it again, so the state repair says nothing of it (it said "starts again
    from step 0", beside the note that says it does not), its timing and test figures measured
    before are kept (they went blank: the records could no longer be tied to the file by its
    hash), and a trial no record measured says the launch that trains it again, not the timing
    command's advice."""
    import ray
    from ray.train import Checkpoint
    from ray.train._internal.session import _TrainingResult
    from sweep_helpers import stub_trial

    from sweeps.driver.resume_check import repoint_lost_checkpoints
    from sweeps.heldout.stage import HELDOUT_ERROR, evaluate_chosen_trials
    from sweeps.layout import CHECKPOINT_FILE, HELDOUT_FILE
    from sweeps.spec import load_spec
    from sweeps.spec.schema import TimingSpec
    from sweeps.timing.record import TIMING_FILE
    from sweeps.timing.stage import time_finished_trials

    exp = tmp_path / "out" / "study"
    original = tmp_path / "original" / "study"
    entries = []
    trials = (("TERMINATED", "t1_done"), ("PAUSED", "t2_paused"), ("PAUSED", "t5_copied"))
    for status, name in trials:
        trial = stub_trial()
        trial.status = status
        (exp / name).mkdir(parents=True)  # its checkpoint folders deleted
        # t5: this folder is a copy (cp -r) whose checkpoint went; the original's is still there
        where = original if name == "t5_copied" else exp
        last = _TrainingResult(
            Checkpoint(path=str(where / name / "checkpoint_000001")), {"step": 6}
        )
        trial.run_metadata.checkpoint_manager._latest_checkpoint_result = last
        trial.run_metadata.checkpoint_manager._checkpoint_results = [last]
        trial.invalidate_json_state()
        entries.append(list(trial.get_json_state()))
    (original / "t5_copied" / "checkpoint_000001").mkdir(parents=True)
    (original / "t5_copied" / "checkpoint_000001" / CHECKPOINT_FILE).write_bytes(b"PK")
    (exp / "experiment_state-x.json").write_text(json.dumps({"trial_data": entries}))
    assert repoint_lost_checkpoints(exp) == [
        f"trial folder {name}: its recorded checkpoint checkpoint_000001 is gone; no "
        "checkpoint is left, so it starts again from step 0"
        for name in ("t2_paused", "t5_copied")
    ], "a finished trial is not trained again: only the unfinished ones are said"

    # the timing and held-out stages of the resume: t1 measured before (its records name the
    # checkpoint of the sweep folder it was copied from), t3 never
    gone = {t: exp / f"{t}_x" / "checkpoint_000001" / CHECKPOINT_FILE for t in ("t1", "t3")}
    decode = {
        **dict.fromkeys(("min_seconds", "max_seconds", "q1_seconds", "q3_seconds"), 0.02),
        **{"decode_seconds": 0.02, "seconds": [0.02], "per_sentence_seconds": 0.001},
        **{"sentences": 20, "output_tokens": 80, "batches": 1, "beam_size": 1, "warmup": 0},
        **{"device": "cpu", "threads": TimingSpec().threads, "torch_version": "2"},
    }
    measured = str(original / "t1_x" / "checkpoint_000001" / CHECKPOINT_FILE)
    (exp / "t1_x").mkdir()
    (exp / "t1_x" / TIMING_FILE).write_text(
        json.dumps(
            {
                "trial_id": "t1",
                "checkpoint": measured,
                "fingerprint": "sha256:0:1",
                "split": "valid",
                "timing": decode,
                **{"node_id": "n", "hostname": "h", "reserved_cpus": 1.0, "reserved_gpus": 0.0},
                **{"started_at": 0.0, "finished_at": 1.0},
            }
        )
    )
    tested = {"test/bleu": 12.5, "test/loss": 1.0, "test/token_acc": 0.5}
    (exp / "t1_x" / HELDOUT_FILE).write_text(
        json.dumps(
            {"trial_id": "t1", "checkpoint": measured, "fingerprint": "sha256:0:1"}
            | {"split": "copy test draw", "metrics": tested}
        )
    )
    (exp / "t3_x").mkdir()
    rows = [
        {"trial_id": t, "cell": "c", "seed": 0, "status": "done", "val/bleu": 5.0}
        | {"checkpoint": str(gone[t])}
        for t in ("t1", "t3")
    ]
    plans = {t: (SimpleNamespace(task={"name": "copy"}, seed=0), str(exp / f"{t}_x")) for t in gone}
    said: list[str] = []
    monkeypatch.setattr(ray, "is_initialized", lambda: True)  # nothing left to run on Ray
    decode_only = TimingSpec(measure=["decode"])
    assert not time_finished_trials(rows, plans, exp.parent, decode_only, log=said.append)
    assert rows[0].get("decode_seconds") == 0.02 and not rows[0].get("timing_error"), (rows, said)
    assert rows[1].get("decode_seconds") is None
    error = rows[1]["timing_error"]
    assert error.startswith(f"checkpoint {gone['t3']} is gone (deleted or moved)"), error
    assert "--set warm_start=" in error and "pass a Lightning .ckpt" not in error
    assert any("t1: its checkpoint is gone; the figures timed for it before" in s for s in said)

    spec = load_spec(write_spec(tmp_path, tiny_spec("study", heldout={"trials": "all"}))).spec
    said.clear()
    found = evaluate_chosen_trials(rows, plans, exp.parent, spec, log=said.append)
    assert found == {"t1": tested} and rows[0]["test/bleu"] == 12.5
    assert rows[0]["test_split"] == "copy test draw" and not rows[0].get(HELDOUT_ERROR)
    assert rows[1][HELDOUT_ERROR].startswith(f"checkpoint {gone['t3']} is gone (deleted or")
    assert any(s.startswith("[heldout] trial t3: checkpoint") for s in said), said
