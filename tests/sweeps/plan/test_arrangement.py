"""The plan's GPU arrangement (sweeps/plan/arrangement.py): what ``resources.gpu: auto`` chooses
from the measured costs, what a sweep file's own resources are expected to give, and what a
launch reserves for each trial by it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from sweeps.driver.cluster import ClusterFit
from sweeps.plan.arrangement import plan_arrangement
from sweeps.plan.fusion import plan_fusion
from sweeps.plan.sweep_plan import build_plan
from sweeps.spec import load_spec
from sweeps.stages.train import make_settings
from sweeps.trial.fused.member import _member_bundle

ROOT = Path(__file__).resolve().parents[3]
K_VS_LENGTH = ROOT / "sweeps" / "k_vs_length.yaml"


def arranged(*overrides: str, profile: str | None = None):
    sweep = load_spec(K_VS_LENGTH, overrides=list(overrides), profile=profile)
    return sweep, plan_arrangement(sweep, plan_fusion(sweep), "NVIDIA H100 80GB HBM3")


def test_auto_takes_the_cheapest_measured_arrangement_and_says_what_the_other_gives():
    """On the H100's table, graphed trials alone 8 to a GPU (7.0x one eager trial) beat the
    eager fused groups (5.9x: no graphed fused step is measured yet): the plan takes them and
    names what the groups would give; a number for resources.gpu keeps the groups."""
    sweep, a = arranged()
    assert sweep.spec.resources.auto_gpu and a.chosen and not a.fused
    assert (a.groups, a.lone, a.lone_gpu, a.lone_cpu, a.graphs, a.mps) == (
        0,
        84,
        1 / 8,
        1.0,
        True,
        True,
    )
    assert a.speedup == pytest.approx(7.0)
    assert a.speedup == pytest.approx(a.eager_gpu_hours / a.gpu_hours)
    assert "the fused groups as planned would give 29.2 member-steps" in a.instead
    _, kept = arranged("resources.gpu=1")
    assert kept.fused and kept.groups == 6 and 5 < kept.speedup < 6.5


def test_resources_mps_holds_under_auto():
    """``off``: the plan shares no GPU under MPS, so it costs sharing by what time-slicing was
    measured to give (the paper's model: nothing) and keeps the fused groups; ``on``: the daemon
    is required, as with a number for resources.gpu. Under auto both were ignored: the plan put
    8 trials to a GPU on MPS's figures with MPS off, and never required it."""
    from sweeps.plan.arrangement import arrangement_mps

    _, off = arranged("resources.mps=off")
    assert off.fused and off.groups == 6 and not off.mps and off.lone == 0
    assert "1 to a GPU" in off.instead
    assert arrangement_mps(off, "off").want == "no"
    _, on = arranged("resources.mps=on")
    assert on.mps and round(1 / on.lone_gpu) == 8
    assert arrangement_mps(on, "on").want == "required"
    assert arrangement_mps(on, "auto").want == "yes"
    # where the plan gives each process a GPU of its own, on still asks for the daemon, and the
    # arrangement says so (it said "no MPS" while the launch required one)
    _, whole = arranged("resources.mps=on", "trainer.cuda_graphs=false")
    assert whole.fused and whole.mps and arrangement_mps(whole, "on").want == "required"
    # a share of the sweep file's own, MPS off: time-sliced figures where measured (tiny)
    sweep = load_spec(
        ROOT / "sweeps" / "quickstart.yaml", overrides=["resources.gpu=0.25", "resources.mps=off"]
    )
    sliced = plan_arrangement(sweep, plan_fusion(sweep), "NVIDIA H100 80GB HBM3")
    assert not sliced.mps and sliced.speedup == pytest.approx(2.78)


def test_graphed_fused_steps_in_the_table_make_the_groups_the_cheapest(monkeypatch):
    """Where the table holds a GPU's graphed fused step (as gpu_benchmarks.py writes it), the
    plan trains the fused groups graphed, each on a GPU of its own with one CPU thread."""
    from sweeps.plan import step_costs

    table = step_costs.table()
    cell = table["devices"]["NVIDIA H100 80GB HBM3"]["presets"]["paper_copy"]["lengths"]["40"]
    monkeypatch.setitem(cell, "fused_graphed_s", {"1": 0.05, "16": 0.05})
    _, a = arranged()
    assert a.fused and a.graphs and (a.groups, a.group_gpu, a.group_cpu) == (6, 1.0, 1.0)
    assert a.speedup > 7 and "every trial alone would give" in a.instead
    # a graphed step measured lower at 16 members than at 1 is costed as flat, as an eager one:
    # the same groups (cells of one length), not groups filled to the cap
    monkeypatch.setitem(cell, "fused_graphed_s", {"1": 0.06, "16": 0.05})
    sweep, flat = arranged()
    assert flat.fused and flat.groups == 6 and flat.speedup == pytest.approx(a.speedup * 5 / 6)


def test_graphs_are_not_chosen_where_a_student_distils():
    sweep = load_spec(ROOT / "sweeps" / "memory_distill.yaml")
    a = plan_arrangement(sweep, plan_fusion(sweep), None)
    assert a.chosen and not a.graphs and "first GPU stands in" in a.costs.note


def test_graphs_the_sweep_file_sets_stand_under_auto_and_are_costed_as_set():
    """``trainer.cuda_graphs: true`` under auto: the trials ran graphed while the plan said and
    costed "steps eager" (on the H200's table, which keeps the fused groups); now the line says
    graphed, costs the groups eager where no graphed fused step is measured, and the plan adds
    nothing to the trials' own settings. Graphs in a grid are costed per trial."""
    from sweeps.plan.describe import arrangement_lines

    sweep = load_spec(K_VS_LENGTH, overrides=["trainer.cuda_graphs=true"])
    a = plan_arrangement(sweep, plan_fusion(sweep), "NVIDIA H200")
    assert a.fused and a.groups == 6 and not a.graphs
    line = arrangement_lines(sweep, a)[0]
    assert "steps graphed (trainer.cuda_graphs); 6 graphed fused group(s) costed eager" in line
    # on the H100's table graphed trials alone stay the cheapest, as the plan would choose them
    sweep, h100 = arranged("trainer.cuda_graphs=true")
    assert not h100.fused and h100.lone == 84 and h100.speedup == pytest.approx(7.0)
    # a grid of graphs: half the trials graphed, named so (a number for resources.gpu)
    sweep, mixed = arranged("grid.trainer.cuda_graphs=[true,false]", "resources.gpu=0.5")
    assert (
        "graphed in 84 of 168 trial(s) (trainer.cuda_graphs), eager in the rest"
        in (arrangement_lines(sweep, mixed)[0])
    )
    # trials alone graphed on a GPU whose table holds no graphed step (the H200): costed eager,
    # said so (the plan had no option left and stopped with min() of an empty list)
    quick = load_spec(
        ROOT / "sweeps" / "quickstart.yaml",
        overrides=["trainer.cuda_graphs=true", "resources.gpu=auto"],
    )
    h200 = plan_arrangement(quick, plan_fusion(quick), "NVIDIA H200")
    assert h200.lone == 3 and h200.speedup == pytest.approx(1.0)
    assert any("graphed steps of trials alone are not measured" in n for n in h200.stand_ins)


def test_graphs_the_sweep_turns_off_stay_off_under_auto(tmp_path):
    """``trainer.cuda_graphs: false`` under auto (a --set, or the file's trainer section): the plan
    chose graphed trials alone as though the key were unset, and the trials ran graphed; now the
    choice stands, and on the H100's table the eager fused groups are the cheapest left."""
    from sweeps.plan.describe import arrangement_lines
    from sweeps.spec.gpu import cuda_graphs_values, sets_cuda_graphs

    sweep, a = arranged("trainer.cuda_graphs=false")
    assert a.fused and a.groups == 6 and not a.graphs and a.lone == 0
    assert a.speedup == pytest.approx(5.88, abs=0.01)
    assert "steps eager (trainer.cuda_graphs false)" in arrangement_lines(sweep, a)[0]
    off = build_plan(
        load_spec(K_VS_LENGTH, profile="gpu", overrides=["trainer.cuda_graphs=false"]), tmp_path
    )
    on_gpus = make_settings(off, "disabled", ClusterFit(gpu=1.0, max_concurrent_trials=8))
    assert on_gpus.cells and not any(p.trainer["cuda_graphs"] for p in on_gpus.cells.values())
    # unset: the plan's choice, graphed (the default profile sets no graphs)
    unset = load_spec(K_VS_LENGTH)
    assert not sets_cuda_graphs(unset.spec) and cuda_graphs_values(unset.spec) == []
    # a grid's `trainer:` variants set it too, as its dotted key does
    variants = load_spec(K_VS_LENGTH, overrides=["grid.trainer=[{cuda_graphs: false}]"])
    assert cuda_graphs_values(variants.spec) == [False]


def test_trials_to_a_gpu_are_counted_as_ray_places_them_and_never_more_than_there_are():
    """``resources.gpu: 0.2`` fits 5 to a GPU (the MPS line said 4: ``1 // 0.2`` is 4.0); 0.13
    fits 7 (the plan said 8 and took the 8-share figure); a count the table does not hold is
    said to be costed as one alone. Three trials alone were planned 8 to a GPU at its gain."""
    from sweeps.plan.describe import arrangement_lines
    from sweeps.plan.mps import per_gpu, plan_mps

    assert [per_gpu(g) for g in (0.2, 0.13, 0.125, 0.5, 1.0, 0.3)] == [5, 7, 8, 2, 1, 3]
    assert "5 training processes to a GPU" in plan_mps("auto", 0.2).reason
    sweep, a = arranged("fusion=off", "resources.gpu=0.13", profile="gpu")
    lines = arrangement_lines(sweep, a)
    assert "7 to a GPU" in lines[0] and a.speedup == pytest.approx(1.0)
    assert any("7 trials to a GPU under MPS is not measured" in line for line in lines)
    quick = load_spec(ROOT / "sweeps" / "quickstart.yaml", overrides=["resources.gpu=auto"])
    three = plan_arrangement(quick, plan_fusion(quick), "NVIDIA H100 80GB HBM3")
    assert three.lone == 3 and three.lone_gpu == 1 / 2 and three.speedup < 17


def test_fused_groups_sharing_a_gpu_are_said_to_be_costed_as_each_alone():
    """``resources.gpu: 0.2`` on a fused sweep: 5 groups to a GPU, which no benchmark measured,
    were costed as each group on a GPU of its own, and only trials alone got the ``costed:``
    line that says so."""
    from sweeps.plan.describe import arrangement_lines

    sweep, a = arranged("resources.gpu=0.2", "resources.cpu=1")
    assert a.fused
    lines = arrangement_lines(sweep, a)
    assert any(
        "5 fused groups to a GPU under MPS is not measured on the NVIDIA H100 80GB HBM3: each "
        "costed as a group alone on its GPU" in line
        for line in lines
    ), lines
    sweep, whole = arranged("resources.gpu=1", "resources.cpu=1")
    assert not any("fused groups to a GPU" in line for line in arrangement_lines(sweep, whole))


def test_the_gpu_kind_is_named_by_the_sweep_where_the_plan_is_made_off_the_gpus(tmp_path):
    """A plan made where no GPU is visible (a login node joining a cluster) was always costed on
    the H100, whose arrangement for k_vs_length differs from the H200's; resources.gpu_kind names
    the cluster's, and the stand-in line says how."""
    plan = build_plan(
        load_spec(K_VS_LENGTH, overrides=["resources.gpu_kind=NVIDIA H200"]), tmp_path
    )
    assert plan.arrangement.costs.name == "NVIDIA H200" and plan.arrangement.fused
    other = build_plan(
        load_spec(K_VS_LENGTH, overrides=["resources.gpu_kind=Tesla V100"]), tmp_path
    )
    assert "Tesla V100 is not in the table" in other.arrangement.costs.note
    here = plan_arrangement(*(lambda s: (s, plan_fusion(s)))(load_spec(K_VS_LENGTH)), None)
    assert "resources.gpu_kind" in here.costs.note


def test_a_sweep_file_s_own_share_stands_and_cpu_trials_have_no_arrangement():
    _, a = arranged("resources.gpu=0.5")
    assert not a.chosen and (a.group_gpu, a.group_cpu) == (0.5, 4)
    _, cpu = arranged(profile="cpu")
    assert cpu is None


def test_the_launch_reserves_what_the_arrangement_says_and_the_cpu_where_there_is_no_gpu(
    tmp_path,
):
    sweep = load_spec(K_VS_LENGTH, profile="gpu", overrides=["resources.gpu=1", "resources.cpu=1"])
    plan = build_plan(sweep, tmp_path)
    on_gpus = make_settings(plan, "disabled", ClusterFit(gpu=1.0, max_concurrent_trials=8))
    assert (on_gpus.resources.gpu, on_gpus.resources.cpu) == (1.0, 1.0)
    member = {"fused_with": "g1", "fused_member": "2/8"}
    bundle = _member_bundle({"cpu": 1.0, "gpu": 1.0}, None, member).bundles[0]
    assert bundle == {"CPU": 0.125, "GPU": 0.125}  # a member holds 1/n of its group's GPU
    auto = build_plan(load_spec(K_VS_LENGTH, profile="gpu"), tmp_path)
    assert not auto.fusion.active and len(auto.fusion.planned) == 4  # dissolved: graphed alone
    no_gpu = make_settings(auto, "disabled", ClusterFit(gpu=0.0, max_concurrent_trials=8))
    assert no_gpu.resources.gpu == 0 and no_gpu.resources.cpu == auto.spec.resources.cpu
    assert not any(p.trainer["cuda_graphs"] for p in no_gpu.cells.values())
    graphed = make_settings(auto, "disabled", ClusterFit(gpu=1.0, max_concurrent_trials=8))
    assert (graphed.resources.gpu, graphed.resources.cpu) == (1 / 8, 1.0)
    assert all(p.trainer["cuda_graphs"] for p in graphed.cells.values())
    assert _member_bundle({"cpu": 1.0, "gpu": 1.0}, {"cpu": 1.0, "gpu": 0.125}, {}).bundles[0] == {
        "CPU": 1.0,
        "GPU": 0.125,
    }


def test_the_gpu_profile_of_table_1_is_sized_for_two_minutes_on_one_h100():
    """k_vs_length's gpu profile: the paper's model, every cell of Table 1's shape, and about 2
    minutes of training steps on one H100 by the measured costs."""
    sweep, a = arranged(profile="gpu")
    assert sweep.plans[0].model["preset"] == "paper_copy"
    assert 1.0 <= a.gpu_hours * 60 <= 3.0


def resources_column(plan) -> list[str]:
    """The dry-run trial table's resources, one per (cell, seed)."""
    from sweeps.plan.describe import trial_table

    rows = trial_table(plan).splitlines()[2 : 2 + len(plan.sweep.plans)]
    return [row.split("  ")[-1].strip() for row in rows]


def test_the_dry_run_shows_what_the_launch_reserves_under_auto(tmp_path, monkeypatch):
    """``resources.gpu: auto``: each trial's resources in the dry-run's table are what the launch
    reserves on GPUs (not the sweep file's cpu with a placeholder GPU), a fused group's trials
    show what their group holds, and a line says what every trial holds where there is no GPU."""
    from sweeps.plan import step_costs
    from sweeps.plan.describe import describe

    plan = build_plan(load_spec(K_VS_LENGTH, profile="gpu"), tmp_path)
    on_gpus = make_settings(plan, "disabled", ClusterFit(gpu=1.0, max_concurrent_trials=8))
    reserved = f"cpu={on_gpus.resources.cpu:g} gpu={on_gpus.resources.gpu:g}"
    assert reserved == "cpu=1 gpu=0.125" and set(resources_column(plan)) == {reserved}
    no_gpu = make_settings(plan, "disabled", ClusterFit(gpu=0.0, max_concurrent_trials=8))
    assert no_gpu.resources.gpu == 0 and no_gpu.resources.cpu == 4
    assert "where Ray offers no GPU every trial trains on the CPU with cpu=4" in "\n".join(
        describe(plan)
    )
    # graphed fused steps measured: the groups win, and each trial shows its group's hold
    table = step_costs.table()
    cell = table["devices"]["NVIDIA H100 80GB HBM3"]["presets"]["paper_copy"]["lengths"]["40"]
    monkeypatch.setitem(cell, "fused_graphed_s", {"1": 0.05, "16": 0.05})
    fused = build_plan(load_spec(K_VS_LENGTH), tmp_path)
    assert fused.arrangement.fused and fused.fusion.active
    settings = make_settings(fused, "disabled", ClusterFit(gpu=1.0, max_concurrent_trials=8))
    held = f"cpu={settings.resources.cpu:g} gpu={settings.resources.gpu:g}"
    assert held == "cpu=1 gpu=1" and set(resources_column(fused)) == {held}
    assert f"each group holds one trial's resources ({held})" in "\n".join(describe(fused))
    # a number for resources.gpu: the sweep file's own, as before
    own = build_plan(load_spec(K_VS_LENGTH, overrides=["resources.gpu=0.5"]), tmp_path)
    assert set(resources_column(own)) == {"cpu=4 gpu=0.5"}
    assert "where Ray offers no GPU" not in "\n".join(describe(own))


def test_the_budget_charges_each_trial_what_the_arrangement_reserves(tmp_path, monkeypatch):
    """Fused groups beside trials alone (graphed fused steps measured; one seed, one length: the
    memory cells fuse, none and bahdanau train alone): the budget's meter charges a running group
    the GPU it holds and a trial alone its share (two alone: half a GPU each), as Ray reserves
    them, not a group's GPU each."""
    from sweeps.driver.budget import Meter
    from sweeps.plan import step_costs
    from sweeps.report.ledger import Ledger

    table = step_costs.table()
    cell = table["devices"]["NVIDIA H100 80GB HBM3"]["presets"]["paper_copy"]["lengths"]["40"]
    monkeypatch.setitem(cell, "fused_graphed_s", {"1": 0.05, "16": 0.05})
    sweep = load_spec(K_VS_LENGTH, overrides=["seeds=[0]", "grid.task.max_length=[20]"])
    plan = build_plan(sweep, tmp_path)
    a = plan.arrangement
    assert a.fused and (a.groups, a.lone) == (1, 2)
    settings = make_settings(plan, "disabled", ClusterFit(gpu=1.0, max_concurrent_trials=8))
    assert settings.lone == {"cpu": 1.0, "gpu": 0.5}
    (group,) = plan.fusion.fused
    n = len(group.slots)
    members = [{"fused_with": group.name, "fused_member": f"{j}/{n}"} for j in range(1, n + 1)]
    alone = [{"cell": "length=20 attention=none"}, {"cell": "length=20 attention=bahdanau"}]
    meter = Meter(Ledger.load(tmp_path), {})
    meter.place(settings.resources, settings.lone)
    meter.start()
    meter.tick_trials(members + alone)
    time.sleep(0.05)
    meter.tick_trials(members + alone)
    meter.stop()
    charged = Ledger.load(tmp_path).charged
    # held from the first tick on: 1 GPU (the group) + 2 x 1/2; 1 CPU (the group) + 2 x 1
    assert charged["gpu_hours"] / charged["cpu_hours"] == pytest.approx(2 / 3)


def test_a_trial_under_auto_holds_a_cpu_for_each_of_its_data_loader_workers():
    """wmt17.yaml's trials load with 2 DataLoader workers; under auto each held 1 CPU, so 8 to a
    GPU ran 24 processes on 8 CPUs. Each holds the GPU's driving thread and one per worker."""
    sweep = load_spec(ROOT / "sweeps" / "wmt17.yaml")
    assert {int(p.task["num_workers"]) for p in sweep.plans} == {2}
    a = plan_arrangement(sweep, plan_fusion(sweep), "NVIDIA H100 80GB HBM3")
    assert a.chosen and not a.fused and a.lone_cpu == 3.0
    # a fused group's members each run their own workers in the group's process (H200: 4 of 4)
    fusion = plan_fusion(sweep)
    grouped = plan_arrangement(sweep, fusion, "NVIDIA H200")
    assert grouped.fused and max(len(g.slots) for g in fusion.groups) == 4
    assert grouped.group_cpu == 1 + 2 * 4
    _, copy = arranged()
    assert copy.lone_cpu == 1.0


def test_settings_the_table_was_not_measured_with_are_said_as_costed():
    """A model size its preset sets otherwise, another batch, bf16, or one of them searched:
    costed as the measured model, and the dry run said nothing of it."""
    _, plain = arranged()
    assert not any("not measured" in line for line in plain.stand_ins)
    _, changed = arranged(
        "model.hidden_size=512", "task.batch_size=32", "trainer.precision=bf16-mixed"
    )
    (line,) = [line for line in changed.stand_ins if line.startswith("trials with")]
    assert line == (
        "trials with hidden_size=512, batch_size=32, precision=bf16-mixed are costed as the "
        "table's paper_copy model (its sizes, batch 128, float32): not measured"
    )
    sweep = load_spec(ROOT / "sweeps" / "tune_optuna.yaml")
    searched = plan_arrangement(sweep, plan_fusion(sweep), "NVIDIA H100 80GB HBM3")
    assert any("model.hidden_size searched" in line for line in searched.stand_ins)


def test_the_measured_batch_is_the_fusion_benchmark_s():
    """The plan's record of the batch the table's steps were measured at is the benchmark's."""
    from benchmarks.fusion import TRAINING  # torch and Lightning: only this test needs them
    from sweeps.plan.step_costs import MEASURED_BATCH

    assert MEASURED_BATCH == {p: TRAINING[p][0] for p in MEASURED_BATCH}


def test_a_choice_within_the_margin_of_separate_runs_says_so():
    """scoring_functions on the H100: its 2 fused groups (43.2 member-steps per GPU-second)
    against every trial alone, graphed, 8 to a GPU (42.9): the table's gains come from separate
    benchmark runs, so the dry run says the choice is not settled; k_vs_length's margin (19%)
    is not flagged."""
    sweep = load_spec(ROOT / "sweeps" / "scoring_functions.yaml")
    a = plan_arrangement(sweep, plan_fusion(sweep), "NVIDIA H100 80GB HBM3")
    assert a.fused and "42.9 member-steps" in a.instead
    assert "1% more GPU time than the choice, within the 10%" in a.instead
    _, far = arranged()
    assert "more GPU time" not in far.instead


def test_a_resume_plans_for_the_gpu_its_first_launch_planned_for(tmp_path, capsys):
    """k_vs_length's arrangement fuses on the H200 and trains every trial alone on the H100, the
    stand-in where no GPU is visible: a sweep started on an H200 and resumed from a login node
    without one planned other trials (unfused), which Tune refuses to restore. launch.json keeps
    the GPU the first launch planned for, and every resume plans for it, wherever it runs."""
    from sweeps.launch import main
    from sweeps.spec import save_launch
    from sweeps.spec.launch_record import recorded_gpu_name

    sweep = load_spec(K_VS_LENGTH)
    folder = (tmp_path / "out").resolve() / sweep.name
    save_launch(folder, [], None, sweep.planned, gpu_name="NVIDIA H200")
    (folder / "results.csv").write_text("trial_id,status\nabc,budget\n")  # a stopped run's
    argv = [str(K_VS_LENGTH), "--output", str(tmp_path / "out"), "--dry-run"]
    assert main([*argv, "--resume"]) == 0
    said = capsys.readouterr().out
    assert "6 fused group(s), each on a GPU of its own" in said
    assert "expected on the NVIDIA H200 (" in said
    assert main([*argv[:2], str(tmp_path / "new"), "--dry-run"]) == 0  # a new sweep, no GPU here
    assert "expected on the NVIDIA H100" in capsys.readouterr().out
    # a resume keeps the first launch's GPU in the record, whatever the resume's machine has
    save_launch(folder, [], None, sweep.planned, resume=True, gpu_name="")
    assert recorded_gpu_name(folder) == "NVIDIA H200"
    save_launch(tmp_path / "none", [], None, sweep.planned, gpu_name="")  # first saw no GPU
    assert recorded_gpu_name(tmp_path / "none") == ""


def test_no_cell_is_graphed_where_one_cannot_replay_a_graph():
    """graphs_problem read the sweep's trainer section only: a grid over
    trainer.accumulate_grad_batches (or precision) left the arrangement graphing every cell, and
    the cells of 2 batches a step stopped at their first step. Each cell's trainer is read."""
    quick = ROOT / "sweeps" / "quickstart.yaml"

    def graphed(*overrides: str) -> bool:
        sweep = load_spec(quick, overrides=["resources.gpu=auto", *overrides])
        return plan_arrangement(sweep, plan_fusion(sweep), "NVIDIA H100 80GB HBM3").graphs

    assert graphed()
    assert not graphed("grid.trainer.accumulate_grad_batches=[1, 2]")
    assert not graphed("grid.trainer.precision=[32-true, bf16-mixed]")


TUNE_OPTUNA = ROOT / "sweeps" / "tune_optuna.yaml"


def test_a_configuration_s_fused_seeds_are_costed_and_reserved_as_groups(tmp_path):
    """Configurations judged over seeds fuse each configuration's seeds (made as Optuna asks):
    the arrangement costs those groups, not the seeds as trials alone. Where the groups win (the
    H200, 16 seeds), each holds a GPU of its own and its members 1/16 of it, as the dry run says;
    where trials alone win (the H100, 3 seeds), the groups are dissolved and no seed fuses."""
    from sweeps.plan.describe import describe

    over_seeds = [
        "resources.gpu=auto",
        "resources.cpu=2",
        "early_terminate.type=none",  # (ASHA pauses seeds at its rungs: they would train alone)
    ]
    seeds16 = "seeds.values=[" + ",".join(map(str, range(16))) + "]"
    sweep = load_spec(
        TUNE_OPTUNA,
        profile="over-seeds",
        overrides=[*over_seeds, seeds16, "resources.gpu_kind=NVIDIA H200"],
    )
    plan = build_plan(sweep, tmp_path)
    a = plan.arrangement
    configs = len(sweep.cells) * sweep.spec.num_samples
    assert plan.fusion.active and a.fused and (a.groups, a.lone) == (configs, 0)
    assert (a.group_gpu, a.group_cpu, a.graphs, a.mps) == (1.0, 1.0, False, False)
    assert a.speedup > 5  # a group of 16 on one GPU, against one eager trial per GPU
    settings = make_settings(plan, "disabled", ClusterFit(gpu=1.0, max_concurrent_trials=8))
    member = {"fused_with": "attention-bahdanau#0", "fused_member": "3/16"}
    per_trial = {"cpu": settings.resources.cpu, "gpu": settings.resources.gpu}
    assert _member_bundle(per_trial, settings.lone, member).bundles[0] == {
        "CPU": 0.0625,
        "GPU": 0.0625,
    }
    text = "\n".join(describe(plan))
    assert set(resources_column(plan)) == {"cpu=1 gpu=1"}
    assert f"{configs} fused group(s), each on a GPU of its own" in text
    assert "each group holding one trial's resources (cpu=1 gpu=1)" in text
    # without a GPU the groups as planned hold the sweep file's CPUs
    assert "on the CPU with cpu=2, a fused group (up to 16 members) cpu=2 for all its" in text
    no_gpu = make_settings(plan, "disabled", ClusterFit(gpu=0.0, max_concurrent_trials=8))
    assert (no_gpu.resources.cpu, no_gpu.resources.gpu) == (2, 0)
    # on the H100's table graphed trials alone, 8 to a GPU, beat eager groups of 3
    sweep3 = load_spec(
        TUNE_OPTUNA,
        profile="over-seeds",
        overrides=[*over_seeds, "resources.gpu_kind=NVIDIA H100 80GB HBM3"],
    )
    alone = build_plan(sweep3, tmp_path)
    assert not alone.fusion.active and not alone.arrangement.fused
    assert (alone.arrangement.groups, alone.arrangement.lone) == (0, sweep3.num_trials)
    text = "\n".join(describe(alone))
    assert f"its {configs} fused group(s) are planned, but the GPU arrangement" in text
    assert "the fused groups as planned would give" in text
    assert set(resources_column(alone)) == {"cpu=1 gpu=0.125"}
