"""NVIDIA MPS for trials that share a GPU (sweeps/driver/mps.py): what a sweep wants, what a node
can, and the daemon's start and stop around the launcher's sweep and around a cluster node's Ray,
also when what runs under it fails or is preempted.

This machine has no NVIDIA driver, so ``nvidia-cuda-mps-control`` is the stand-in of
tests/mps_helpers.py on PATH: it records its calls (``-d``, ``quit``) with the pipe and log
directories it was given, and checks that they are writable. The decisions, the environment the
trials get, the command lines and the order of start and stop are real; that the daemon then
serves CUDA clients is the GPU benchmarks' check (benchmarks/gpu_benchmarks.py, its share_mps phase).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from mps_helpers import install_fake_mps, mps_calls

from sweeps.driver.mps import (
    LOG_ENV,
    PIPE_ENV,
    main,
    mps_for_sweep,
    node_mps,
    plan_mps,
)
from sweeps.errors import SpecError
from sweeps.plan.mps import MpsPlan
from sweeps.spec import load_spec
from sweeps.spec.launch_record import save_launch
from sweeps.trial.fitting import trainer_kwargs

ROOT = Path(__file__).resolve().parents[3]
QUICKSTART = ROOT / "sweeps" / "quickstart.yaml"


def sweep(*overrides: str):
    return load_spec(QUICKSTART, overrides=list(overrides), profile="smoke")


@pytest.fixture
def fake_mps(tmp_path, monkeypatch) -> Path:
    """The stand-in on PATH, no MPS variables in the environment; returns its call log."""
    log = install_fake_mps(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_MPS_LOG", str(log))
    monkeypatch.delenv(PIPE_ENV, raising=False)
    monkeypatch.delenv(LOG_ENV, raising=False)
    return log


def child_env(tmp_path: Path, log: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in (PIPE_ENV, LOG_ENV)}
    env.update(
        PATH=f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}",
        FAKE_MPS_LOG=str(log),
        PYTHONPATH=str(ROOT),
        RAY_USAGE_STATS_ENABLED="0",
    )
    return env


# ---------------------------------------------------------------- the decisions


@pytest.mark.parametrize(
    "mode, gpu, want",
    [
        ("auto", 0.5, "yes"),
        ("auto", 0.25, "yes"),
        ("auto", 1.0, "no"),  # whole GPUs: nothing is shared
        ("auto", 0.0, "no"),
        ("on", 1.0, "required"),
        ("on", 0.5, "required"),
        ("off", 0.5, "no"),
    ],
)
def test_what_a_sweep_wants(mode, gpu, want):
    assert plan_mps(mode, gpu).want == want
    assert (
        plan_mps("auto", 0.25).reason == "trials share GPUs (resources.gpu 0.25: 4 training "
        "processes to a GPU, each an unfused trial or a fused group)"
    )


def test_what_a_node_can(tmp_path):
    found = {"nvidia-cuda-mps-control": "/usr/bin/nvidia-cuda-mps-control"}.get
    missing = {}.get
    nowhere = tmp_path / "no-daemon"
    assert node_mps("yes", {}, found, nowhere) == (
        "/usr/bin/nvidia-cuda-mps-control",
        "starting one",
    )
    assert node_mps("no", {}, found, nowhere)[0] is None
    binary, why = node_mps("yes", {}, missing, nowhere)
    assert binary is None and "no nvidia-cuda-mps-control on this node's PATH" in why
    with pytest.raises(RuntimeError, match="resources.mps is on, but this node has no"):
        node_mps("required", {}, missing, nowhere)
    # a daemon the site runs is used as it is, even when the sweep requires one
    binary, why = node_mps("required", {PIPE_ENV: "/run/mps"}, missing, nowhere)
    assert binary is None and why.startswith("the environment names a running daemon")
    site = tmp_path / "nvidia-mps"
    site.mkdir()
    (site / "control").touch()
    assert node_mps("yes", {}, found, site)[0] is None


def test_the_sweep_file_keys_and_their_refusals():
    assert sweep().spec.resources.mps == "auto" and sweep().spec.trainer.cuda_graphs is False
    with pytest.raises(
        SpecError, match=r"resources\.mps: on shares a GPU .* \(resources\.gpu: 0\)"
    ):
        sweep("resources.mps=on")
    with pytest.raises(SpecError, match=r"resources\.mps"):
        sweep("resources.mps=always")
    # YAML reads a bare on/off as a boolean: taken as the word
    assert sweep("resources.mps=off").spec.resources.mps == "off"
    assert sweep("resources.gpu=1", "resources.mps=on").spec.resources.mps == "on"
    refusals = {
        ("trainer.cuda_graphs=true",): r"trainer\.cuda_graphs: captures training steps on a GPU, "
        r"but the trials train on the CPU \(resources\.gpu: 0\)",
        ("trainer.cuda_graphs=true", "resources.gpu=1", "trainer.precision=bf16-mixed"): (
            "cuda_graphs captures float32 steps; precision bf16-mixed is not"
        ),
        ("trainer.cuda_graphs=true", "resources.gpu=1", "trainer.accumulate_grad_batches=2"): (
            "accumulate_grad_batches must be 1"
        ),
        ("trainer.cuda_graphs=true", "resources.gpu=1", "resources.workers=2"): (
            "is for single-process trials"
        ),
        ("grid.trainer.cuda_graphs=[false, true]",): "the trials train on the CPU",
    }
    for overrides, message in refusals.items():
        with pytest.raises(SpecError, match=message):
            sweep(*overrides)
    ok = sweep("trainer.cuda_graphs=true", "resources.gpu=0.5")
    assert all(p.trainer["cuda_graphs"] is True for p in ok.plans)
    assert "cuda_graphs" not in trainer_kwargs(ok.plans[0].trainer)  # not a Trainer argument


def test_a_cpu_profile_under_the_file_s_own_graphs_names_its_fix(tmp_path):
    """``trainer.cuda_graphs: true`` in the file's trainer section and a smoke profile that
    trains on the CPU: the error names docs/gpu.md's fix, graphs off in that profile, which then
    loads; graphs given on the command line keep the fix of the two keys in one launch."""
    raw = yaml.safe_load(QUICKSTART.read_text())
    raw["trainer"] = {**raw.get("trainer", {}), "cuda_graphs": True}
    raw["resources"] = {**raw.get("resources", {}), "gpu": 0.5}
    raw.setdefault("profiles", {}).setdefault("smoke", {})["resources.gpu"] = 0
    path = tmp_path / "graphs.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert str(info.value) == (
        f"{path}: profiles.smoke: trainer.cuda_graphs: captures training steps on a GPU, but the "
        "trials train on the CPU (resources.gpu: 0); set trainer.cuda_graphs: false in "
        "profiles.smoke, or set resources.gpu there (e.g. 1 or 0.5), or remove cuda_graphs"
    )
    raw["profiles"]["smoke"]["trainer.cuda_graphs"] = False
    path.write_text(yaml.safe_dump(raw))
    assert load_spec(path, profile="smoke").spec.trainer.cuda_graphs is False
    with pytest.raises(SpecError, match=r"set resources\.gpu \(e\.g\. 1 or 0\.5\), or remove"):
        sweep("trainer.cuda_graphs=true")


# ---------------------------------------------------------------- the launcher's daemon


def wants(*overrides: str):
    """The MPS part of the launch plan of the quickstart sweep with ``overrides``."""
    spec = sweep(*overrides).spec
    return plan_mps(spec.resources.mps, spec.resources.gpu)


def test_the_launcher_starts_a_daemon_for_its_own_ray_and_stops_it(fake_mps, capsys):
    with mps_for_sweep(wants("resources.gpu=0.5"), "local") as daemon:
        (start,) = mps_calls(fake_mps)
        assert start == f"start pipe={daemon.pipe} log={daemon.log} node="
        assert os.environ[PIPE_ENV] == str(daemon.pipe) and os.environ[LOG_ENV] == str(daemon.log)
        assert daemon.pipe.is_dir() and oct(daemon.pipe.stat().st_mode & 0o777) == "0o700"
    assert mps_calls(fake_mps) == [start, f"quit pipe={daemon.pipe} node="]
    assert PIPE_ENV not in os.environ and LOG_ENV not in os.environ
    assert not daemon.root.exists()  # its temporary folder went with it
    out = capsys.readouterr().out
    assert (
        "MPS: a control daemon for this sweep's trials (trials share GPUs (resources.gpu 0.5" in out
    )
    assert "MPS: the daemon stopped" in out


def test_the_daemon_is_stopped_when_the_sweep_fails(fake_mps):
    with pytest.raises(ZeroDivisionError):
        with mps_for_sweep(wants("resources.gpu=0.5"), "local") as daemon:
            1 / 0  # noqa: B018
    assert [c.split()[0] for c in mps_calls(fake_mps)] == ["start", "quit"]
    assert PIPE_ENV not in os.environ and not daemon.root.exists()


def test_no_daemon_where_none_is_wanted_or_the_launcher_joins_a_cluster(fake_mps, capsys):
    for overrides, address in ([(), "local"], [("resources.gpu=1",), "local"]):
        with mps_for_sweep(wants(*overrides), address) as daemon:
            assert daemon is None
    with mps_for_sweep(wants("resources.gpu=0.5"), "127.0.0.1:6379") as daemon:
        assert daemon is None
    assert mps_calls(fake_mps) == []
    assert "the cluster's scripts run a daemon on each node" in capsys.readouterr().out


def test_a_sweep_that_requires_mps_stops_before_ray_where_there_is_none(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-cuda-mps-control anywhere
    monkeypatch.delenv(PIPE_ENV, raising=False)
    with pytest.raises(SystemExit) as stop:
        with mps_for_sweep(wants("resources.gpu=0.5", "resources.mps=on"), "local"):
            pytest.fail("the sweep must not start")
    assert stop.value.code == 2
    assert "error: resources.mps is on, but this node has no nvidia-cuda-mps-control" in (
        capsys.readouterr().err
    )


def test_a_daemon_that_does_not_start(fake_mps, monkeypatch, capsys):
    """auto: the sweep runs without it, said; on: it stops before Ray with the program's words."""
    monkeypatch.setenv("FAKE_MPS_FAIL_START", "1")
    with mps_for_sweep(wants("resources.gpu=0.5"), "local") as daemon:
        assert daemon is None and PIPE_ENV not in os.environ
    err = capsys.readouterr().err
    assert "warning: MPS not started (" in err and "mps-control -d failed: An instance" in err
    with pytest.raises(SystemExit):
        with mps_for_sweep(wants("resources.gpu=0.5", "resources.mps=on"), "local"):
            pass
    assert "already running" in capsys.readouterr().err


def test_without_a_daemon_an_auto_arrangement_names_the_launch_that_plans_without_mps(
    tmp_path, monkeypatch, capsys
):
    """``resources.gpu: auto`` put trials several to a GPU counting on MPS: with no control
    program, or a daemon that fails, the warning says so and names --set resources.mps=off; on a
    machine without an NVIDIA GPU nothing is said of time-slicing a GPU."""
    auto = MpsPlan("yes", "the plan puts 8 trials alone to a GPU (resources.gpu auto)")
    gpu_bin = tmp_path / "gpu"
    gpu_bin.mkdir()
    (gpu_bin / "nvidia-smi").write_text("#!/bin/sh\n")
    (gpu_bin / "nvidia-smi").chmod(0o755)
    monkeypatch.delenv(PIPE_ENV, raising=False)
    fix = (
        "the trials time-slice the GPU, but the plan's GPU arrangement (resources.gpu auto) "
        "assumed MPS; relaunch with --set resources.mps=off: the plan then costs shared GPUs as "
        "time-sliced (and keeps any fused groups)"
    )
    monkeypatch.setenv("PATH", str(gpu_bin))  # a GPU, no nvidia-cuda-mps-control
    with mps_for_sweep(auto, "local", arranged=True) as daemon:
        assert daemon is None
    said = capsys.readouterr()
    assert said.err == (
        "warning: MPS: none started (the plan puts 8 trials alone to a GPU (resources.gpu auto), "
        f"but no nvidia-cuda-mps-control on this node's PATH): {fix}\n"
    )
    with mps_for_sweep(wants("resources.gpu=0.5"), "local") as daemon:  # a number: as it was
        assert daemon is None
    assert (
        "but no nvidia-cuda-mps-control on this node's PATH): the trials time-slice the GPU\n"
        in (capsys.readouterr().out)
    )
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))  # no GPU at all
    with mps_for_sweep(auto, "local", arranged=True) as daemon:
        assert daemon is None
    said = capsys.readouterr()
    assert "time-slice" not in said.out + said.err and "--set resources.mps" not in said.err
    assert said.out == "MPS: none started (no NVIDIA GPU on this machine: no nvidia-smi on PATH)\n"
    log = install_fake_mps(gpu_bin)  # a daemon that fails to start
    monkeypatch.setenv("PATH", str(gpu_bin))
    monkeypatch.setenv("FAKE_MPS_LOG", str(log))
    monkeypatch.setenv("FAKE_MPS_FAIL_START", "1")
    with mps_for_sweep(auto, "local", arranged=True) as daemon:
        assert daemon is None
    err = capsys.readouterr().err
    assert err.startswith("warning: MPS not started (") and err.endswith(f"); {fix}\n")
    (gpu_bin / "nvidia-smi").unlink()
    with mps_for_sweep(auto, "local", arranged=True) as daemon:
        assert daemon is None
    err = capsys.readouterr().err
    assert "time-slice" not in err and err.endswith("); no NVIDIA GPU on this machine: no "
                                                    "nvidia-smi on PATH\n")  # fmt: skip


@pytest.mark.ray
def test_the_local_ray_s_workers_see_the_daemon_and_ray_stops_before_it(tmp_path):
    """In a process of its own (a private Ray): a Ray task reads the pipe directory from its
    environment; after the block Ray is down and the daemon was told to quit."""
    log = install_fake_mps(tmp_path / "bin")
    script = textwrap.dedent(
        f"""
        import os, ray
        from sweeps.driver.mps import mps_for_sweep
        from sweeps.plan.mps import plan_mps
        from sweeps.spec import load_spec
        sweep = load_spec({str(QUICKSTART)!r}, overrides=["resources.gpu=0.5"], profile="smoke")
        with mps_for_sweep(plan_mps(sweep.spec.resources.mps, 0.5), "local") as daemon:
            ray.init(address="local", num_cpus=1, include_dashboard=False,
                     object_store_memory=80 * 2**20, log_to_driver=False)
            seen = ray.get(ray.remote(lambda: os.environ.get("{PIPE_ENV}")).remote())
            print("task saw", seen, "daemon", daemon.pipe)
        print("ray after the block:", ray.is_initialized())
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], env=child_env(tmp_path, log), capture_output=True,
        text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    seen = next(line for line in out.stdout.splitlines() if line.startswith("task saw"))
    _, _, pipe, _, daemon = seen.split()
    assert pipe == daemon and pipe.endswith("/pipe")
    assert "ray after the block: False" in out.stdout
    assert mps_calls(log)[-1] == f"quit pipe={pipe} node="


def test_a_preempted_launcher_stops_the_daemon(tmp_path):
    """SIGTERM (a scheduler's preemption) to a process inside Preemption and mps_for_sweep, as
    run_sweep nests them: the stop unwinds the block and the daemon is told to quit."""
    log = install_fake_mps(tmp_path / "bin")
    script = textwrap.dedent(
        f"""
        import time
        from sweeps.driver.mps import mps_for_sweep
        from sweeps.driver.preemption import Preemption
        from sweeps.plan.mps import plan_mps
        from sweeps.spec import load_spec
        sweep = load_spec({str(QUICKSTART)!r}, overrides=["resources.gpu=0.5"], profile="smoke")
        with Preemption() as preemption, mps_for_sweep(plan_mps(sweep.spec.resources.mps, 0.5), "local"):
            print("running", flush=True)
            time.sleep(60)
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], env=child_env(tmp_path, log), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    try:
        while "running" not in proc.stdout.readline():
            pass
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert "SIGTERM: preempted" in err
    assert [c.split()[0] for c in mps_calls(log)] == ["start", "quit"]


# ---------------------------------------------------------------- the cluster's command line


def mps_command(tmp_path: Path, log: Path, *args: str, **popen) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sweeps.driver.mps", *args], env=child_env(tmp_path, log),
        capture_output=True, text=True, timeout=60, cwd=ROOT, **popen,
    )  # fmt: skip


def test_plan_says_what_the_sweep_wants(tmp_path):
    log = install_fake_mps(tmp_path / "bin")
    shared = mps_command(
        tmp_path, log, "plan", str(QUICKSTART), "--smoke", "--set", "resources.gpu=0.5"
    )
    assert shared.stdout.strip() == f"yes {plan_mps('auto', 0.5).reason}"
    assert mps_command(tmp_path, log, "plan", str(QUICKSTART), "--smoke").stdout.startswith(
        "no the trials use no GPU"
    )
    broken = mps_command(tmp_path, log, "plan", str(QUICKSTART), "--set", "resources.gpu=-1")
    assert broken.returncode == 0 and broken.stdout.startswith("no (the sweep file did not load")
    # resources.gpu auto (the shipped GPU sweeps'): what the launch's plan arranges, here trials
    # alone several to a GPU (it read resources.gpu auto as one whole GPU a trial, and said no)
    auto = mps_command(tmp_path, log, "plan", str(ROOT / "sweeps" / "k_vs_length.yaml"))
    assert auto.stdout.startswith("yes the plan puts "), auto.stdout + auto.stderr
    assert auto.stdout.strip().endswith("trials alone to a GPU (resources.gpu auto)")


def test_plan_of_a_resumed_sweep_reads_the_first_runs_settings(tmp_path):
    """A resubmission with only ``--resume`` (and a budget) was planned from the sweep file: the
    nodes' daemons followed it, not the first run's ``--set``, which the launcher resumes with."""
    log = install_fake_mps(tmp_path / "bin")
    out = tmp_path / "out"
    folder = out / load_spec(QUICKSTART).name
    save_launch(folder, ["resources.gpu=0.5"], "smoke")
    (folder / "results.csv").write_text("trial_id\n")  # the folder holds a sweep
    plan = ["plan", str(QUICKSTART), "--output", str(out)]
    resumed = mps_command(tmp_path, log, *plan, "--resume", "--set", "budget.hours=2")
    assert resumed.stdout.strip() == f"yes {plan_mps('auto', 0.5).reason}", resumed.stderr
    assert mps_command(tmp_path, log, *plan, "--smoke").stdout.startswith(
        "no the trials use no GPU"
    )


def test_run_puts_a_command_under_the_node_s_daemon_and_stops_it_whatever_the_command_does(
    tmp_path,
):
    log = install_fake_mps(tmp_path / "bin")
    folder = tmp_path / "job-tmp"
    failed = mps_command(
        tmp_path, log, "run", "--want", "yes", "--dir", str(folder), "--",
        "sh", "-c", 'echo "child sees $CUDA_MPS_PIPE_DIRECTORY"; exit 3',
    )  # fmt: skip
    assert failed.returncode == 3, failed.stderr
    start, quit_ = mps_calls(log)
    pipe = start.split()[1].removeprefix("pipe=")
    assert pipe.startswith(f"{folder}/memattn-mps-") and quit_ == f"quit pipe={pipe} node="
    assert f"child sees {pipe}" in failed.stdout
    assert "the daemon stopped" in failed.stdout and not Path(pipe).exists()
    # a command that cannot be run: one line and a shell's 127 (it was a traceback), the daemon
    # stopped all the same; without a daemon likewise, where this process would have become it
    missing = mps_command(
        tmp_path, log, "run", "--want", "yes", "--dir", str(folder), "--", "/no/such/command",
    )  # fmt: skip
    said = "error: cannot run '/no/such/command' (No such file or directory)"
    assert missing.returncode == 127 and missing.stderr.startswith(said), missing.stderr
    assert "Traceback" not in missing.stderr and "the daemon stopped" in missing.stdout
    assert [c.split()[0] for c in mps_calls(log)] == ["start", "quit", "start", "quit"]
    argv = ["run", "--want", "no", "--dir", str(folder), "--", "/no/such/command"]
    assert main(argv) == 127


def test_run_passes_sigterm_on_and_stops_the_daemon_after_the_command(tmp_path):
    """The batch script stops a node's Ray with SIGTERM to the process it started (this one)."""
    log = install_fake_mps(tmp_path / "bin")
    marker = tmp_path / "child-got-term"
    proc = subprocess.Popen(
        [sys.executable, "-m", "sweeps.driver.mps", "run", "--want", "required", "--dir",
         str(tmp_path / "job-tmp"), "--", "bash", "-c",
         f'trap "touch {marker}; exit 0" TERM; echo started; while :; do sleep 0.1; done'],
        env=child_env(tmp_path, log), stdout=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    try:
        while "started" not in proc.stdout.readline():
            pass
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
    assert marker.exists()
    assert [c.split()[0] for c in mps_calls(log)] == ["start", "quit"]


def test_run_without_mps_on_the_node_runs_the_command_alone(tmp_path):
    log = tmp_path / "never-written"
    env_path = f"{tmp_path}{os.pathsep}/usr/bin{os.pathsep}/bin"
    args = ["run", "--want", "yes", "--dir", str(tmp_path), "--", "sh", "-c", "exit 4"]
    env = {**child_env(tmp_path, log), "PATH": env_path}
    out = subprocess.run(
        [sys.executable, "-m", "sweeps.driver.mps", *args], env=env, capture_output=True, text=True,
        timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 4 and "none started (no nvidia-cuda-mps-control" in out.stdout
    required = subprocess.run(
        [sys.executable, "-m", "sweeps.driver.mps", *args[:2], "required", *args[3:]], env=env,
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert (
        required.returncode == 1 and "resources.mps is on, but this node has no" in required.stderr
    )


@pytest.mark.slow
@pytest.mark.ray
def test_a_launched_sweep_that_shares_gpus_runs_under_the_daemon(tmp_path):
    """The launcher itself (a private local Ray, one smoke trial; no GPU here, so the trial falls
    back to the CPU after the daemon started): started before Ray, stopped after the sweep."""
    log = install_fake_mps(tmp_path / "bin")
    out = subprocess.run(
        [sys.executable, "sweeps/launch.py", "sweeps/quickstart.yaml", "--smoke",
         "--set", "resources.gpu=0.5", "--set", "timing.enabled=false",
         "--set", "heldout.enabled=false", "--address", "local", "--num-cpus", "2",
         "--output", str(tmp_path / "out")],
        env={**child_env(tmp_path, log), "WANDB_MODE": "offline"}, capture_output=True,
        text=True, timeout=900, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    started = next(i for i, line in enumerate(lines) if line.startswith("MPS: a control daemon"))
    joined = next(i for i, line in enumerate(lines) if line.startswith("Ray: joined"))
    assert started < joined and lines[-1] != "" and "MPS: the daemon stopped" in lines
    start, quit_ = mps_calls(log)
    assert start.startswith("start pipe=") and quit_.startswith("quit pipe=")


def test_the_wrapper_and_the_launcher_start_light():
    """``python -m sweeps.driver.mps run`` wraps every command of a SLURM job on every node, and
    ``sweeps/launch.py`` answers ``--dry-run`` and ``--help`` before it needs a model: neither
    imports pandas, torch or Ray to start (the wrapper not even the sweep file's reader)."""
    code = (
        "import sys, sweeps.driver.mps; a = set(sys.modules); import sweeps.launch; "
        "b = set(sys.modules); heavy = ('pandas', 'torch', 'ray', 'pydantic'); "
        "print([m for m in heavy if m in a], [m for m in heavy if m in b])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.split("\n")[0] == "[] ['pydantic']", done.stdout
