"""cluster/slurm.sbatch on a real two-node SLURM made on this machine by
``cluster/slurm-local.sh --nodes 2``: node 1 is this host, node 2 a second slurmd in a network
namespace of its own (its own address on a veth pair, host name, /tmp and /dev/shm), and the sweep's
folder on a bindfs (FUSE) mount both nodes see, standing in for the shared filesystem (the launcher
refuses a node-local disk once a node is on another address). Slow, and run only when asked
(``MEMATTN_REAL_SLURM=1`` or ``CI=true``: see slurm_helpers.py).

- The ordinary two-node job: both nodes join Ray, one trial runs on each (every node has 1 CPU, a
  trial needs 1), the job ends with the results table. It is the uninterrupted run of the next test.
- A lost node: the moment the trial on node 2 has reported a checkpoint, every process of node 2's
  Ray (its ``ray start``, raylet, the trial's worker...) is killed with SIGKILL, as when its machine
  goes. The trial moves to node 1 once node 1's trial frees the CPU, continues from that checkpoint
  and finishes: results.csv says ``moved`` 1 and no failure, and the results equal the
  uninterrupted job's. Equal means: every trial's status, final step and final validation metrics
  (every ``val/`` column of results.csv but the decode time, a wall-clock figure) are the same
  strings, to the last digit. A fit resumed from a checkpoint ends bit for bit where the
  uninterrupted fit ends (tests/sweeps/driver/test_exact_resume.py), on either node.

The lost-node test prints its figures: seconds from the kill to the move (Tune told), to the trial
training again on node 1, and the steps trained again. About 3 minutes for both on a 2-core machine.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import slurm_helpers
import yaml
from slurm_helpers import SETUP, VENV, Job, free_port, token, trial_reports, why_not

pytestmark = [
    pytest.mark.skipif(why_not() is not None, reason=why_not() or ""),
    pytest.mark.slow,
    pytest.mark.ray,
    pytest.mark.xdist_group("slurm-two-nodes"),
]

MAX_STEPS, EVERY = 300, 50
KILL_AT = 2 * EVERY  # node 2's trial is killed once it has reported this step (a checkpoint)
NAME = "twonodes"
SPEC = {
    "name": NAME,
    "task": {"name": "copy", "vocab_size": 10, "max_length": 6, "train_size": 512,
             "val_size": 32, "batch_size": 16},
    "model": {"preset": "tiny", "lr": 0.003, "val_beam_size": 1},
    "grid": {"model": [{"attention": "none"}, {"attention": "bahdanau"}]},
    "seeds": [0],
    "metric": {"name": "val/bleu", "goal": "maximize"},
    "trainer": {"max_steps": MAX_STEPS, "val_check_interval": EVERY, "gradient_clip_val": 1.0},
    "resources": {"cpu": 1},
    "failure": {"max_failures": 0},  # a lost node is a move, not a failure: nothing to retry
    "timing": {"enabled": False},
    "heldout": {"enabled": False},
    "wandb": {"mode": "disabled"},
}  # fmt: skip
NOT_COMPARED = {"val/decode_seconds"}


@pytest.fixture(scope="module")
def two_nodes():
    """The two-node cluster, set up (or found running) by cluster/slurm-local.sh --nodes 2; what
    this session started of it (daemons, namespace, mount) is stopped and removed at the end."""
    try:
        said, started = slurm_helpers.set_up("--nodes", "2")
    except RuntimeError as exc:
        pytest.skip(f"two-node SLURM could not be set up here: {exc}")
    nodes = re.search(
        r"two nodes: (\S+) at (\S+) and (\S+) at (\S+) \(network namespace (\S+)\), "
        r"the shared filesystem at (\S+)",
        said,
    )
    submit = re.search(r"SLURM_CONF=(\S+) sbatch .* MEMATTN_HEAD_INTERFACE=(\S+) ", said)
    assert nodes and submit, said
    cluster = SimpleNamespace(
        node1=nodes.group(1), ip1=nodes.group(2), node2=nodes.group(3), ip2=nodes.group(4),
        netns=nodes.group(5), shared=Path(nodes.group(6)), conf=submit.group(1),
        interface=submit.group(2),
    )  # fmt: skip
    folder = Path(tempfile.mkdtemp(prefix="test-", dir=cluster.shared))
    (folder / f"{NAME}.yaml").write_text(yaml.safe_dump(SPEC))
    cluster.folder, cluster.jobs = folder, []
    try:
        yield cluster
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        for job_id in cluster.jobs:  # node 1's Ray session files (node 2's /tmp goes with it)
            shutil.rmtree(f"/tmp/ray-slurm-{job_id}", ignore_errors=True)
        if started:
            subprocess.run(["bash", str(SETUP), "stop", "--nodes", "2"], timeout=180)


def submit(cluster, run: str, timeout: float = 900) -> tuple[Job, Path]:
    """The sweep as a two-node job (1 CPU per node, no GPU), its output in the shared folder."""
    out = cluster.folder / run
    env = slurm_helpers.env(
        SLURM_CONF=cluster.conf, MEMATTN_VENV=str(VENV), MEMATTN_RAY_PORT=str(free_port()),
        MEMATTN_HEAD_INTERFACE=cluster.interface, **token(),
    )  # fmt: skip
    options = [
        "--nodes=2", "--gpus-per-node=0", "--cpus-per-task=1", "--time=00:15:00",
        f"--job-name=memattn-{run}",
    ]  # fmt: skip
    spec = str(cluster.folder / f"{NAME}.yaml")
    job = slurm_helpers.sbatch(
        cluster.folder / f"{run}.log", options, [spec, "--output", str(out)], timeout, env
    )
    cluster.jobs.append(job.id)
    return job, out / NAME


def results(exp: Path) -> dict[str, dict[str, str]]:
    with (exp / "results.csv").open() as f:
        return {r["cell"]: r for r in csv.DictReader(f)}


def compared(row: dict[str, str]) -> dict[str, str]:
    """What must equal the uninterrupted run's (the module docstring's "equal")."""
    keys = [k for k in row if k.startswith("val/") and k not in NOT_COMPARED]
    return {k: row[k] for k in ["status", "step", *keys]}


@pytest.fixture(scope="module")
def uninterrupted(two_nodes):
    return submit(two_nodes, "uninterrupted")


def test_the_sweep_runs_on_two_nodes(two_nodes, uninterrupted):
    job, exp = uninterrupted
    assert job.code == 0 and job.fields.get("JobState") == "COMPLETED", job
    assert f"all 1 other node(s) reach {two_nodes.ip1}:" in job.log, job
    assert "2 of 2 node(s) joined" in job.log and "2 node(s), 2 CPUs" in job.log, job
    rows = results(exp)
    assert {r["status"] for r in rows.values()} == {"done"} and len(rows) == 2, rows
    assert {r["moved"] for r in rows.values()} == {"0"} and {
        r["retries"] for r in rows.values()
    } == {"0"}
    # one trial on each node, each all the way
    placed = sorted(
        sorted({(r["hostname"], r["node_ip"]) for r in lines})
        for lines in trial_reports(exp).values()
    )
    assert placed == [[(two_nodes.node1, two_nodes.ip1)], [(two_nodes.node2, two_nodes.ip2)]]
    # the job ends with the results and the files written; after them only trial output that Ray
    # forwards late and the workers' Ray stopping quietly
    lines = [line for line in job.log.splitlines() if line.strip()]
    wrote = max(i for i, line in enumerate(lines) if line.startswith("wrote "))
    late = re.compile(r"^((\x1b\[\d+m)?\(\w+ pid=\d+\)|.*\sINFO node\.py:\d+ -- )")
    assert [line for line in lines[wrote + 1 :] if not late.match(line)] == [], job
    assert not re.search(r"srun: error|Killed|exited unexpectedly", job.log), job


def node2_ray(cluster, job_id: str) -> list[int]:
    """The processes of node 2's Ray for this job: its `ray start` (found in node 2's network
    namespace by its --temp-dir) and everything under it (raylet, workers, agents)."""
    pids = subprocess.run(
        ["ip", "netns", "pids", cluster.netns], capture_output=True, text=True
    ).stdout.split()
    children: dict[int, list[int]] = {}
    argv: dict[int, list[str]] = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
                argv[int(proc.name)] = (proc / "cmdline").read_bytes().decode().split("\0")
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(proc.name))
    starts = [
        int(p) for p in pids
        if f"--temp-dir=/tmp/ray-slurm-{job_id}" in argv.get(int(p), [])
        and any(a.endswith("/ray") and b == "start" for a, b in zip(argv[int(p)], argv[int(p)][1:]))
    ]  # fmt: skip
    found, todo = [], list(starts)
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def kill_node2_at_its_checkpoint(cluster, run: str, seen: dict) -> None:
    """Watch the job: once the trial on node 2 has reported step KILL_AT, SIGKILL node 2's Ray;
    then note when the job's log says the trial moved."""
    exp, log = cluster.folder / run / NAME, cluster.folder / f"{run}.log"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and "killed" not in seen and "stop" not in seen:
        for trial, lines in (trial_reports(exp) if exp.exists() else {}).items():
            if lines and lines[-1]["node_ip"] == cluster.ip2 and lines[-1]["step"] >= KILL_AT:
                env = slurm_helpers.env(SLURM_CONF=cluster.conf)
                job_id = subprocess.run(
                    ["squeue", "--noheader", f"--name=memattn-{run}", "--format=%i"],
                    capture_output=True, text=True, env=env,
                ).stdout.strip()  # fmt: skip
                victims = node2_ray(cluster, job_id)
                for pid in victims:
                    os.kill(pid, signal.SIGKILL)
                seen.update(killed=time.time(), trial=trial, step=lines[-1]["step"],
                            victims=len(victims), reports=lines)  # fmt: skip
                break
        time.sleep(0.2)
    while time.monotonic() < deadline and "detected" not in seen and "stop" not in seen:
        if "was lost; it continues from its checkpoint" in (
            log.read_text() if log.exists() else ""
        ):
            seen["detected"] = time.time()
        time.sleep(0.2)


def test_a_trial_whose_node_is_lost_moves_and_finishes_as_if_uninterrupted(
    two_nodes, uninterrupted
):
    seen: dict = {}
    watcher = threading.Thread(
        target=kill_node2_at_its_checkpoint, args=(two_nodes, "lost", seen), daemon=True
    )
    watcher.start()
    try:
        job, exp = submit(two_nodes, "lost")
    finally:
        seen["stop"] = True
        watcher.join(timeout=5)
    assert seen.get("victims"), f"node 2's Ray was never killed ({seen}): {job}"
    assert job.code == 0 and job.fields.get("JobState") == "COMPLETED", job

    rows, reference = results(exp), results(uninterrupted[1])
    assert {c: compared(r) for c, r in rows.items()} == {
        c: compared(r) for c, r in reference.items()
    }, job
    trial = seen["trial"].split("_")[0]
    (moved,) = (r for r in rows.values() if r["trial_id"] == trial)
    assert moved["moved"] == "1" and moved["retries"] == "0", moved
    assert all(r["moved"] == "0" for r in rows.values() if r is not moved), rows
    why = re.fullmatch(
        r"node [0-9a-f]{8} was lost\b.*, continued from step (\d+)", moved["moved_why"]
    )
    assert why, moved["moved_why"]
    step = int(why.group(1))
    assert f"continues from its checkpoint at step {step} on another node" in job.log, job
    assert "1 trial(s) lost their node and continued from a checkpoint" in job.log, job

    # its reports: every validation on node 2 up to the kill, then on node 1 from its last
    # checkpoint there (a new start of the trial), none twice, none missing
    reports = trial_reports(exp)[seen["trial"]]
    n = sum(r["hostname"] == two_nodes.node2 for r in reports)
    where = [(r["hostname"], r["step"]) for r in reports]
    assert where == [(two_nodes.node2, s) for s in range(EVERY, step + 1, EVERY)] + [
        (two_nodes.node1, s) for s in range(step + EVERY, MAX_STEPS + 1, EVERY)
    ], (where, moved["moved_why"])
    assert step >= KILL_AT and reports[n]["iterations_since_restore"] == 1, reports[n]

    figures = lost_node_figures(seen, exp, rows, moved, step)
    print(f"\ntwo-node lost node (job {job.id}, {job.seconds:.0f} s): {figures}")


def lost_node_figures(seen: dict, exp: Path, rows: dict, moved: dict, step: int) -> str:
    """The figures for cluster/README.md, from the watcher's clock and the trials' own records
    (phases.json: when a trial process entered the trainable and left it, wall-clock)."""

    def phases(trial_id: str) -> dict:
        (folder,) = exp.glob(f"{trial_id}_*")
        return json.loads((folder / "phases.json").read_text())

    other = next(r for r in rows.values() if r is not moved)
    freed = phases(other["trial_id"])["left"]  # node 1's CPU free again
    entered = phases(moved["trial_id"])["entered"]  # the moved trial's process on node 1
    kill, detected = seen["killed"], seen.get("detected", float("nan"))
    lines = seen["reports"]
    pace = (lines[-1]["step"] - lines[0]["step"]) / max(
        1e-9, lines[-1]["time_total_s"] - lines[0]["time_total_s"]
    )  # steps per second on node 2
    since = max(0.0, kill - lines[-1]["timestamp"])
    return (
        f"kill -> move recorded {detected - kill:.1f} s; node 1's CPU free "
        f"{max(0.0, freed - kill):.1f} s after the kill; restarted on node 1 "
        f"{entered - max(detected, freed):.1f} s after that (trial process entered; "
        f"{entered - kill:.1f} s after the kill); continued from step {step}, its last checkpoint; "
        f"the kill came {since:.1f} s after the step-{lines[-1]['step']} report at {pace:.0f} "
        f"steps/s: about {lines[-1]['step'] - step + pace * since:.0f} steps trained again "
        f"(at most {2 * EVERY}: val_check_interval {EVERY}, and a trial runs one report ahead)"
    )
