"""A benchmark stopped by a signal sent to it alone (``kill PID``, ``timeout``, a job runner) stops
the launch it runs as a child, and leaves no process of it behind (benchmarks/_children.py).

Each test runs a stand-in of the benchmark in its own process, whose child ("the launch") starts a
grandchild ("its Ray") and, on SIGTERM, ends it and exits 75 as the launcher does. Before the fix,
moo_search.py died at once and the launch, reparented to PID 1, went on training."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: the launch's stand-in: writes its pid and its grandchild's, then waits; on SIGTERM (unless told
#: to ignore it) it notes it, ends the grandchild and exits 75
LAUNCH = textwrap.dedent(
    """
    import os, signal, subprocess, sys, time
    from pathlib import Path

    folder = Path(os.environ["FAKE_LAUNCH_DIR"])
    ray = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])

    def stop(number, frame):
        (folder / "got_sigterm").write_text("")
        ray.terminate()
        ray.wait()
        sys.exit(75)

    if os.environ.get("FAKE_LAUNCH_IGNORES"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGTERM, stop)
    (folder / "pids").write_text(f"{os.getpid()} {ray.pid}")
    time.sleep(120)
    """
)


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, ended but not yet reaped by PID 1, counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def start(tmp_path: Path, parent_code: str, **env: str) -> tuple[subprocess.Popen, list[int]]:
    """The benchmark's stand-in, once its launch and the launch's grandchild are up: their pids."""
    (tmp_path / "launch").mkdir()
    environment = {**os.environ, "FAKE_LAUNCH_DIR": str(tmp_path / "launch"), **env}
    parent = subprocess.Popen(
        [sys.executable, "-c", parent_code],
        cwd=ROOT,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    pids_file = tmp_path / "launch" / "pids"
    end = time.monotonic() + 30
    while not pids_file.exists() or len(pids_file.read_text().split()) < 2:
        if parent.poll() is not None or time.monotonic() > end:
            raise AssertionError(f"the stand-in did not start its launch: {parent.communicate()}")
        time.sleep(0.05)
    return parent, [int(pid) for pid in pids_file.read_text().split()]


def stop_and_check(parent: subprocess.Popen, pids: list[int], within: float) -> str:
    """SIGTERM to the benchmark alone; it ends within ``within`` seconds and so does all it ran."""
    parent.send_signal(signal.SIGTERM)
    try:
        _, err = parent.communicate(timeout=within)
    except subprocess.TimeoutExpired:
        parent.kill()
        raise
    end = time.monotonic() + 5
    while any(alive(pid) for pid in pids) and time.monotonic() < end:
        time.sleep(0.05)
    survivors = [pid for pid in pids if alive(pid)]
    for pid in survivors:  # this test's own processes, so that a failure leaves nothing running
        os.kill(pid, signal.SIGKILL)
    assert not survivors, f"still running after the benchmark ended: {survivors}\n{err}"
    assert parent.returncode == -signal.SIGTERM, (parent.returncode, err)
    return err


@pytest.mark.train  # runs processes for seconds
def test_moo_search_passes_sigterm_to_its_launch_and_leaves_nothing_running(tmp_path):
    fake_root = tmp_path / "root"
    (fake_root / "sweeps").mkdir(parents=True)
    (fake_root / "sweeps" / "launch.py").write_text(LAUNCH)
    parent_code = textwrap.dedent(
        f"""
        import importlib.util, sys
        from pathlib import Path
        spec = importlib.util.spec_from_file_location("moo", {str(ROOT / "benchmarks" / "moo_search.py")!r})
        moo = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(moo)
        moo.ROOT = Path({str(fake_root)!r})  # its launch.py is the stand-in
        out = Path({str(tmp_path / "out")!r})
        moo.launch({{"name": "grid"}}, out, out / "log.txt")
        """
    )
    parent, pids = start(tmp_path, parent_code)
    err = stop_and_check(parent, pids, within=20)
    assert (tmp_path / "launch" / "got_sigterm").exists(), "the launch never got the SIGTERM"
    assert "SIGTERM: passed on to launch.py" in err and "exit status 75" in err


@pytest.mark.train  # runs processes for seconds
def test_a_child_that_ignores_sigterm_is_killed_with_its_group_after_the_grace(tmp_path):
    script = tmp_path / "launch.py"
    script.write_text(LAUNCH)
    parent_code = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(ROOT / "benchmarks")!r})
        from _children import run_child
        run_child([sys.executable, {str(script)!r}], grace=1.0)
        """
    )
    parent, pids = start(tmp_path, parent_code, FAKE_LAUNCH_IGNORES="1")
    started = time.monotonic()
    err = stop_and_check(parent, pids, within=15)
    assert time.monotonic() - started < 10
    assert "exit status -9" in err  # SIGKILL, the grace over


@pytest.mark.train  # runs processes for seconds
def test_a_scripts_own_sigint_handler_runs_once_the_child_has_stopped(tmp_path):
    """gpu_sweep.py notes Ctrl-C and skips the ways not yet begun: the helper keeps that."""
    script = tmp_path / "launch.py"
    script.write_text(LAUNCH.replace("signal.SIGTERM, stop", "signal.SIGINT, stop"))
    parent_code = textwrap.dedent(
        f"""
        import signal, sys
        sys.path.insert(0, {str(ROOT / "benchmarks")!r})
        from _children import run_child
        noted = []
        signal.signal(signal.SIGINT, lambda number, frame: noted.append(number))
        done = run_child([sys.executable, {str(script)!r}])
        print(done.returncode, noted, signal.getsignal(signal.SIGINT).__name__)
        """
    )
    parent, pids = start(tmp_path, parent_code)
    parent.send_signal(signal.SIGINT)
    out, err = parent.communicate(timeout=20)
    assert parent.returncode == 0, err
    assert out.split() == ["75", f"[{int(signal.SIGINT)}]", "<lambda>"], (out, err)
    assert not [pid for pid in pids if alive(pid)]


def test_a_child_past_its_timeout_gets_sigterm_then_sigkill_on_its_group(tmp_path):
    """gpu_benchmarks.py's phase limit: SIGTERM to the phase's group, the grace, then SIGKILL."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from _children import run_child

    started = time.monotonic()
    stops = run_child(
        [sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.3, signal_group=True
    )
    assert stops.timed_out and stops.returncode == -signal.SIGTERM
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(30)"
    done = run_child(
        [sys.executable, "-c", stubborn], timeout=0.3, grace=0.5, stdout=subprocess.PIPE
    )
    assert done.timed_out and done.returncode == -signal.SIGKILL and done.stdout == b""
    assert time.monotonic() - started < 10
    quick = run_child(
        [sys.executable, "-c", "print('hi')"], timeout=30, capture_output=True, text=True
    )
    assert not quick.timed_out and quick.returncode == 0 and quick.stdout == "hi\n"
