"""Sweeps on a Ray cluster: placement, fault tolerance, DDP trials, and the cluster configs.

The cluster tests start a multi-node Ray cluster on this one machine (``ray.cluster_utils.Cluster``;
the nodes declare GPUs that do not exist, so Ray's placement can be checked while the trials
themselves train on CPU: ``MEMATTN_SIMULATED_GPUS=1``) and run sweeps against it through ``launch.py --address``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest
import yaml

ray = pytest.importorskip("ray")

import interrupt_hook  # noqa: E402
import sweep_helpers  # noqa: E402
from sweep_helpers import interrupt_env, interrupted_trials, write_spec  # noqa: E402

from sweeps.driver.cluster import storage_problem  # noqa: E402
from sweeps.launch import main  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
CLUSTER_DIR = ROOT / "cluster"
SECRET = sweep_helpers.SECRET
SMALL_STORE = 80 * 2**20
GPU_NODES = 3
#: one xdist worker runs the whole module: its module-scoped cluster (and the sweeps on it) start
#: once, and first in that worker (tests/conftest.py says why)
pytestmark = pytest.mark.xdist_group("cluster")


def tiny_spec(name: str, **over: Any) -> dict[str, Any]:
    return sweep_helpers.tiny_spec(name, **{"wandb": {"mode": "disabled"}, **over})


def trial_results(exp: Path) -> dict[Path, list[dict[str, Any]]]:
    """Every trial folder of an experiment and its reported results, in order."""
    out = {}
    for f in sorted(exp.glob("*/result.json")):
        out[f.parent] = [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    return out


# ----------------------------------------------------------------------------------------------
# A three-node cluster with fake GPUs


@pytest.fixture(scope="module")
def cluster():
    """Head (no CPUs: trials can only land on the workers) + 3 nodes of 2 CPUs and 1 fake GPU."""
    from ray.cluster_utils import Cluster

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_AUTH_MODE", "disabled")
        mp.setenv("RAY_USAGE_STATS_ENABLED", "0")
        mp.setenv("WANDB_SILENT", "true")
        # the nodes' GPUs exist for placement only: trials given one train on the CPU
        mp.setenv("MEMATTN_SIMULATED_GPUS", "1")
        if ray.is_initialized():
            ray.shutdown()
        c = Cluster(
            initialize_head=True,
            head_node_args={
                "num_cpus": 0,
                "object_store_memory": SMALL_STORE,
                "include_dashboard": False,
            },
        )
        nodes = [
            c.add_node(num_cpus=2, num_gpus=1, object_store_memory=SMALL_STORE)
            for _ in range(GPU_NODES)
        ]
        c.wait_for_nodes()
        try:
            yield c, nodes
        finally:
            ray.shutdown()
            c.shutdown()


@pytest.fixture(scope="module")
def lost_node(cluster, tmp_path_factory) -> SimpleNamespace:
    """One sweep on the cluster that the next test reads: two trials of half a GPU each, one
    after another. The moment the second reports step 30 (the first finished), the node it runs
    on is removed (:mod:`interrupt_hook`, from inside Tune: no polling, no race)."""
    c, nodes = cluster
    tmp = tmp_path_factory.mktemp("lostnode")
    spec = tiny_spec(
        "lostnode",
        grid={"model": [{"attention": "none"}, {"attention": "bahdanau"}]},
        trainer={
            "max_steps": 60,
            "val_check_interval": 10,
        },  # a trial runs at most 2 reports ahead: 50 < 60
        resources={"cpu": 1, "gpu": 0.5},
        max_concurrent_trials=1,
        failure={"max_failures": 0},  # a lost node is a move, not a failure: nothing to retry
    )
    spec["task"]["max_length"] = 3
    out = tmp / "out"
    exp = out / "lostnode"
    seen: dict[str, Any] = {}

    def remove_its_node(trial, result: dict) -> None:
        victim = next((n for n in nodes if n.node_id == result["node_id"]), None)
        if victim is None:
            seen["error"] = "trial not on a removable worker node"
            return
        finished, _ = interrupted_trials(exp)
        finished_lines = (finished / "result.json").read_text()
        seen.update(
            node=victim.node_id,
            finished_node=json.loads(finished_lines.splitlines()[-1])["node_id"],
            finished_lines=finished_lines,
            steps=list(interrupt_hook.STEPS[trial.trial_id]),  # the reports so far, this one too
        )
        c.remove_node(victim)

    with pytest.MonkeyPatch.context() as mp:
        for name, value in interrupt_env(exp, step=30).items():
            mp.setenv(name, value)
        mp.setattr(interrupt_hook, "ACTION", remove_its_node)
        said = io.StringIO()
        with contextlib.redirect_stdout(said):
            code = main(
                [
                    str(write_spec(tmp, spec)),
                    "--address",
                    c.address,
                    "--output",
                    str(out),
                    "--verbose",
                    "1",
                ]
            )
        print(said.getvalue())
    finished, running = interrupted_trials(exp)
    return SimpleNamespace(
        code=code,
        exp=exp,
        seen=seen,
        finished=finished,
        running=running,
        nodes=nodes,
        said=said.getvalue(),
    )


def trials_hold_the_fractional_gpu_they_ask_for(lost_node):
    """``resources.gpu: 0.5`` reaches Ray: every report of every trial (the lost-node sweep's)
    was made holding half of its node's GPU 0 (so two trials can share one GPU); the head, with
    no CPUs, runs none. (Checked by the lost-node test, so the sweep runs once under xdist: the
    two tests it once fed landed on both workers, which ran it twice.)"""
    assert "error" not in lost_node.seen, lost_node.seen.get("error")
    assert lost_node.code == 0
    df = pd.read_csv(lost_node.exp / "results.csv")
    assert len(df) == 2 and (df["status"] == "done").all() and (df["step"] == 60).all()

    placed = trial_results(lost_node.exp)
    assert len(placed) == 2
    print("trials per node:", dict(Counter(rows[-1]["node_id"][:8] for rows in placed.values())))
    reports = [r for rows in placed.values() for r in rows]
    assert all(r["gpu_ids"] == "0" and r["gpu_share"] == 0.5 for r in reports), reports
    assert {r["node_id"] for r in reports} <= {n.node_id for n in lost_node.nodes}


def test_lost_node_mid_trial_resumes_from_checkpoint_on_another_node(lost_node):
    """One trial finishes, then the node running the next is removed mid-trial: the trial
    resumes from its last checkpoint on another node, and every result is present at the end.
    Every trial held the half GPU it asked for (:func:`trials_hold_the_fractional_gpu_they_ask_for`)."""
    trials_hold_the_fractional_gpu_they_ask_for(lost_node)
    seen, exp = lost_node.seen, lost_node.exp
    assert "error" not in seen, seen.get("error")
    assert lost_node.code == 0

    df = pd.read_csv(exp / "results.csv", dtype={"trial_id": str})
    assert sorted(df["status"]) == ["done", "done"] and (df["step"] == 60).all()
    assert (lost_node.finished / "result.json").read_text() == seen["finished_lines"], (
        "a finished trial was re-run"
    )
    rows = trial_results(exp)[lost_node.running]
    steps = [r["step"] for r in rows]
    before = seen["steps"]
    after = steps[len(before) :]
    assert steps[: len(before)] == before and after[-1] == 60
    # continued from its last checkpoint (a report in flight when the node died may be redone)
    assert after[0] >= before[-1] > 10, f"restarted instead of resuming: {before} then {after}"
    assert rows[-1]["node_id"] != seen["node"], "resumed on another node"
    # with max_failures 0: the move is not a failure, and results.csv and the console say so
    moved = df.set_index("trial_id").loc[lost_node.running.name.split("_")[0]]
    assert moved["retries"] == 0 and moved["moved"] == 1, moved.to_dict()
    assert f"node {seen['node'][:8]} was lost" in moved["moved_why"], moved["moved_why"]
    step = int(re.search(r"continued from step (\d+)", moved["moved_why"]).group(1))
    assert step in before[1:], (moved["moved_why"], before)  # a checkpoint it had reported
    assert (df.loc[df["trial_id"] != moved.name, "moved"] == 0).all()
    assert f"node {seen['node'][:8]} was lost" in lost_node.said, "the console says it moved"
    assert "(a move, not a failure: failure.max_failures is not charged)" in lost_node.said
    page = (exp / "results.md").read_text()
    assert "## Trials that lost their node" in page and moved["moved_why"] in page
    assert "1 trial(s) lost their node and continued" in lost_node.said
    print(
        f"steps {before} | {after}; removed node {seen['node'][:8]} at step {before[-1]}; resumed at {after[0]} on {rows[-1]['node_id'][:8]}; "
        f"finished trial ran on {'the removed node' if seen['finished_node'] == seen['node'] else 'another node'}"
    )


@pytest.fixture(scope="module")
def fused_lost_node(cluster, tmp_path_factory) -> SimpleNamespace:
    """Two seeds trained as one fused group (half a GPU for the group: a quarter for each member
    trial); the moment its first member reports step 30, the node that member runs on is removed
    (the group's process started on the first member's node). A node is added back afterwards."""
    c, nodes = cluster
    tmp = tmp_path_factory.mktemp("fusedlost")
    spec = tiny_spec(
        "fusedlost",
        grid={"model": [{"attention": "none"}]},
        seeds=[0, 1],
        trainer={"max_steps": 60, "val_check_interval": 10},
        resources={"cpu": 1, "gpu": 0.5},
        failure={"max_failures": 0},  # a lost node is a move, not a failure
    )
    spec["task"]["max_length"] = 3
    out = tmp / "out"
    exp = out / "fusedlost"
    seen: dict[str, Any] = {}

    def remove_its_node(trial, result: dict) -> None:
        victim = next((n for n in nodes if n.node_id == result["node_id"]), None)
        if victim is None:
            seen["error"] = "trial not on a removable worker node"
            return
        seen.update(node=victim.node_id, trial=trial.trial_id)
        # every member's reports so far, this one too
        seen["steps"] = {t: list(steps) for t, steps in interrupt_hook.STEPS.items()}
        c.remove_node(victim)

    with pytest.MonkeyPatch.context() as mp:
        for name, value in interrupt_env(exp, step=30, finished=0).items():
            mp.setenv(name, value)
        mp.setattr(interrupt_hook, "ACTION", remove_its_node)
        said = io.StringIO()
        with contextlib.redirect_stdout(said):
            code = main(
                [str(write_spec(tmp, spec)), "--address", c.address, "--output", str(out)]
                + ["--verbose", "1"]
            )
        print(said.getvalue())
    nodes.append(c.add_node(num_cpus=2, num_gpus=1, object_store_memory=SMALL_STORE))
    c.wait_for_nodes()
    return SimpleNamespace(code=code, exp=exp, seen=seen, said=said.getvalue())


def test_a_fused_group_whose_node_is_lost_moves_with_its_members(fused_lost_node):
    """The group's members move (not failures: max_failures 0), the group restarts on another
    node from its last state, and every member ends at max_steps with each step reported in
    order from its last checkpoint on."""
    seen, exp = fused_lost_node.seen, fused_lost_node.exp
    assert "error" not in seen, seen.get("error")
    assert fused_lost_node.code == 0, fused_lost_node.said[-3000:]
    df = pd.read_csv(exp / "results.csv", dtype={"trial_id": str})
    assert len(df) == 2 and (df["status"] == "done").all() and (df["step"] == 60).all()
    assert (df["fused_with"] == "g1").all() and (df["retries"] == 0).all()
    victim = df.set_index("trial_id").loc[seen["trial"]]
    assert victim["moved"] == 1 and f"node {seen['node'][:8]} was lost" in victim["moved_why"]
    for trial, rows in trial_results(exp).items():
        steps = [r["step"] for r in rows]
        before = seen["steps"].get(trial.name.split("_")[0], [])
        assert steps[: len(before)] == before and steps[-1] == 60, (trial.name, steps)
        after = steps[len(before) :]
        assert after and after[0] >= before[-1] >= 10, f"restarted: {before} then {after}"
        assert rows[-1]["node_id"] != seen["node"], "finished on another node"
    assert "1 trial(s) lost their node" in fused_lost_node.said or "2 trial(s) lost their node" in (
        fused_lost_node.said
    )


# ----------------------------------------------------------------------------------------------
# Multi-worker DDP trials


def run_ddp_sweep(tmp_path: Path, spec: dict[str, Any], env: dict[str, str]) -> Path:
    """``launch.py`` in a fresh process, on its own local Ray with the dashboard (Ray Train V2 inside
    Tune needs it) and 4 logical CPUs on this 2-core machine: 1 trial driver + 2 workers."""
    pytest.importorskip("ray.dashboard.optional_deps", reason="DDP trials need ray[default]")
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        "sweeps/launch.py",
        str(write_spec(tmp_path, spec)),
        "--num-cpus",
        "4",
        "--address",
        "local",
        "--output",
        str(out),
        "--verbose",
        "0",
    ]
    proc = subprocess.run(
        cmd, cwd=ROOT, env={**_env(), **env}, capture_output=True, text=True, timeout=400
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


@pytest.mark.slow
def test_two_worker_ddp_trial_trains_and_reports(tmp_path):
    """A 2-worker DDP trial (gloo on CPU) through the command line; W&B offline, from rank 0 only."""
    spec = tiny_spec(
        "ddp",
        grid={"model": [{"attention": "memory", "K": 4}]},
        resources={"cpu": 1, "workers": 2},
        wandb={"project": "test", "mode": "offline", "log_heatmaps": False},
    )
    out = run_ddp_sweep(tmp_path, spec, {"WANDB_API_KEY": SECRET, "WANDB_MODE": "offline"})
    df = pd.read_csv(out / "ddp" / "results.csv")
    assert df["status"].tolist() == ["done"] and df["step"].tolist() == [20]
    assert df["val/bleu"].notna().all() and df["val/loss"].notna().all()
    ((trial_dir, rows),) = trial_results(out / "ddp").items()
    assert [r["step"] for r in rows] == [10, 20]
    assert all(r["world_size"] == 2 for r in rows), "trained by two DDP ranks"
    train_run = out / "ddp" / "ddp" / f"train-{rows[-1]['trial_id']}"
    assert list(train_run.glob("checkpoint_*/checkpoint.ckpt")), (
        "Ray Train kept the checkpoints under the run's name"
    )
    runs = list((out / "ddp" / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, "W&B logs from rank 0 only"
    leaked = [p for p in out.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert not leaked, f"the W&B key was written to {leaked}"


@pytest.mark.slow
def test_ddp_trial_whose_worker_fails_resumes_from_its_train_checkpoint(tmp_path):
    """Rank 0 raises once at step 25: Ray Train stops the run, Tune retries the trial, and the new
    driver restores the Train run ``train-<trial id>`` so both ranks continue from step 20."""
    spec = tiny_spec(
        "ddpchaos",
        grid={"model": [{"attention": "bahdanau"}]},
        trainer={"max_steps": 40, "val_check_interval": 10},
        resources={"cpu": 1, "workers": 2},
        chaos={"fail_once_at_step": 25},
        failure={"max_failures": 1},
    )
    out = run_ddp_sweep(tmp_path, spec, {})
    df = pd.read_csv(out / "ddpchaos" / "results.csv")
    assert df["status"].tolist() == ["done"] and df["step"].tolist() == [40]
    assert len(list((out / "ddpchaos" / "chaos").glob("*.failed"))) == 1, (
        "the injected failure happened"
    )
    ((_, rows),) = trial_results(out / "ddpchaos").items()
    assert [r["step"] for r in rows] == [10, 20, 30, 40], "resumed from step 20, not from zero"
    assert all(r["world_size"] == 2 for r in rows)


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "RAY_USAGE_STATS_ENABLED": "0",
        "PYTHONWARNINGS": "ignore::DeprecationWarning",
    }


# ----------------------------------------------------------------------------------------------
# Storage on a multi-host cluster


@pytest.mark.parametrize(
    "storage, hosts, fstype, ok",
    [
        ("/home/me/sweep-results", {"10.0.0.1"}, "ext4", True),  # one machine: local disk is fine
        (
            "/home/me/sweep-results",
            {"10.0.0.1", "10.0.0.2"},
            "ext4",
            False,
        ),  # other hosts can't see it
        ("/tmp/sweeps", {"10.0.0.1", "10.0.0.2"}, "overlay", False),  # a container's own filesystem
        ("/shared/sweeps", {"10.0.0.1", "10.0.0.2"}, "nfs4", True),
        ("/lustre/sweeps", {"10.0.0.1", "10.0.0.2"}, "lustre", True),
        ("s3://bucket/sweeps", {"10.0.0.1", "10.0.0.2"}, None, True),
        ("gs://bucket/sweeps", {"10.0.0.1", "10.0.0.2"}, None, True),
    ],
)
def test_storage_must_be_shared_when_nodes_span_hosts(storage, hosts, fstype, ok):
    problem = storage_problem(storage, hosts, "10.0.0.1", fstype)
    assert (problem is None) == ok, problem
    if problem:
        assert "s3://" in problem and "storage.path" in problem and "10.0.0.2" in problem


def load_tiny(tmp_path: Path, **over: Any):
    from sweeps.spec import load_spec

    return load_spec(str(write_spec(tmp_path, tiny_spec("fit", **over))))


def connected(c) -> None:
    if not ray.is_initialized():
        ray.init(address=c.address, log_to_driver=False)


def test_ddp_trials_are_capped_to_what_the_real_cluster_holds(cluster, tmp_path):
    from sweeps.driver.cluster import check_cluster
    from sweeps.plan.sweep_plan import Paths, build_plan
    from sweeps.stages.train import make_settings, trial_resources

    c, _ = cluster
    connected(c)
    sweep = load_tiny(
        tmp_path, resources={"cpu": 1, "gpu": 1, "workers": 2}, max_concurrent_trials=None
    )
    paths = Paths(output=tmp_path, storage=str(tmp_path))
    fit = check_cluster(sweep, paths, address=c.address)
    # 3 GPUs // 2 per trial = 1 (CPUs: 6 // (1 driver + 2 workers) = 2)
    assert fit.max_concurrent_trials == 1 and fit.gpu == 1
    assert sweep.spec.max_concurrent_trials is None, "the validated spec is left as written"
    # Tune reserves the driver; Ray Train the workers
    settings = make_settings(build_plan(sweep, tmp_path), "disabled", fit)
    assert trial_resources(settings) == {"cpu": 1}


def test_local_storage_fails_once_a_node_joins_from_another_host(cluster, tmp_path):
    """The real cluster: every node on this host, so local storage is fine; then a node joins on
    another address (127.0.0.2) and the same storage is refused, a bucket is not."""
    from sweeps.driver.cluster import (
        NODE_LOCAL_FILESYSTEMS,
        LaunchError,
        check_cluster,
        filesystem_type,
    )
    from sweeps.plan.sweep_plan import Paths

    c, _ = cluster
    connected(c)
    sweep = load_tiny(tmp_path)
    local = Paths(output=tmp_path, storage=str(tmp_path))
    check_cluster(sweep, local, address=c.address)
    if filesystem_type(str(tmp_path)) not in NODE_LOCAL_FILESYSTEMS:
        pytest.skip(f"{tmp_path} is on a shared filesystem here")
    other = c.add_node(num_cpus=0, object_store_memory=SMALL_STORE, node_ip_address="127.0.0.2")
    c.wait_for_nodes()
    try:
        with pytest.raises(
            LaunchError, match=r"other host\(s\) \(127\.0\.0\.2\).*Set storage\.path"
        ):
            check_cluster(sweep, local, address=c.address)
        check_cluster(
            sweep, Paths(output=tmp_path, storage="s3://bucket/sweeps"), address=c.address
        )
    finally:
        c.remove_node(other)


# ----------------------------------------------------------------------------------------------
# The cluster configs: they parse, carry the keys their tools require, and run real commands


@pytest.fixture(scope="module")
def launch_flags() -> set[str]:
    """Flags ``sweeps/launch.py --help`` lists."""
    proc = subprocess.run(
        [sys.executable, "sweeps/launch.py", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return set(re.findall(r"(--[a-z][a-z-]*)", proc.stdout))


def _click_flags(command) -> set[str]:
    return {
        opt.split("=")[0]
        for p in command.params
        for opt in getattr(p, "opts", []) + getattr(p, "secondary_opts", [])
    }


@pytest.fixture(scope="module")
def ray_flags() -> dict[str, set[str]]:
    """Flags of the ``ray`` CLI commands the configs use, read from Ray's own click commands."""
    from ray.dashboard.modules.job.cli import job_cli_group
    from ray.scripts import scripts

    return {
        "start": _click_flags(scripts.start),
        "stop": _click_flags(scripts.stop),
        "status": _click_flags(scripts.status),
        "up": _click_flags(scripts.up),
        "down": _click_flags(scripts.down),
        "exec": _click_flags(scripts.exec),
        "attach": _click_flags(scripts.attach),
        "dashboard": _click_flags(scripts.dashboard),
        "job submit": _click_flags(job_cli_group.commands["submit"]),
        "get-auth-token": _click_flags(scripts.get_auth_token),
    }


@pytest.fixture(scope="module")
def mps_run_flags() -> dict[str, Any]:
    """The options of ``python -m sweeps.driver.mps run``, read from its own parser: flag -> the
    values it takes (None: any)."""
    proc = subprocess.run(
        [sys.executable, "-m", "sweeps.driver.mps", "run", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    flags: dict[str, Any] = {f: None for f in re.findall(r"(--[a-z][a-z-]*)", proc.stdout)}
    choices = re.search(r"--want \{([a-z,]+)\}", proc.stdout)
    assert choices, proc.stdout
    flags["--want"] = set(choices.group(1).split(","))
    return flags


MPS_RUN = ["python", "-m", "sweeps.driver.mps", "run"]


def mps_wrapped(words: list[str]) -> list[str] | None:
    """The command that ``python -m sweeps.driver.mps run [options] -- COMMAND`` runs under a
    node's MPS daemon; None for any other command."""
    if words[:4] != MPS_RUN or "--" not in words:
        return None
    return words[words.index("--") + 1 :]


def mps_problems(words: list[str], mps_run_flags: dict[str, Any]) -> list[str]:
    """What is wrong with an ``mps run`` command line, by the wrapper's own parser: unknown
    options, a ``--want`` it does not take or that starts no daemon, no ``--dir``."""
    options = words[len(MPS_RUN) : words.index("--")]
    bad = [f"unknown {w}" for w in options if w.startswith("--") and w not in mps_run_flags]
    want = options[options.index("--want") + 1] if "--want" in options else None
    if want not in mps_run_flags["--want"] - {"no"}:
        bad.append(f"--want {want} starts no daemon")
    if "--dir" not in options:
        bad.append("no --dir")
    return bad


def shell_commands(text: str) -> list[list[str]]:
    """Simple commands in a shell script or README code block, as word lists: line continuations
    joined, split at shell operators (``;``, ``&&``, ``|``, ``&``, redirections...) outside quotes;
    leading ``VAR=value`` assignments, ``srun``/``setsid``/``nohup ...`` wrappers and ``$ ``
    prompts dropped; the command string of ``ray exec CONFIG "CMD"`` and of ``bash -c 'SCRIPT'
    NAME ARGS`` (``"$@"`` read as ARGS), and the command ``python -m sweeps.driver.mps run ... --
    CMD`` runs, listed as well."""
    text = re.sub(r"\\\n\s*", " ", text)
    commands: list[list[str]] = []
    for line in _logical_lines(text):
        line = line.strip().removeprefix("$ ")
        if not line or line.startswith("#"):
            continue
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        try:
            tokens = list(lexer)
        except ValueError:
            continue
        words: list[str] = []
        for tok in tokens + [";"]:
            if tok and set(tok) <= set(";&|()<>"):
                words = _strip_prefixes(words)
                if words:
                    commands.append(words)
                    if words[:2] == ["ray", "exec"] and len(words) > 3:
                        commands += shell_commands(words[3])
                    if words[:2] == ["bash", "-c"] and len(words) > 2:  # bash -c 'SCRIPT' $0 ARGS
                        script = words[2].replace('"$@"', shlex.join(words[4:]))
                        commands += shell_commands(script)
                    if inner := mps_wrapped(words):  # mps run ... -- COMMAND
                        commands.append(_strip_prefixes(inner))
                words = []
            else:
                words.append(tok)
    return commands


def _logical_lines(text: str) -> list[str]:
    """The text's lines, a line whose quote is still open joined with the next ones (a
    ``bash -c '...'`` script written over several lines is one command)."""
    lines: list[str] = []
    pending = ""
    for line in text.splitlines():
        pending = f"{pending}\n{line}" if pending else line
        if pending.lstrip().startswith("#"):
            lines.append(pending)
            pending = ""
            continue
        try:
            shlex.split(pending, comments=True)
        except ValueError:  # "No closing quotation": the quote goes on past this line
            continue
        lines.append(pending)
        pending = ""
    return lines + ([pending] if pending else [])


def _strip_prefixes(words: list[str]) -> list[str]:
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
        words = words[1:]
    if words and words[0] in ("srun", "exec", "timeout", "setsid", "nohup"):
        words = _drop_wrapper(words)
    return words


def _drop_wrapper(words: list[str]) -> list[str]:
    """``srun --nodes=1 -w "$node" ray start ...`` -> ``ray start ...``."""
    for i, w in enumerate(words):
        if w in ("ray", "python", "python3", "pip", "bash") or w.endswith("/python"):
            return words[i:]
    return []


def check_commands(
    commands: list[list[str]], launch_flags: set[str], ray_flags: dict[str, set[str]]
) -> list[str]:
    """Commands that use a flag their tool does not have, or a file that isn't in the repository."""
    bad = []
    for words in commands:
        for w in words:
            if re.fullmatch(r"cluster/[\w.-]+", w) and not (ROOT / w).exists():
                bad.append(f"no file {w} (in {' '.join(words)})")
        if words[0] == "ray" and len(words) > 1:
            sub = "job submit" if words[1:3] == ["job", "submit"] else words[1]
            if sub in ray_flags:
                after = words.index("--") if "--" in words else len(words)
                used = {w.split("=")[0] for w in words[:after] if w.startswith("--")}
                inner = words[after + 1 :]
                if unknown := used - ray_flags[sub]:
                    bad.append(f"ray {sub}: {sorted(unknown)} in {' '.join(words)}")
                if inner:
                    bad += check_commands([inner], launch_flags, ray_flags)
                continue
        launch = next((i for i, w in enumerate(words) if w.endswith("sweeps/launch.py")), None)
        if launch is not None and (words[0].startswith("python") or words[0].endswith("/python")):
            if (
                unknown := {w.split("=")[0] for w in words[launch:] if w.startswith("--")}
                - launch_flags
            ):
                bad.append(f"launch.py: {sorted(unknown)} in {' '.join(words)}")
            spec = next((w for w in words[launch + 1 :] if w.endswith(".yaml")), None)
            if spec and not spec.startswith("$") and not (ROOT / spec).exists():
                bad.append(f"launch.py: no sweep file {spec}")
    return bad


def test_ray_up_config_is_valid_for_the_cluster_launcher(launch_flags, ray_flags, mps_run_flags):
    from ray.autoscaler._private.util import prepare_config, validate_config

    cfg = yaml.safe_load((CLUSTER_DIR / "aws-gpu.yaml").read_text())
    validate_config(prepare_config(cfg))  # Ray's own schema, after filling in the provider defaults
    for key in (
        "provider",
        "available_node_types",
        "head_node_type",
        "setup_commands",
        "head_start_ray_commands",
        "worker_start_ray_commands",
    ):
        assert cfg.get(key), key
    assert cfg["head_node_type"] in cfg["available_node_types"]
    for name, node in cfg["available_node_types"].items():
        assert {"resources", "node_config"} <= set(node), name
    gpu_types = [n for n in cfg["available_node_types"].values() if n["resources"].get("GPU")]
    assert gpu_types, "a GPU worker type"
    assert cfg["docker"]["image"] == f"rayproject/ray:{ray.__version__}-py311-gpu"
    commands = [
        w
        for c in cfg["setup_commands"]
        + cfg["head_start_ray_commands"]
        + cfg["worker_start_ray_commands"]
        for w in shell_commands(c)
    ]
    assert any(c[:3] == ["ray", "start", "--head"] for c in commands)
    assert any(
        c[:2] == ["ray", "start"] and any(w.startswith("--address") for w in c) for c in commands
    )
    assert any(c[:2] == ["pip", "install"] and any(".[sweep]" in w for w in c) for c in commands)
    assert not check_commands(commands, launch_flags, ray_flags)
    assert "WANDB_API_KEY=" not in (CLUSTER_DIR / "aws-gpu.yaml").read_text().replace(
        'WANDB_API_KEY="$(', ""
    )
    for c in cfg["initialization_commands"]:
        assert subprocess.run(["bash", "-n", "-c", c]).returncode == 0, c

    # the GPU nodes (every worker type) run their Ray under an MPS daemon, as slurm.sbatch does:
    # `mps run ... -- ray start --block` in the background (a start command must return)
    wrapped = [
        (line, words)
        for line in cfg["worker_start_ray_commands"]
        for words in shell_commands(line)
        if mps_wrapped(words)
    ]
    assert wrapped, "the workers' ray start runs under python -m sweeps.driver.mps run"
    for line, words in wrapped:
        assert not mps_problems(words, mps_run_flags), mps_problems(words, mps_run_flags)
        inner = mps_wrapped(words)
        assert inner[:2] == ["ray", "start"] and "--block" in inner, inner
        assert any(w.startswith("--address") for w in inner), inner
        assert line.rstrip().endswith("&"), "in the background: the start command returns"
    starts = [c for c in commands if c[:2] == ["ray", "start"] and "--head" not in c]
    assert starts and all("--block" in c for c in starts), "every worker's ray start is wrapped"

    # Ray's token: synced from your machine as the comment says, and turned on on every node
    text = (CLUSTER_DIR / "aws-gpu.yaml").read_text()
    assert cfg["file_mounts"].get("~/.ray/auth_token") == "~/.ray/auth_token"
    assert "~/.ray/auth_token" in text.split("cluster_name:")[0], "the comment names the file"
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        for line in cfg[key]:
            if "ray start" in line:
                assert "RAY_AUTH_MODE=token" in line, line
    assert any("export RAY_AUTH_MODE=token" in c for c in cfg["setup_commands"]), "ray exec shells"

    # WMT's data: a filesystem every node mounts, at the same path in the containers
    assert "-v /mnt/efs:/mnt/efs" in cfg["docker"]["run_options"]
    assert any("/mnt/efs" in c for c in cfg["initialization_commands"])


def test_kuberay_manifest_has_the_keys_kuberay_requires():
    docs = [d for d in yaml.safe_load_all((CLUSTER_DIR / "kuberay.yaml").read_text()) if d]
    (rc,) = [d for d in docs if d.get("kind") == "RayCluster"]
    assert rc["apiVersion"] == "ray.io/v1" and rc["metadata"]["name"]
    spec = rc["spec"]
    assert spec["rayVersion"] == ray.__version__
    head = spec["headGroupSpec"]
    assert "rayStartParams" in head
    groups = spec["workerGroupSpecs"]
    assert groups and all(
        {"groupName", "replicas", "minReplicas", "maxReplicas", "rayStartParams", "template"}
        <= set(g)
        for g in groups
    )
    assert any(
        c["resources"]["limits"].get("nvidia.com/gpu")
        for g in groups
        for c in g["template"]["spec"]["containers"]
    )
    for pod in [head["template"]] + [g["template"] for g in groups]:
        (container,) = [c for c in pod["spec"]["containers"] if c["name"].startswith("ray-")]
        assert container["image"].startswith(f"rayproject/ray:{ray.__version__}-py311")
        env = {e["name"]: e for e in container.get("env", [])}
        key = env["WANDB_API_KEY"]
        assert "value" not in key and key["valueFrom"]["secretKeyRef"]["name"], (
            "the W&B key comes from a Secret"
        )
        mounts = {m["mountPath"] for m in container.get("volumeMounts", [])}
        assert "/mnt/sweeps" in mounts, "shared storage on every pod"
    pvcs = [d for d in docs if d.get("kind") == "PersistentVolumeClaim"]
    assert pvcs and pvcs[0]["spec"]["accessModes"] == ["ReadWriteMany"]

    # the containers' own commands run KubeRay's generated `ray start`; the GPU workers start an
    # MPS daemon before it (the project is not in the image yet: the daemon itself, not mps run)
    assert rc["metadata"]["annotations"]["ray.io/overwrite-container-cmd"] == "true"
    for pod in [head["template"]] + [g["template"] for g in groups]:
        (container,) = [c for c in pod["spec"]["containers"] if c["name"].startswith("ray-")]
        assert container["command"] == ["/bin/bash", "-lc", "--"]
        (script,) = container["args"]
        assert subprocess.run(["bash", "-n", "-c", script]).returncode == 0, script
        lines = [ln.strip() for ln in script.replace(";", "\n").splitlines()]
        assert lines[-1] == 'exec /bin/bash -c "$KUBERAY_GEN_RAY_START_CMD"', script
        assert "ulimit -n 65536" in lines, "what KubeRay's own command does first"
        if container["resources"]["limits"].get("nvidia.com/gpu"):
            assert "nvidia-cuda-mps-control -d" in script, "MPS on every GPU worker"
            assert script.index("nvidia-cuda-mps-control -d") < script.index("KUBERAY_GEN")
            assert "resources.mps=off" in script, "what to set where the daemon cannot start"
        else:
            assert "mps" not in script.lower(), "no daemon on the CPU head"


def test_slurm_script_starts_ray_then_the_sweep(launch_flags, ray_flags):
    text = (CLUSTER_DIR / "slurm.sbatch").read_text()
    assert text.startswith("#!/bin/bash")
    assert subprocess.run(["bash", "-n", str(CLUSTER_DIR / "slurm.sbatch")]).returncode == 0
    sbatch = dict(re.findall(r"^#SBATCH --([a-z-]+)(?:=(\S+))?", text, flags=re.M))
    assert {"nodes", "gpus-per-node", "cpus-per-task", "ntasks-per-node", "time"} <= set(sbatch)
    commands = shell_commands(text)
    assert any(c[:3] == ["ray", "start", "--head"] and "--block" in c for c in commands)
    assert any(
        c[:2] == ["ray", "start"] and any(w.startswith("--address") for w in c) and "--block" in c
        for c in commands
    )
    launches = [
        c
        for c in commands
        if c[0].startswith("python") and any(w.endswith("sweeps/launch.py") for w in c)
    ]
    assert launches and all("--address" in " ".join(c) for c in launches)
    assert not check_commands(commands, launch_flags, ray_flags)
    assert "WANDB_API_KEY=" not in text


def test_slurm_script_runs_every_nodes_ray_under_mps(mps_run_flags):
    """Where the sweep wants MPS, the head's and each other node's ``ray start`` run under
    ``python -m sweeps.driver.mps run`` (the wrapper's flags checked against its parser)."""
    text = (CLUSTER_DIR / "slurm.sbatch").read_text()
    (array,) = re.findall(r"^\s*mps_run=\((.+)\)\s*$", text, flags=re.M)
    words = shlex.split(array)
    assert words[: len(MPS_RUN)] == MPS_RUN and words[-1] == "--", words
    options = words[len(MPS_RUN) : -1]
    assert {w for w in options if w.startswith("--")} <= set(mps_run_flags), options
    assert {"--want", "--dir"} <= set(options)
    assert "python -m sweeps.driver.mps plan" in text, "--want from the sweep's own plan"
    assert re.search(r'"\$\{mps_run\[@\]\}" ray start --head', text), "the head"
    assert re.search(r'-w "\$node" "\$\{mps_run\[@\]\}"\s*\\?\s*bash -c', text), "the workers"


def test_readme_commands_exist(launch_flags, ray_flags, mps_run_flags):
    text = (CLUSTER_DIR / "README.md").read_text()
    blocks = re.findall(r"```(?:bash|sh|console)\n(.*?)```", text, flags=re.S)
    assert blocks
    commands = [c for b in blocks for c in shell_commands(b)]
    for needed in (["ray", "up"], ["kubectl", "apply"], ["sbatch"], ["ray", "job", "submit"]):
        assert any(c[: len(needed)] == needed for c in commands), needed
    assert any(
        any(w.endswith("sweeps/launch.py") for w in c) and "--address" in c for c in commands
    )
    assert not check_commands(commands, launch_flags, ray_flags)
    # WMT on a cluster: its data on a path every node mounts (the trials read it where they run)
    wmt = [
        c
        for c in commands
        if any(w.endswith("wmt17.yaml") for w in c) and "--resume" not in c and "--smoke" not in c
    ]
    assert wmt
    for c in wmt:
        assert any(w.startswith("task.data_dir=/") for w in c), " ".join(c)
    # the MPS commands it gives are the wrapper's
    for match in re.findall(r"`(python -m sweeps\.driver\.mps run [^`]*)`", text):
        words = shlex.split(match)
        if "--" in words:
            assert not mps_problems(words, mps_run_flags), match
    for f in re.findall(r"\bcluster/[\w.-]+\.(?:yaml|sbatch|txt)\b", text):
        assert (ROOT / f).exists(), f
    assert not re.search(r"WANDB_API_KEY=[\"']?[0-9a-f]{20,}", text), "no literal key in the README"


def test_cluster_requirements_match_pyproject():
    """``cluster/requirements.txt`` (for ``ray job submit``) = the project's dependencies and its
    ``[sweep]`` extra, requirement for requirement (name, extras, version bounds, markers), less
    Ray, which the ``rayproject/ray`` image brings (at a version the project's bound allows)."""
    import tomllib
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    def parsed(reqs: list[str]) -> dict[str, tuple]:
        out: dict[str, tuple] = {}
        for text in reqs:
            r = Requirement(text)
            name = canonicalize_name(r.name)
            assert name not in out, f"{name} listed twice"
            out[name] = (frozenset(r.extras), r.specifier, str(r.marker or ""))
        return out

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = parsed(project["dependencies"] + project["optional-dependencies"]["sweep"])
    ray_extras, ray_bound, _ = wanted.pop("ray")
    assert ray_bound.contains(ray.__version__), (ray_bound, "the image's Ray")
    assert {"default", "tune"} <= ray_extras
    lines = (CLUSTER_DIR / "requirements.txt").read_text().splitlines()
    listed = parsed([ln.split(" #")[0] for ln in lines if ln.strip() and not ln.startswith("#")])
    assert "ray" not in listed, "the image brings Ray"
    assert listed == wanted, {
        n: (listed.get(n), wanted.get(n))
        for n in listed.keys() | wanted.keys()
        if listed.get(n) != wanted.get(n)
    }
    assert "tests/sweeps/driver/test_cluster.py" in "\n".join(lines), "the comment names this test"


def test_command_checker_catches_unknown_flags_and_files(launch_flags, ray_flags):
    """The checker the config tests rely on does fail on a wrong flag or a missing file."""
    bad = shell_commands(
        "ray start --head --num-gpu=1\n"
        "python sweeps/launch.py sweeps/quickstart.yaml --adress auto\n"
        "ray job submit --working-dir . -- python sweeps/launch.py sweeps/nope.yaml\n"
        'ray exec cluster/aws-gpu.yaml "cd x && python sweeps/launch.py sweeps/quickstart.yaml --smok"\n'
        "ray up cluster/missing.yaml\n"
    )
    problems = check_commands(bad, launch_flags, ray_flags)
    assert len(problems) == 5, problems
