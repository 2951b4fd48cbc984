"""A sweep whose trials ask for more CPUs than Ray can give one, or DDP trials that ask for more
GPUs than it holds: refused before any trial on the launcher's own local Ray (Tune would wait
without end), with the value that fits."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from sweep_helpers import base_spec

from sweeps.driver.cluster import LaunchError, check_cluster
from sweeps.driver.cpu_fit import (
    cpu_float16_problem,
    local_cpu_note,
    too_few_cpus,
    too_few_gpus,
)
from sweeps.plan.sweep_plan import Paths
from sweeps.spec import build_sweep


def nodes(*cpus: float, dead: float | None = None) -> list[dict]:
    """Nodes as ``ray.nodes()`` lists them (a dead one's CPUs offer nothing)."""
    alive = [{"Alive": True, "Resources": {"CPU": c}} for c in cpus]
    return alive + ([{"Alive": False, "Resources": {"CPU": dead}}] if dead else [])


def test_a_trial_larger_than_every_node_is_named_with_the_cpus_that_fit():
    """k_vs_length.yaml asks cpu=4 a trial; on a 2-core machine without a GPU its trials waited
    for CPUs that never come."""
    r = SimpleNamespace(cpu=4, workers=1)
    assert too_few_cpus(r, nodes(2)) == (
        "a trial needs resources.cpu 4 CPUs on one node and the largest node has 2: no trial "
        "would start; --set resources.cpu=2"
    )
    assert too_few_cpus(r, nodes(2, 2, dead=64)) is not None  # two nodes of 2: not one of 4
    assert too_few_cpus(r, nodes(2, 8)) is None
    assert too_few_cpus(SimpleNamespace(cpu=0.5, workers=1), nodes(0.5)) is None


def test_a_ddp_trial_counts_its_driver_and_workers_on_the_whole_cluster():
    r = SimpleNamespace(cpu=2, workers=4)  # 1 + 4 x 2 = 9 CPUs, spread over nodes
    assert too_few_cpus(r, nodes(4, 4, 1)) is None
    said = too_few_cpus(r, nodes(4, 4))
    assert said.startswith(
        "a DDP trial needs 9 CPUs (its driver, and 4 workers of resources.cpu 2)"
    )
    # each fix fits: 4 workers of 1.75 CPUs (1 + 7 <= 8), or 3 workers of 2 (1 + 6 <= 8)
    assert said.endswith("--set resources.cpu=1.75 or --set resources.workers=3"), said
    small = too_few_cpus(SimpleNamespace(cpu=1, workers=2), nodes(2))  # 3 CPUs asked of 2
    assert small.endswith("--set resources.cpu=0.5 or --set resources.workers=1 (no DDP)"), small
    assert too_few_cpus(SimpleNamespace(cpu=0.5, workers=2), nodes(2)) is None


def test_a_resume_that_does_not_fit_is_told_a_fix_a_resume_takes():
    """A sweep started where a trial's 4 CPUs fit, resumed on a smaller machine: the refusal said
    `--set resources.cpu=2`, which --resume then refused (the first run's resources planned its
    trials). Each refusal on --resume names a machine that fits, or --num-cpus for this one."""
    r = SimpleNamespace(cpu=4, workers=1, asked_gpu="auto")
    fix = "--resume keeps the first run's resources and trainer settings: resume it where "
    said = too_few_cpus(r, nodes(2), resuming=True)
    assert said.endswith(
        f"no trial would start; {fix}a node has 4 CPUs (--address), or --num-cpus 4 (this "
        "machine's Ray counts that many)"
    ), said
    assert too_few_cpus(r, nodes(4)) is None  # what --num-cpus 4 gives the local Ray
    ddp = too_few_cpus(SimpleNamespace(cpu=1.5, workers=2), nodes(2), resuming=True)
    assert ddp.endswith(f"{fix}the cluster has 4 CPUs (--address), or --num-cpus 4 (this "
                        "machine's Ray counts that many)"), ddp  # fmt: skip
    assert too_few_cpus(SimpleNamespace(cpu=1.5, workers=2), nodes(4)) is None
    gpus = too_few_gpus(SimpleNamespace(cpu=1, workers=3), 1.0, 1.0, local=True, resuming=True)
    assert gpus.endswith(f"no trial would start; {fix}Ray holds 3 GPUs (--address)"), gpus
    for text in (said, ddp, gpus, cpu_float16_problem(["16-mixed"], r, resuming=True)):
        assert "--set" not in text and fix in text, text


def test_the_dry_run_says_where_a_local_launch_would_stop(tmp_path, capsys, monkeypatch):
    from pathlib import Path

    from sweeps.launch import main

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    spec = str(Path(__file__).resolve().parents[3] / "sweeps" / "quickstart.yaml")
    base = [spec, "--dry-run", "--output", str(tmp_path), "--set", "resources.cpu=3"]
    assert main([*base, "--num-cpus", "2"]) == 0
    assert (
        "note: on a local Ray instance here (2 CPUs, no GPU) the launch would stop: a trial needs "
        "resources.cpu 3 CPUs on one node and the largest node has 2: no trial would start; "
        "--set resources.cpu=2"
    ) in capsys.readouterr().out
    # another Ray's (the dry run's probe of the address stood in for: none answers here)
    monkeypatch.setattr("sweeps.launch.check_address", lambda *a, **k: None)
    for more in (["--num-cpus", "4"], ["--address", "10.0.0.5:6379"]):  # fits; another Ray
        assert main([*base, *more]) == 0
        assert "the launch would stop" not in capsys.readouterr().out


def test_the_dry_run_warns_of_a_fixed_gpu_share_too_large_for_the_cpus_on_a_gpu_machine(
    monkeypatch,
):
    """On a machine with a GPU (nvidia-smi found: a stand-in here) the dry run said nothing of a
    trial's CPUs, while a launch with a fixed share (resources.gpu 1) counts resources.cpu and
    stops: wmt17.yaml's cpu 8 on a 2-CPU GPU box. Under auto the arrangement's CPUs stand."""
    monkeypatch.setattr("sweeps.driver.cpu_fit.shutil.which", lambda name: f"/usr/bin/{name}")
    fixed = build_sweep(base_spec(resources={"cpu": 8, "gpu": 1})).spec.resources
    said = local_cpu_note(fixed, None, 2)
    assert said.startswith("note: on a local Ray instance here (2 CPUs) the launch would stop: ")
    assert said.endswith("--set resources.cpu=2"), said
    auto = build_sweep(base_spec(resources={"cpu": 8, "gpu": "auto"})).spec.resources
    assert local_cpu_note(auto, None, 2) is None


def test_a_ddp_trial_asking_for_more_gpus_than_there_are_is_named_with_the_workers_that_fit():
    r = SimpleNamespace(cpu=1, workers=3)  # gpu: 3 refused, its advice: workers 3, gpu 1
    assert too_few_gpus(r, 1.0, 1.0, local=True) == (
        "a DDP trial needs 3 GPUs (3 workers of resources.gpu 1) and the machine has 1: no trial "
        "would start; --set resources.workers=1 for one process a trial; or launch on a cluster "
        "with more (--address)"
    )
    said = too_few_gpus(SimpleNamespace(cpu=1, workers=4), 1.0, 2.0, local=False)
    assert said.endswith("and the cluster has 2: no trial would start; --set resources.workers=2 "
                         "for fewer workers")  # fmt: skip
    assert too_few_gpus(r, 1.0, 3.0, local=True) is None
    assert too_few_gpus(r, 0.5, 2.0, local=True) is None  # 3 x 0.5
    assert too_few_gpus(SimpleNamespace(cpu=1, workers=1), 1.0, 0.5, local=True) is None


def test_the_local_ray_refuses_a_ddp_trial_before_any_trial_starts(tmp_path, monkeypatch, capsys):
    """check_cluster on the launcher's own Ray (a stand-in for Ray's calls: one node, 1 GPU,
    declared for placement only); with --address the same is a warning (GPU nodes may join)."""
    import ray  # (Ray and torch: only this test of the file needs them)

    from sweeps.integrations.torch_build import SIMULATED_GPUS

    node = {"Alive": True, "NodeID": "n", "NodeManagerAddress": "127.0.0.1",
            "Resources": {"CPU": 16.0, "GPU": 1.0}}  # fmt: skip
    monkeypatch.setattr(ray, "nodes", lambda: [node])
    monkeypatch.setattr(ray, "cluster_resources", lambda: dict(node["Resources"]))
    monkeypatch.setattr(
        ray, "get_runtime_context", lambda: SimpleNamespace(get_node_id=lambda: "n")
    )
    monkeypatch.setenv(SIMULATED_GPUS, "1")
    sweep = build_sweep(base_spec(resources={"cpu": 1, "gpu": 1, "workers": 3}))
    paths = Paths(output=tmp_path, storage=str(tmp_path))
    with pytest.raises(LaunchError, match=r"^a DDP trial needs 3 GPUs \(3 workers of "
                       r"resources\.gpu 1\) and the machine has 1: no trial would start"):  # fmt: skip
        check_cluster(sweep, paths, address=None)
    fit = check_cluster(sweep, paths, address="127.0.0.1:6379")
    assert fit.max_concurrent_trials == 1
    assert "warning: a DDP trial needs 3 GPUs" in capsys.readouterr().out
    two = build_sweep(base_spec(resources={"cpu": 1, "gpu": 0.5, "workers": 2}))
    assert check_cluster(two, paths, address=None).gpu == 0.5


def test_a_local_launch_without_a_gpu_refuses_float16_mixed_precision_before_any_trial(
    tmp_path, monkeypatch, capsys
):
    """``resources.gpu`` auto (or 1) on a machine without a GPU: the trials would fall back to the
    CPU, where Lightning trains bf16-mixed in place of 16-mixed; the launcher's own Ray (a
    stand-in for Ray's calls: one node, no GPU) stops the launch with the fix, before any trial.
    Another Ray may gain GPU nodes: its trials wait for them, as at any precision."""
    import ray  # (Ray: only the tests of check_cluster in the file need it)

    node = {"Alive": True, "NodeID": "n", "NodeManagerAddress": "127.0.0.1",
            "Resources": {"CPU": 2.0}}  # fmt: skip
    monkeypatch.setattr(ray, "nodes", lambda: [node])
    monkeypatch.setattr(ray, "cluster_resources", lambda: dict(node["Resources"]))
    monkeypatch.setattr(
        ray, "get_runtime_context", lambda: SimpleNamespace(get_node_id=lambda: "n")
    )
    paths = Paths(output=tmp_path, storage=str(tmp_path))
    for gpu in ("auto", 1):
        sweep = build_sweep(base_spec(resources={"gpu": gpu}, trainer={"precision": "16-mixed"}))
        with pytest.raises(LaunchError, match=r"^trainer\.precision 16-mixed is float16 mixed "):
            check_cluster(sweep, paths, address=None)
        assert "no GPU visible" not in capsys.readouterr().out
        assert check_cluster(sweep, paths, address="127.0.0.1:6379").gpu == (
            sweep.spec.resources.gpu
        )
    said = ""
    try:
        check_cluster(sweep, paths, address=None)
    except LaunchError as exc:
        said = str(exc)
    assert said.endswith(
        "(resources.gpu 1 -> 0), at bf16-mixed in its place; --set trainer.precision=bf16-mixed, "
        "or launch on a cluster with GPUs (--address)"
    ), said
    # the dry run says it where it would start that Ray (no nvidia-smi on the test machines)
    monkeypatch.setattr("shutil.which", lambda name: None)
    note = local_cpu_note(sweep.spec.resources, None, 2, ["16-mixed"])
    assert (
        note == f"note: on a local Ray instance here (2 CPUs, no GPU) the launch would stop: {said}"
    )
    assert local_cpu_note(sweep.spec.resources, "10.0.0.5:6379", 2, ["16-mixed"]) is None
    assert local_cpu_note(sweep.spec.resources, None, 2, []) is None
    bf16 = build_sweep(base_spec(resources={"gpu": 1}, trainer={"precision": "bf16-mixed"}))
    assert check_cluster(bf16, paths, address=None).gpu == 0.0
    assert "no GPU visible: trials run on CPU (resources.gpu 1 -> 0)" in capsys.readouterr().out
