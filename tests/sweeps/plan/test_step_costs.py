"""The plan's cost model (sweeps/plan/step_costs.py) on its measured table, and what it makes of
the shipped sweeps: the groups --dry-run plans for them, and why it keeps cells apart."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweeps.plan.fusion import plan_fusion
from sweeps.plan.step_costs import Member, device_costs, interpolate, table
from sweeps.spec import build_sweep, load_spec

ROOT = Path(__file__).resolve().parents[3]


def test_interpolation_is_linear_between_points_and_continues_beyond_them():
    points = {"1": 1.0, "4": 4.0, "16": 10.0}
    assert interpolate(points, 2.5) == pytest.approx(2.5)
    assert interpolate(points, 10) == pytest.approx(7.0)
    assert interpolate(points, 22) == pytest.approx(13.0)  # the last segment, continued
    assert interpolate({"40": 0.5}, 100) == 0.5


def test_every_device_in_the_table_says_where_its_figures_were_measured():
    for name, entry in table()["devices"].items():
        assert entry["measured"], name
        assert entry["presets"], name


def test_on_a_cpu_padding_costs_and_on_a_gpu_the_group_s_step_hardly_grows():
    cpu, gpu = device_costs("cpu"), device_costs("gpu", "NVIDIA H100 80GB HBM3")
    same = [Member(20, 16)] * 4
    assert cpu.group_seconds("tiny", [Member(20, 1)] * 2 + [Member(20, 64)] * 2) > (
        cpu.group_seconds("tiny", [Member(20, 1)] * 2)
        + cpu.group_seconds("tiny", [Member(20, 64)] * 2)
    )
    assert cpu.group_seconds("tiny", [Member(20, 16)] * 2 + [Member(40, 16)] * 2) > (
        cpu.group_seconds("tiny", [Member(20, 16)] * 2)
        + cpu.group_seconds("tiny", [Member(40, 16)] * 2)
    )
    switched = [Member(20, 16, (("s", "a"),)), Member(20, 16, (("s", "b"),))] * 2
    assert cpu.group_seconds("tiny", switched) > cpu.group_seconds("tiny", same)
    # a GPU's fused step: about flat in members, K and switches free, in proportion to length
    assert gpu.group_seconds("paper_copy", [Member(40, 64)] * 16) == pytest.approx(0.1517)
    assert gpu.group_seconds("paper_copy", switched) == gpu.group_seconds("paper_copy", same)
    assert gpu.group_seconds("paper_copy", [Member(80, 16)] * 4) == pytest.approx(2 * 0.1408)
    # a trial alone trains unfused: the measured unfused step
    assert gpu.group_seconds("paper_copy", [Member(40, 16)]) == pytest.approx(0.0871)


def test_a_gpu_the_table_lacks_is_costed_as_the_nearest_and_the_plan_says_so():
    assert device_costs("gpu", "NVIDIA H200").note is None
    stand_in = device_costs("gpu", "NVIDIA H100 PCIe")
    assert stand_in.name == "NVIDIA H100 80GB HBM3" and "NVIDIA H100 PCIe is not in the table" in (
        stand_in.note
    )
    assert "no GPU here" in device_costs("gpu").note
    assert device_costs("gpu", "Tesla T4").name == table_first_gpu()
    # a short form of one name alone is that GPU (it said "H200 is not in the table")
    for short, name in (("H200", "NVIDIA H200"), ("nvidia h100", "NVIDIA H100 80GB HBM3")):
        costs = device_costs("gpu", short)
        assert (costs.name, costs.note) == (name, None), short
    assert device_costs("gpu", "NVIDIA").note is not None  # every name holds it: not one's


def test_a_group_past_the_largest_measured_grows_in_proportion_to_its_members():
    """The H100 is measured to 16 members: the flat 4-16 segment, continued, costed a group of 84
    as 1.4 times one of 16 (the H200, measured to 64, takes 2.7 times its 16's step at 64)."""
    h100 = device_costs("gpu", "NVIDIA H100 80GB HBM3")
    sixteen = h100.group_seconds("paper_copy", [Member(40, 16)] * 16)
    for members in (32, 84):
        step = h100.group_seconds("paper_copy", [Member(40, 16)] * members)
        assert step == pytest.approx(sixteen * members / 16)
    # within what the H200 measured, its own figures
    h200 = device_costs("gpu", "NVIDIA H200")
    assert h200.group_seconds("paper_copy", [Member(40, 16)] * 64) == pytest.approx(0.2825)


def test_a_gpu_entry_written_from_a_whole_gpu_run_plans_its_sweeps(monkeypatch, capsys, tmp_path):
    """gpu_benchmarks.py measures the fused step at paper_copy and the graphs and sharing at tiny
    and paper_copy: tiny's cell holds no step. The plan raised StopIteration on such an entry,
    and on one whose run had no fusion phase at all (its first call)."""
    import json

    import sweeps.plan.step_costs as step_costs
    from sweeps.launch import main

    h100 = json.loads(json.dumps(table()["devices"]["NVIDIA H100 80GB HBM3"]))
    for field in ("unfused_s", "fused_s"):
        del h100["presets"]["tiny"]["lengths"]["40"][field]
    graphs_only = {
        "measured": "NVIDIA Test GPU, a run without its fusion phase",
        "presets": {"tiny": {"lengths": {"40": {"graphed_speedup": 3.0}}}},
    }
    shipped = table()
    devices = {**shipped["devices"], "NVIDIA H100 80GB HBM3": h100, "NVIDIA Test GPU": graphs_only}
    monkeypatch.setattr(step_costs, "table", lambda: {**shipped, "devices": devices})
    gpu = device_costs("gpu", "NVIDIA H100 80GB HBM3")
    assert gpu.group_seconds("tiny", [Member(40, 16)]) == gpu.group_seconds(
        "paper_copy", [Member(40, 16)]
    )  # costed as the preset nearest in hidden size that has the step
    assert gpu.group_seconds("tiny", [Member(40, 16)] * 4) > 0
    test_gpu = device_costs("gpu", "NVIDIA Test GPU")
    assert test_gpu.name != "NVIDIA Test GPU" and "not in the table" in test_gpu.note
    argv = [str(ROOT / "sweeps" / "quickstart.yaml"), "--dry-run", "--set", "resources.gpu=auto"]
    argv += ["--output", str(tmp_path)]  # not sweep-results/ here, which `make sweep` fills
    assert main(argv) == 0, capsys.readouterr().err
    assert "is costed as the table's paper_copy model" in capsys.readouterr().out


def table_first_gpu() -> str:
    return next(name for name in table()["devices"] if name != "cpu")


@pytest.mark.parametrize(
    "sweep, most",
    [("k_vs_length", 12), ("scoring_functions", 2), ("position_encoding", 3)],
)
def test_the_shipped_gpu_sweeps_train_in_few_groups(sweep, most):
    """Planned for GPUs (their trials ask for one): K, the scoring pair and position encodings
    join, lengths join where one group costs less than the groups apart, up to 16 members."""
    loaded = load_spec(ROOT / "sweeps" / f"{sweep}.yaml")
    plan = plan_fusion(loaded)
    assert plan.device == "gpu"
    trials = sum(len(g.slots) for g in plan.groups)
    assert trials == loaded.num_trials and not [g for g in plan.groups if g.name is None]
    assert len(plan.groups) <= most, [len(g.slots) for g in plan.groups]
    assert all(len(g.slots) <= 16 for g in plan.groups)


@pytest.mark.parametrize("gpu", ["NVIDIA H100 80GB HBM3", "NVIDIA H200"])
def test_on_every_measured_gpu_table_1_s_memory_cells_of_a_length_are_one_group(gpu):
    """The H200's measured fused step falls from 1 member to 16 (0.118 s, 0.104 s: the spread of
    single measurements); taken as it stands, the plan filled every group to 16, parting the
    seeds of K=64 cells across groups of mixed lengths to save nothing."""
    from sweeps.plan.step_costs import fused_envelope

    assert fused_envelope({"1": 0.118, "16": 0.104, "32": 0.157}, 12) == 0.118
    assert fused_envelope({"1": 0.118, "16": 0.104, "32": 0.157}, 24) == pytest.approx(0.1305)
    loaded = load_spec(ROOT / "sweeps" / "k_vs_length.yaml")
    plan = plan_fusion(loaded, gpu_name=gpu)
    cells = [{loaded.plans[s.unit].cell.slug for s in g.slots} for g in plan.groups]
    sizes = {len(g.slots) for g in plan.groups}
    assert len(plan.groups) == 6 and sizes == {12, 15}, [len(g.slots) for g in plan.groups]
    assert all(not (a & b) for i, a in enumerate(cells) for b in cells[i + 1 :]), (
        "a cell's seeds parted"
    )


def test_on_a_cpu_cells_far_apart_in_k_are_kept_apart_and_the_dry_run_says_why():
    sweep = build_sweep(
        {
            "name": "far",
            "task": {
                "name": "copy",
                "max_length": 20,
                "train_size": 64,
                "val_size": 8,
                "batch_size": 8,
            },
            "model": {"preset": "tiny", "attention": "memory"},
            "grid": {"model.K": [1, 64]},
            "seeds": [0, 1],
            "trainer": {"max_steps": 10, "val_check_interval": 5},
        }
    )
    plan = plan_fusion(sweep)
    assert [len(g.slots) for g in plan.fused] == [2, 2]
    (apart,) = plan.apart
    assert "one group's step would cost" in apart.reason and "K 1 padded to 64" in apart.reason
    from sweeps.plan.describe import fusion_lines

    said = "\n".join(fusion_lines(sweep, plan))
    assert "K=1  |  K=64: one group's step would cost" in said.replace("attention=memory ", "")


def test_past_the_measured_lengths_a_cpu_holds_the_nearest_fused_speedup_and_seeds_still_fuse():
    """The CPU's speedups are measured at lengths 10 and 40; carried on along their line, a
    paper_copy group of a cell's 3 seeds cost more than the 3 alone from length ~90, and
    k_vs_length on a CPU trained every trial of lengths 100 and 200 alone."""
    cpu = device_costs("cpu")
    for length in (100, 200):
        seeds = [Member(length)] * 3
        alone = 3 * cpu.group_seconds("paper_copy", [Member(length)])
        assert cpu.group_seconds("paper_copy", seeds) < alone
        ratio = alone / cpu.group_seconds("paper_copy", seeds)
        at_40 = (
            3
            * cpu.group_seconds("paper_copy", [Member(40)])
            / cpu.group_seconds("paper_copy", [Member(40)] * 3)
        )
        assert ratio == pytest.approx(at_40), "the speedup measured at 40, the nearest length"
    sweep = load_spec(str(ROOT / "sweeps" / "k_vs_length.yaml"), overrides=["resources.gpu=0"])
    plan = plan_fusion(sweep)
    assert not [g for g in plan.groups if len(g.slots) == 1], "every cell's seeds fuse"


def test_a_pair_of_cells_kept_apart_is_said_once_however_often_the_order_meets_it():
    """With Optuna's samples the group order meets the same two cells once per sample: the dry
    run said each such line 8 times (docs/sweep-file.md's example)."""
    sweep = build_sweep(
        {
            "name": "far_samples",
            "task": {"name": "copy", "max_length": 20, "train_size": 64, "val_size": 8},
            "model": {"preset": "tiny", "attention": "memory"},
            "grid": {"model.K": [1, 64]},
            "parameters": {
                "model.lr": {"distribution": "log_uniform_values", "min": 1e-4, "max": 1e-2}
            },
            "num_samples": 3,
            "seeds": [0, 1],
            "trainer": {"max_steps": 10, "val_check_interval": 5},
        }
    )
    from sweeps.plan.describe import fusion_lines

    plan = plan_fusion(sweep)
    assert len(plan.apart) > 1
    said = [line for line in fusion_lines(sweep, plan) if "  |  " in line]
    assert len(said) == 1, said
    assert said[0].endswith(f"(at {len(plan.apart)} places in the order)")


def test_one_fused_group_is_said_without_the_heading_of_groups_kept_apart():
    """A sweep of one group printed "neighbouring groups kept apart, and why:" over nothing."""
    from sweeps.plan.describe import fusion_lines

    sweep = build_sweep(
        {
            "name": "one",
            "task": {"name": "copy", "max_length": 20, "train_size": 64, "val_size": 8},
            "model": {"preset": "tiny", "attention": "memory", "K": 4},
            "seeds": [0, 1],
            "trainer": {"max_steps": 10, "val_check_interval": 5},
        }
    )
    plan = plan_fusion(sweep)
    assert len(plan.fused) == 1 and not plan.apart
    (cut,) = [line for line in fusion_lines(sweep, plan) if "groups cut where" in line]
    assert cut.endswith("(sweeps/plan/step_costs.json)"), cut
