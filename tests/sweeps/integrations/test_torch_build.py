"""A GPU held, a CPU used: a sweep asking for ``resources.gpu`` on a Ray that offers GPUs, with a
CPU-only torch (this machine's), stops before any trial trains, with one line naming the torch
build and the fix.

Real Ray: a ``ray.cluster_utils.Cluster`` whose nodes declare GPUs that do not exist, owned by a
process of its own (Ray cannot join such a cluster from a process that ran a local instance
before), and the real command line joining it with ``--address``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

pytest.importorskip("ray")

from sweep_helpers import tiny_spec, write_spec  # noqa: E402

from sweeps.integrations.torch_build import SIMULATED_GPUS, cpu_only_torch, gpu_torch_problem  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
pytestmark = [
    pytest.mark.ray,
    pytest.mark.train,
    pytest.mark.skipif(not cpu_only_torch(), reason="needs a CPU-only torch build"),
]

# the cluster's owner: starts it, prints its address, keeps it until its stdin closes
OWNER = """
import sys
from ray.cluster_utils import Cluster

head_gpus, node_gpus = int(sys.argv[1]), int(sys.argv[2])
store = 80 * 2**20
cluster = Cluster(initialize_head=True, head_node_args={
    "num_cpus": 2 if head_gpus else 0, "num_gpus": head_gpus,
    "object_store_memory": store, "include_dashboard": False})
if node_gpus:
    cluster.add_node(num_cpus=2, num_gpus=node_gpus, object_store_memory=store)
cluster.wait_for_nodes()
print(cluster.address, flush=True)
sys.stdin.read()
cluster.shutdown()
"""


def ray_env(tmp: str) -> dict[str, str]:
    env = {
        **os.environ,
        "RAY_TMPDIR": tmp,  # this test's Ray files only: never another Ray on the machine
        "RAY_AUTH_MODE": "disabled",
        "RAY_USAGE_STATS_ENABLED": "0",
        "WANDB_MODE": "disabled",
    }
    for name in ("RAY_ADDRESS", SIMULATED_GPUS):
        env.pop(name, None)
    return env


def launch_on_cluster(
    tmp_path: Path, head_gpus: int, node_gpus: int
) -> tuple[subprocess.CompletedProcess, Path]:
    """``launch.py --set resources.gpu=1`` on a fresh cluster with these fake GPUs; returns the
    finished command and its output folder."""
    ray_tmp = tempfile.mkdtemp(prefix="rg", dir="/tmp")  # short: Ray's socket paths have a limit
    env = ray_env(ray_tmp)
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(head_gpus), str(node_gpus)],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        address = owner.stdout.readline().strip()
        assert address, "the cluster did not start"
        spec = tiny_spec(
            "gpus",
            grid={"model": [{"attention": "none"}]},
            wandb={"project": "test", "mode": "disabled"},
            failure={"max_failures": 0},
        )
        out = tmp_path / "out"
        done = subprocess.run(
            [sys.executable, "sweeps/launch.py", str(write_spec(tmp_path, spec))]
            + ["--address", address, "--set", "resources.gpu=1", "--output", str(out)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        owner.stdin.close()
        try:
            owner.wait(timeout=60)
        except subprocess.TimeoutExpired:
            owner.kill()
        shutil.rmtree(ray_tmp, ignore_errors=True)
    return done, out


def checkpoints(out: Path) -> list[Path]:
    return [p for p in out.rglob("*") if p.name.startswith("checkpoint") or p.suffix == ".ckpt"]


def test_the_launcher_stops_before_ray_runs_a_trial_when_its_node_offers_a_gpu(tmp_path):
    """The launcher's own node offers a GPU to this CPU-only torch: exit 2, one line naming the
    torch build and the fix, no trial started."""
    done, out = launch_on_cluster(tmp_path, head_gpus=1, node_gpus=0)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("error:")]
    assert f"torch {torch.__version__}" in line and "CPU-only" in line, line
    assert "rm -rf .venv && make venv`" in line and "resources.gpu=0" in line, line
    assert not (out / "gpus" / "results.csv").exists() and not checkpoints(out)


def test_a_trial_given_a_gpu_its_torch_cannot_use_stops_before_training(tmp_path):
    """The GPU is on another node (the launcher cannot see that node's torch): the launcher warns,
    and the trial Ray places on the GPU node stops before it trains, its error naming the torch."""
    done, out = launch_on_cluster(tmp_path, head_gpus=0, node_gpus=1)
    text = done.stdout + done.stderr
    assert done.returncode == 1, text[-4000:]
    assert "warning: the launcher's torch" in done.stdout, done.stdout[-2000:]
    rows = (out / "gpus" / "results.csv").read_text()
    assert "error" in rows and f"torch {torch.__version__}" in rows, rows
    assert "(GPU 0)" in rows and "rm -rf .venv && make venv`" in rows, rows
    assert not checkpoints(out), checkpoints(out)


def test_simulated_gpus_are_for_placement_only(monkeypatch):
    """``MEMATTN_SIMULATED_GPUS=1`` (the cluster tests' fake GPUs) lets trials train on the CPU;
    without it the same torch is refused."""
    assert gpu_torch_problem("here") is not None
    monkeypatch.setenv(SIMULATED_GPUS, "1")
    assert gpu_torch_problem("here") is None
