"""One launch at a time in a sweep's folder: a second launch (``--resume`` in another terminal)
stops before anything starts and names the running one; a launch killed with -9 blocks nobody;
a new launch into a folder that holds a sweep is refused before Ray starts. Real processes hold
the lock; the launches are the real command line."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from sweeps.driver.launch_lock import hold_launch_lock
from sweeps.errors import LaunchError
from sweeps.layout import LOCK_FILE, only_launch_files, python_command

ROOT = Path(__file__).resolve().parents[3]
QUICKSTART = str(ROOT / "sweeps" / "quickstart.yaml")


def holder(folder: Path) -> subprocess.Popen:
    """A process that takes the folder's launch lock as a launch does and keeps it."""
    code = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from sweeps.driver.launch_lock import hold_launch_lock
        lock = hold_launch_lock(Path({str(folder)!r}), "python sweeps/launch.py first.yaml")
        print("held", flush=True)
        time.sleep(300)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_launch_is_refused_while_the_first_lives_and_not_after_kill_9(tmp_path):
    first = holder(tmp_path)
    try:
        record = json.loads((tmp_path / LOCK_FILE).read_text())
        assert record["pid"] == first.pid and record["command"].endswith("first.yaml")
        with pytest.raises(LaunchError) as info:
            hold_launch_lock(tmp_path, "python sweeps/launch.py second.yaml")
        said = str(info.value)
        assert said.startswith(f"another launch is running this sweep now (pid {first.pid} on ")
        assert "first.yaml" in said and f"kill -INT {first.pid}" in said
        assert json.loads((tmp_path / LOCK_FILE).read_text()) == record, "the record was kept"
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    lock = hold_launch_lock(tmp_path, "python sweeps/launch.py second.yaml")
    try:
        assert lock is not None
        assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()
    finally:
        lock.close()
    # the lock file alone does not make the folder a sweep
    assert only_launch_files(tmp_path)


def test_a_lock_held_from_another_host_is_waited_for_then_refused_or_taken(tmp_path, capsys):
    """On shared storage the holder may be another node, perhaps a dead one whose NFS lock
    outlives it until its lease runs out: the launch waits before it refuses, and takes the lock
    when the holder lets it go meanwhile."""
    first = holder(tmp_path)
    try:
        record = json.loads((tmp_path / LOCK_FILE).read_text())
        (tmp_path / LOCK_FILE).write_text(json.dumps({**record, "host": "node-17"}))
        with pytest.raises(LaunchError, match=f"pid {first.pid} on node-17 since"):
            hold_launch_lock(tmp_path, "python sweeps/launch.py second.yaml", other_host_wait_s=0.3)
        assert "a launch on node-17 holds this sweep" in capsys.readouterr().out
        threading.Timer(0.5, first.kill).start()  # the holder ends while the launch waits
        lock = hold_launch_lock(tmp_path, "python sweeps/launch.py second.yaml", 60)
        assert lock is not None
        assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()
        lock.close()
    finally:
        first.kill()
        first.wait()


def launch(*argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_MODE": "offline", "RAY_USAGE_STATS_ENABLED": "0"}
    return subprocess.run(
        [sys.executable, "sweeps/launch.py", QUICKSTART, *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )


@pytest.mark.train
def test_the_launcher_stops_before_ray_for_a_running_or_an_existing_sweep(tmp_path):
    folder = tmp_path / "quickstart"
    folder.mkdir()
    (folder / "tuner.pkl").write_bytes(b"")  # what Tune writes first: the folder holds a sweep
    first = holder(folder)
    try:
        run = launch("--resume", "--output", str(tmp_path))
        said = run.stdout + run.stderr
        assert run.returncode == 2, said[-2000:]
        assert f"another launch is running this sweep now (pid {first.pid} on " in said
        assert "Ray:" not in said and "repaired" not in said, "it went on before refusing"
        dry = launch("--resume", "--dry-run", "--output", str(tmp_path))
        assert dry.returncode == 2 and f"running this sweep now (pid {first.pid} on " in dry.stderr
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    # no --resume, into a folder that holds a sweep: refused before Ray starts too, and before
    # it takes the lock (the record of the last launch is kept)
    record = (folder / LOCK_FILE).read_text()
    run = launch("--output", str(tmp_path))
    said = run.stdout + run.stderr
    assert run.returncode == 2, said[-2000:]
    assert (
        f"{folder} already holds a sweep of this name. Continue it with --resume "
        f"({python_command()} sweeps/launch.py {QUICKSTART} --resume --output {tmp_path})"
    ) in said
    assert "Ray:" not in said, "Ray was started before the refusal"
    dry = launch("--dry-run", "--output", str(tmp_path))
    assert dry.returncode == 2 and f"--resume --output {tmp_path})" in dry.stderr, dry.stderr
    assert launch("--resume", "--dry-run", "--output", str(tmp_path)).returncode == 0
    assert sorted(p.name for p in folder.iterdir()) == [LOCK_FILE, "tuner.pkl"], "nothing written"
    assert (folder / LOCK_FILE).read_text() == record, "the refused launch rewrote the lock"


@pytest.mark.train
def test_a_folder_holding_a_sweeps_results_is_refused_whatever_storage_path_says(tmp_path):
    """The results of a sweep whose trials went to another storage.path: a new launch there
    would mix its rows with theirs. A file where the sweep's folder goes is refused as clearly."""
    folder = tmp_path / "quickstart"
    folder.mkdir()
    (folder / "results.csv").write_text("trial_id,status\nold1,done\n")
    for dry in (["--dry-run"], []):
        run = launch(*dry, "--output", str(tmp_path), "--set", f"storage.path={tmp_path / 'st'}")
        said = run.stdout + run.stderr
        assert run.returncode == 2, said[-2000:]
        assert f"error: {folder} already holds a sweep of this name. Continue it with" in said
        # and how to grow it without training its finished trials again
        assert f"--set warm_start={folder} --output <another folder>" in said
        assert "Ray:" not in said
    assert (folder / "results.csv").read_text() == "trial_id,status\nold1,done\n"
    # --output naming that sweep's own folder: refused, not a second sweep nested inside it
    (folder / "launch.json").write_text('{"overrides": [], "profile": null}\n')
    for dry in (["--dry-run"], []):
        run = launch(*dry, "--output", str(folder))
        said = run.stdout + run.stderr
        assert run.returncode == 2, said[-2000:]
        assert (
            f"--output {folder} is a sweep's own folder (it holds quickstart's launch.json)" in said
        )
        assert f"--resume --output {tmp_path}" in said and "Ray:" not in said
    assert not (folder / "quickstart").exists()
    assert not (tmp_path / "st").exists() or not any((tmp_path / "st").iterdir())
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "quickstart").write_text("not a folder")
    for dry in (["--dry-run"], []):
        run = launch(*dry, "--output", str(taken))
        assert run.returncode == 2, (run.stdout + run.stderr)[-2000:]
        assert run.stderr.strip().endswith(
            f"--output {taken}: {taken / 'quickstart'} is a file, where the sweep's folder goes; "
            "move it, or choose another --output"
        ), run.stderr


def test_a_printed_command_names_the_launcher_from_where_it_runs_and_keeps_its_ray(
    tmp_path, monkeypatch
):
    """From the repository root `python sweeps/launch.py`; from elsewhere the launcher's own path,
    which that folder has no `sweeps/` to find it by. A resume joins the Ray the launch joined."""
    from argparse import Namespace

    from sweeps.layout import already_holds
    from sweeps.stages.launch_state import Launch

    args = Namespace(spec="q.yaml", output="out", resume=True, overrides=[], address="local")
    launch_ = Launch(plan=None, args=args, profile=None, stop=None, listeners=[])
    monkeypatch.chdir(ROOT)
    # this Python as run (a venv's need not be activated): below the root, relative
    python = os.path.relpath(os.path.abspath(sys.executable), ROOT)
    if python.startswith(".."):
        python = os.path.abspath(sys.executable)
    assert launch_.resume_cmd == (
        f"{python} sweeps/launch.py q.yaml --resume --output out --address local"
    )
    monkeypatch.chdir(tmp_path)
    script, python = ROOT / "sweeps" / "launch.py", os.path.abspath(sys.executable)
    assert launch_.resume_cmd.startswith(f"{python} {script} q.yaml --resume")
    assert f"({python} {script} q.yaml --resume --output out)" in already_holds(
        "x", "q.yaml", "out"
    )
    # a local Ray of the size it was given: without --num-cpus, a resume took every CPU
    args.num_cpus = 1
    assert launch_.resume_cmd.endswith("--resume --output out --address local --num-cpus 1")
    assert launch_.launch_cmd.endswith("--output out --address local --num-cpus 1")


def test_the_lock_records_the_command_as_it_ran_with_its_profile_and_sets():
    """The lock named `python sweeps/launch.py X --output Y`, without the --profile and --set
    the holder ran with: what another launch is told the running one is."""
    from argparse import Namespace

    from sweeps.stages.launch_state import Launch

    args = Namespace(spec="sweeps/wmt17.yaml", output="out", resume=False,
                     overrides=["task.cache_dir=/tmp/a b"])  # fmt: skip
    launch = Launch(plan=None, args=args, profile="smoke", stop=None, listeners=[])
    python = python_command()
    assert launch.full_cmd == (
        f"{python} sweeps/launch.py sweeps/wmt17.yaml --output out --profile smoke "
        "--set 'task.cache_dir=/tmp/a b'"
    )
    args.resume = True
    assert launch.full_cmd == (
        f"{python} sweeps/launch.py sweeps/wmt17.yaml --resume --output out --profile smoke "
        "--set 'task.cache_dir=/tmp/a b'"
    )


def test_output_dot_inside_a_sweep_folder_names_the_sweep_and_the_folder_that_holds_it(
    tmp_path, monkeypatch
):
    """`--output .` run from inside a sweep's folder: the refusal names that sweep and the folder
    to resume it from (it read "it holds 's launch.json" and "--resume --output .")."""
    from sweeps.layout import inside_a_sweep

    folder = tmp_path / "quickstart"
    folder.mkdir()
    (folder / "launch.json").write_text('{"overrides": [], "profile": null}\n')
    monkeypatch.chdir(folder)
    said = inside_a_sweep(".", "q.yaml")
    assert "(it holds quickstart's launch.json)" in said
    assert f"--resume --output {tmp_path};" in said


def test_the_report_command_refuses_a_sweep_a_launch_is_running(tmp_path, capsys):
    """``python -m sweeps.report`` on a sweep whose launch is running rebuilt results.md from the
    earlier run's results.csv (a finished-looking page of a half-run sweep), exit 0; it now names
    the running launch and leaves results.md as it is."""
    from sweeps.report import local as report

    shutil.copy(ROOT / "docs" / "results" / "minimal_k" / "results.csv", tmp_path)
    (tmp_path / "results.md").write_text("the earlier run's page")
    first = holder(tmp_path)
    try:
        with pytest.raises(SystemExit) as info:
            report.main([str(tmp_path)])
        assert info.value.code == 2
        said = capsys.readouterr().err
        assert f"a launch is running this sweep (pid {first.pid} on " in said
        assert "first.yaml" in said and "when the launch has ended" in said
        assert (tmp_path / "results.md").read_text() == "the earlier run's page"
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
