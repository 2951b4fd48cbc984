"""cluster/slurm.sbatch's MPS: each node's Ray under a control daemon of the job's own when the
sweep's trials share GPUs, the daemon stopped after that Ray, at the end and on preemption.

The stand-ins of test_slurm.py (SLURM's commands, ``ray``, a ``python`` that records the sweep's
command) plus the MPS stand-in of tests/mps_helpers.py (this machine has no NVIDIA driver): it
writes its calls to the same log as the others, so the log gives their order. The stand-in
``python`` hands ``-m sweeps.driver.mps`` to the real Python, so the sweep's MPS plan and the
per-node start and stop are the project's own code.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mps_helpers import install_fake_mps
from test_slurm import (
    ADDRESS,
    HOSTNAME,
    JOIN_COUNT,
    RAY,
    SCONTROL,
    SRUN,
    _free_port,
    _write,
    needs_address,
    signatures_cache,
)

ROOT = Path(__file__).resolve().parents[2]
#: every test runs the batch script (seconds a job): not in make test-fast
pytestmark = pytest.mark.train
SCRIPT = ROOT / "cluster" / "slurm.sbatch"

PYTHON = (
    r"""#!/bin/bash
case "$*" in
    "-m sweeps.driver.mps "*) exec "$REAL_PYTHON" "$@" ;;
esac
echo "python $*" >> "$FAKE_LOG"
case "$*" in
    *sweeps/launch.py*)
        trap 'echo "driver stopped by SIGTERM" >> "$FAKE_LOG"; exit 75' TERM
        for _ in $(seq "${FAKE_DRIVER_SECONDS:-0}"); do sleep 0.1; done
        exit 0 ;;
    *ray.nodes*) """
    + JOIN_COUNT
    + r""" ;;
esac
"""
)


def run_job(
    tmp: Path, nodes: list[str], args: list[str], mps: bool = True, term_after_launch=False, **env
) -> tuple[int, str, str, list[str]]:
    """The batch script on ``nodes`` with script arguments ``args``: (exit status, stdout, stderr,
    the stand-ins' calls in order). ``term_after_launch``: SIGTERM to the job (a preemption) once
    the sweep's driver runs."""
    bin_dir, venv_bin = tmp / "bin", tmp / "venv" / "bin"
    bin_dir.mkdir()
    venv_bin.mkdir(parents=True)
    for name, text in (("srun", SRUN), ("scontrol", SCONTROL), ("hostname", HOSTNAME)):
        _write(bin_dir / name, text)
    for name, text in (("ray", RAY), ("python", PYTHON)):
        _write(venv_bin / name, text)
    (venv_bin / "activate").write_text(f'export PATH="{venv_bin}:$PATH"\n')
    log = tmp / "calls.log"
    log.touch()
    if mps:
        install_fake_mps(tmp / "mps-bin")
    (tmp / "sweeps").symlink_to(ROOT / "sweeps")  # the sweep file, as in the submit folder
    base = {
        k: v for k, v in os.environ.items() if not k.startswith(("MEMATTN_", "SLURM_", "CUDA_MPS"))
    }
    path = (
        f"{tmp / 'mps-bin'}{os.pathsep}" if mps else ""
    ) + f"{bin_dir}{os.pathsep}{base['PATH']}"
    full_env = {
        **base,
        "PATH": path,
        "PYTHONPATH": str(ROOT),
        "REAL_PYTHON": sys.executable,
        "HOME": str(tmp),
        # the sweep file's signatures cache of this user, not the empty one of the new HOME (the
        # MPS plan loads the sweep file: 6 s a job importing torch and Lightning to rebuild it)
        **signatures_cache(),
        "FAKE_LOG": str(log),
        "FAKE_MPS_LOG": str(log),  # one log: the order of the calls
        "FAKE_DIR": str(tmp),
        "FAKE_NODES": " ".join(nodes),
        "FAKE_IP_ADDRESS": "127.0.1.1",
        "FAKE_ALL_IPS": "",
        "FAKE_JOINED": str(len(nodes)),
        "SLURM_JOB_NODELIST": f"node[1-{len(nodes)}]",
        "SLURM_JOB_NUM_NODES": str(len(nodes)),
        "SLURM_GPUS_PER_NODE": "h100:1",
        "SLURM_CPUS_PER_TASK": "4",
        "SLURM_SUBMIT_DIR": str(tmp),
        "MEMATTN_VENV": str(tmp / "venv"),
        "MEMATTN_RAY_PORT": str(_free_port()),
        "MEMATTN_RAY_TEMP_DIR": str(tmp / "ray-tmp"),
        "MEMATTN_PROBE_TIMEOUT": "1",
        **env,
    }
    proc = subprocess.Popen(
        ["bash", str(SCRIPT), "sweeps/quickstart.yaml", "--smoke", *args], env=full_env, cwd=tmp,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        if term_after_launch:
            deadline = time.monotonic() + 60
            while "sweeps/launch.py" not in log.read_text() and time.monotonic() < deadline:
                time.sleep(0.1)
            proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        try:  # whatever the script left running
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return proc.returncode, out, err, log.read_text().splitlines()


def index(calls: list[str], start: str) -> int:
    return next(i for i, c in enumerate(calls) if c.startswith(start))


def test_one_node_s_ray_runs_under_a_daemon_that_stops_after_it(tmp_path):
    code, out, err, calls = run_job(tmp_path, ["node1"], ["--set", "resources.gpu=0.5"])
    assert code == 0, err
    assert "MPS: trials share GPUs (resources.gpu 0.5: 2 training processes to a GPU, each an " \
        "unfused trial or a fused group): a control daemon on " \
        f"each node that has MPS ({tmp_path}/ray-tmp/mps)" in out  # fmt: skip
    start, head, launch = (
        index(calls, "start pipe="),
        index(calls, "ray start"),
        index(calls, "python sweeps/launch.py"),
    )
    stopped, quit_ = calls.index("ray head stopped by SIGTERM"), index(calls, "quit pipe=")
    assert start < head < launch < stopped < quit_  # the daemon outlives the Ray it serves
    pipe = calls[start].split()[1].removeprefix("pipe=")
    assert pipe.startswith(f"{tmp_path}/ray-tmp/mps/memattn-mps-") and pipe.endswith("/pipe")
    assert calls[quit_] == f"quit pipe={pipe} node="
    assert not Path(pipe).exists()  # its folder removed once it quit


def test_no_daemon_when_the_trials_do_not_share_a_gpu(tmp_path):
    code, out, err, calls = run_job(tmp_path, ["node1"], [])
    assert code == 0, err
    assert "MPS: none (the trials use no GPU (resources.gpu 0))" in out
    assert not [c for c in calls if c.startswith(("start pipe", "quit pipe"))]
    assert index(calls, "ray start --head")  # Ray itself as before


@needs_address
def test_every_node_has_its_own_daemon(tmp_path):
    ip, _ = ADDRESS
    code, out, err, calls = run_job(
        tmp_path, ["node1", "node2"], ["--set", "resources.gpu=0.25"], MEMATTN_HEAD_IP=ip
    )
    assert code == 0, err
    starts = [c for c in calls if c.startswith("start pipe=")]
    quits = [c for c in calls if c.startswith("quit pipe=")]
    assert [s.rpartition("node=")[2] for s in starts] == ["", "node2"]  # the batch node, node2
    assert sorted(q.rpartition("node=")[2] for q in quits) == ["", "node2"]
    wrapped = f"srun -w node2 python -m sweeps.driver.mps run --want yes --dir {tmp_path}/ray-tmp/mps -- bash -c "
    assert any(c.startswith(wrapped) for c in calls)  # node2's Ray step, under its daemon
    assert len({s.split()[1] for s in starts}) == 2  # a pipe directory each


def test_a_preempted_job_stops_the_daemon_after_its_ray(tmp_path):
    code, out, err, calls = run_job(
        tmp_path, ["node1"], ["--set", "resources.gpu=0.5"], term_after_launch=True,
        FAKE_DRIVER_SECONDS="300",
    )  # fmt: skip
    assert code == 75, err  # preempted (no SLURM here to requeue the job)
    assert "SIGTERM: preempted or cancelled" in out
    driver, head, quit_ = (
        calls.index("driver stopped by SIGTERM"),
        calls.index("ray head stopped by SIGTERM"),
        index(calls, "quit pipe="),
    )
    assert driver < head < quit_


def test_a_sweep_that_requires_mps_stops_on_a_node_without_it(tmp_path):
    code, out, err, calls = run_job(
        tmp_path, ["node1"], ["--set", "resources.gpu=1", "--set", "resources.mps=on"], mps=False
    )
    assert code == 1
    assert "error: the Ray head on node1 exited before listening" in err
    assert "resources.mps is on, but this node has no nvidia-cuda-mps-control" in err
    assert not [c for c in calls if "sweeps/launch.py" in c]
