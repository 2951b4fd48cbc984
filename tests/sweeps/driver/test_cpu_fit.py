"""A sweep whose trials ask for more CPUs than Ray can give one: refused before any trial on the
launcher's own local Ray (Tune would wait without end), with the value that fits."""

from __future__ import annotations

from types import SimpleNamespace

from sweeps.driver.cluster import too_few_cpus


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
    assert said.endswith("--set resources.workers=N or resources.cpu=N for fewer")


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
    for more in (["--num-cpus", "4"], ["--address", "10.0.0.5:6379"]):  # fits; another Ray
        assert main([*base, *more]) == 0
        assert "the launch would stop" not in capsys.readouterr().out
