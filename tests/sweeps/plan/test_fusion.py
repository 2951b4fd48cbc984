"""Which trials fuse, decided before Ray starts, and what ``--dry-run`` says about it: pure
functions of the sweep file (no Ray, no torch)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sweeps.errors import SpecError
from sweeps.launch import main
from sweeps.plan.describe import fusion_lines
from sweeps.plan.fusion import (
    FUSED_MEMBER,
    FUSED_WITH,
    balanced_chunks,
    configuration_member,
    member_of,
    member_share,
    plan_fusion,
    unfusable,
)
from sweeps.spec import build_sweep


def raw(**over):
    spec = {
        "name": "f",
        "task": {"name": "copy", "max_length": 4, "train_size": 64, "val_size": 8, "batch_size": 8},
        "model": {"preset": "tiny"},
        "grid": {"model": [{"attention": "none"}, {"attention": "memory", "K": 4}]},
        "seeds": [0, 1, 2],
        "trainer": {"max_steps": 10, "val_check_interval": 5},
    }
    spec.update(over)
    return spec


def members(plan, sweep):
    return [
        [(sweep.plans[s.unit].cell.name, sweep.plans[s.unit].seed, s.sample) for s in g.slots]
        for g in plan.fused
    ]


def test_seeds_of_a_cell_fuse_and_cells_of_other_shapes_do_not():
    sweep = build_sweep(raw())
    plan = plan_fusion(sweep)
    assert plan.cap == 4 and plan.device == "cpu" and plan.off is None
    assert [g.name for g in plan.fused] == ["g1", "g2"]
    assert members(plan, sweep) == [
        [("attention=none", s, 0) for s in (0, 1, 2)],
        [("attention=memory K=4", s, 0) for s in (0, 1, 2)],
    ]
    assert plan.fused[1].member_config(2) == {FUSED_WITH: "g2", FUSED_MEMBER: "3/3"}
    lines = fusion_lines(sweep, plan)
    assert lines[0].startswith("fusion (max 4 members a group, the CPU default): 6 of the 6 trials")
    assert "2 training processes for 6 trials (unfused: 6)" in lines[0]
    assert lines[2].split() == ["g1", "3", "attention=none:", "seeds", "0,", "1,", "2"]


def test_the_cap_splits_a_pool_where_the_measured_costs_say_and_grid_values_that_change_no_shape_fuse():
    """lr is a member's own setting: the two lr cells of one mechanism share a pool of 4 trials.
    On a CPU, where a member's step costs the same in a group of 2 as of 3, a cap of 3 cuts it
    2 + 2 (a trial alone, unfused, costs more than a member); on a GPU, where a fused step costs
    about the same at any number of members and an unfused trial's is cheaper than a group's,
    3 + 1 alone. The GPU default cap (16, not the CPU's 4) applies when trials ask for a GPU."""
    grid = {"grid": {"model.lr": [0.001, 0.003]}, "seeds": [0, 1], "fusion": {"max_members": 3}}
    sweep = build_sweep(raw(**grid))
    plan = plan_fusion(sweep)
    assert plan.device == "cpu" and [len(g.slots) for g in plan.fused] == [2, 2]
    assert members(plan, sweep)[0] == [("lr=0.001", 0, 0), ("lr=0.001", 1, 0)]
    sweep = build_sweep(raw(**grid, resources={"cpu": 1, "gpu": 0.5}))
    plan = plan_fusion(sweep)
    assert plan.device == "gpu" and sorted(len(g.slots) for g in plan.groups) == [1, 3]
    alone = [g for g in plan.groups if len(g.slots) == 1]
    assert alone[0].name is None  # alone: the cheaper step on a GPU
    assert balanced_chunks(list(range(7)), 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert plan_fusion(build_sweep(raw(resources={"cpu": 1, "gpu": 1}))).cap == 16


def test_optuna_samples_of_a_unit_fuse_unless_a_parameter_changes_shapes():
    searched = raw(
        seeds=[0],
        grid={},
        parameters={"model.lr": {"min": 0.001, "max": 0.01, "distribution": "log_uniform_values"}},
        num_samples=5,
    )
    sweep = build_sweep(searched)
    plan = plan_fusion(sweep)
    assert sorted(len(g.slots) for g in plan.fused) == [2, 3]
    assert sorted(s.sample for g in plan.fused for s in g.slots) == [0, 1, 2, 3, 4]
    assert "default seed=0: samples" in "\n".join(fusion_lines(sweep, plan))
    # a sampled member axis (memory attention's K) changes no group's shapes: the samples fuse
    memory = dict(searched, model={"preset": "tiny", "attention": "memory"})
    memory["parameters"] = {"model.K": {"values": [2, 8]}}
    assert len(plan_fusion(build_sweep(memory)).fused) == 2
    searched["parameters"]["model.hidden_size"] = {"values": [32, 64]}
    sweep = build_sweep(searched)
    plan = plan_fusion(sweep)
    assert plan.fused == [] and len(plan.groups) == 5
    assert any("parameters.model.hidden_size changes the model's shapes" in a for a in plan.alone)


def test_what_turns_fusion_off_is_said(tmp_path):
    assert "fusion is off" in plan_fusion(build_sweep(raw(fusion=False))).off
    assert plan_fusion(build_sweep(raw(fusion={"max_members": 1}))).fused == []
    ddp = plan_fusion(build_sweep(raw(resources={"cpu": 1, "workers": 2})))
    assert "DDP" in ddp.off
    epochs = build_sweep(raw(trainer={"max_steps": 10, "val_check_interval": 0.5}))
    plan = plan_fusion(epochs)
    assert plan.fused == [] and "val_check_interval is not a whole number" in plan.alone[0]
    graphed = raw(resources={"gpu": 1}, trainer={"max_steps": 10, "val_check_interval": 5})
    graphed["trainer"]["cuda_graphs"] = True
    plan = plan_fusion(build_sweep(graphed))  # graphed trials fuse: the fused step is graphed
    assert plan.fused and not plan.alone
    # the seeds of each cell share their shapes: the loop's settings keep them apart, and
    # --dry-run says that rather than that no two share their shapes
    said = fusion_lines(epochs, plan_fusion(epochs))
    assert said[0] == "fusion (max 4 members a group, the CPU default): none of the 6 trials " \
        "trains fused; kept apart:"  # fmt: skip
    assert "share their shapes" not in said[0] and "val_check_interval" in said[1]
    lone = fusion_lines(build_sweep(raw(seeds=[0])), plan_fusion(build_sweep(raw(seeds=[0]))))
    assert lone == [
        "fusion (max 4 members a group, the CPU default): no two of the 2 trials share their "
        "shapes: each trains alone",
        "  never fused with each other: trials that differ in model.attention",
    ]
    paused = raw(
        parameters={"model.lr": {"values": [0.001, 0.01]}},
        num_samples=2,
        seeds={"values": [0, 1, 2], "per_configuration": True},
        early_terminate={"type": "asha"},
    )
    assert "cannot leave a fused group" in plan_fusion(build_sweep(paused)).off
    paused["early_terminate"] = {"type": "none"}
    over_seeds = plan_fusion(build_sweep(paused))
    assert over_seeds.active and over_seeds.seed_chunks == (3,)
    with pytest.raises(SpecError, match="neither off nor a mapping"):
        build_sweep(raw(fusion="sometimes"))


def test_teachers_fuse_with_teachers_and_students_with_students():
    """A teacher cell's seeds fuse like any cell's, but never with a cell that is not a teacher
    (its group goes out first), and a student's with students only, each member with its own
    teacher (the fused model's teacher pass), by the plan alone and with the model's own answer.
    A cell that distils from a checkpoint file (no teacher cell) fuses with its shape's students
    the same way."""
    teacher = {"cell": {"attention": "none", "lr": 0.001}}
    student = {"attention": "memory", "K": 4, "teacher": teacher}
    grid = {
        "model": [
            {"attention": "none", "lr": 0.001},  # the teacher
            {"attention": "none", "lr": 0.003},  # its shape, no teacher: a group of its own
            dict(student, distill_weight=1.0),
        ]
    }
    sweep = build_sweep(raw(grid=grid))
    for plan in (plan_fusion(sweep), plan_fusion(sweep, check=unfusable)):
        assert plan.off is None and not plan.alone
        assert members(plan, sweep) == [
            [("attention=none lr=0.001", s, 0) for s in (0, 1, 2)],
            [("attention=none lr=0.003", s, 0) for s in (0, 1, 2)],
            [("attention=memory K=4 distill_weight=1", s, 0) for s in (0, 1, 2)],
        ], "lr alone would let the two cells fuse: a teacher's group holds teachers only"
    by_file = {"attention": "memory", "K": 4, "teacher_checkpoint": "bahdanau.ckpt"}
    grid = {
        "model": [
            {"attention": "none"},
            dict(by_file, distill_weight=1.0),
            dict(by_file, init_from_teacher="encoder"),
            dict(by_file, distill_weight=0.0),
        ]
    }
    sweep = build_sweep(raw(grid=grid))
    plan = plan_fusion(sweep, check=unfusable)
    assert not plan.alone and sum(len(g.slots) for g in plan.fused) == 12


def test_multi_objective_studies_fuse_unless_their_rung_rule_pauses_trials():
    """A multi-objective study's samples fuse like a one-metric study's; the Pareto rung rule's
    ``promotion: wait`` (its default) pauses trials at a rung, which a fused member cannot do, so
    that sweep trains unfused and says why; ``promotion: immediate`` fuses."""
    moo = raw(
        seeds=[0],
        grid={},
        metric=None,
        objectives=[
            {"name": "val/bleu", "goal": "maximize"},
            {"name": "val/loss", "goal": "minimize"},
        ],
        parameters={"model.lr": {"min": 0.001, "max": 0.01, "distribution": "log_uniform_values"}},
        num_samples=3,
    )
    del moo["metric"]
    assert [len(g.slots) for g in plan_fusion(build_sweep(moo)).fused] == [3]
    moo["early_terminate"] = {"type": "pareto", "grace_period": 1}
    waiting = plan_fusion(build_sweep(moo))
    assert waiting.fused == [] and "promotion: wait pauses trials" in waiting.off
    assert "(promotion: immediate fuses)" in fusion_lines(build_sweep(moo), waiting)[0]
    moo["early_terminate"]["promotion"] = "immediate"
    assert [len(g.slots) for g in plan_fusion(build_sweep(moo)).fused] == [3]


def test_member_keys_round_trip_and_configuration_chunks():
    config = {FUSED_WITH: "g2", FUSED_MEMBER: "2/3", "cell": "x"}
    assert member_of(config) == ("g2", 1, 3) and member_share(config) == pytest.approx(1 / 3)
    assert member_of({"cell": "x"}) is None and member_share({}) == 1.0
    assert configuration_member("c#0", 1, 3, 3) == {FUSED_WITH: "c#0", FUSED_MEMBER: "2/3"}
    assert configuration_member("c#0", 3, 4, 3) == {FUSED_WITH: "c#0/2", FUSED_MEMBER: "2/2"}
    assert configuration_member("c#0", 0, 1, 3) == {}


def test_dry_run_prints_the_groups(tmp_path, capsys):
    import yaml

    path = tmp_path / "f.yaml"
    path.write_text(yaml.safe_dump(raw(), sort_keys=False))
    assert main([str(path), "--dry-run", "--output", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "6 of the 6 trials train in 2 fused group(s)" in out
    assert "attention=memory K=4: seeds 0, 1, 2" in out
    assert (
        main([str(path), "--dry-run", "--set", "fusion=off", "--output", str(tmp_path / "o")]) == 0
    )
    assert "none of the 6 trials is fused: fusion is off" in capsys.readouterr().out


def test_a_sweep_with_baselines_counts_them_in_the_fusion_line_as_in_the_trial_count(
    tmp_path, capsys
):
    """minimal_k's smoke dry run said "20 trials" and then "none of the 16 trials is fused": the
    relative constraint's 4 baselines are trials too, and none of them is fused either."""
    spec = str(Path(__file__).resolve().parents[3] / "sweeps" / "minimal_k.yaml")
    assert main([spec, "--smoke", "--dry-run", "--output", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "= 4 grid points, 20 trials;" in out
    # 4 x 4 samples is 16: the line says where the other 4 come from
    assert "4 samples per cell and seed" in out
    assert "plus 1 baseline (model.attention=bahdanau) per cell and seed" in out
    assert "fusion: none of the 20 trials is fused" in out
    # on GPUs (the full study), the arrangement and its GPU-hours count the 4 baselines too
    assert main([spec, "--dry-run", "--output", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert (
        "100 trials;" in out
        and "GPU arrangement, the plan's (resources.gpu auto): 100 trial(s)" in out
    )


def test_the_gpu_arrangement_says_which_measured_model_stands_in_for_one_it_has_no_figures_of(
    tmp_path, capsys
):
    """wmt17's GPU-hours came from the copy task's paper_copy step with nothing saying so."""
    root = Path(__file__).resolve().parents[3] / "sweeps"
    assert main([str(root / "wmt17.yaml"), "--dry-run", "--output", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert (
        "costed: wmt17's paper_wmt model is costed as the table's paper_copy model on the copy "
        "task (nearest in hidden size) at the same length: not measured" in out
    )
    assert main([str(root / "k_vs_length.yaml"), "--dry-run", "--output", str(tmp_path / "k")]) == 0
    assert "costed:" not in capsys.readouterr().out  # paper_copy on the copy task: measured


def test_the_torch_free_fuse_key_agrees_with_the_fused_models_shape_key():
    """``--dry-run`` groups trials by a key written without torch; the fused model's own
    shape_key must agree: the same settings left out, and every group of the shipped studies one
    shape to the fused model (a group it refused would fail at its first step)."""
    import inspect
    from pathlib import Path

    from lightning_modules.fused import key
    from lightning_modules.module import Seq2SeqModule
    from sweeps.spec import load_spec

    params = set(inspect.signature(Seq2SeqModule.__init__).parameters) - {"self"}
    root = Path(__file__).resolve().parents[3]
    checked = 0
    for path in sorted((root / "sweeps").glob("*.yaml")):
        profiles = [None] + (["cpu"] if "\n  cpu:" in path.read_text() else [])
        sweeps = [load_spec(path, profile=p) for p in profiles]
        for sweep, group in [(sw, g) for sw in sweeps for g in plan_fusion(sw).fused]:
            keys = set()
            for slot in group.slots:
                model = sweep.plans[slot.unit].model
                args = {k: v for k, v in model.items() if k in params}
                args["attention_kwargs"] = {k: v for k, v in model.items() if k not in params}
                keys.add(key.shape_key({**args, "src_vocab_size": 24, "tgt_vocab_size": 24}))
            assert len(keys) == 1, (path.name, group.name)
            checked += 1
    assert checked >= 18


def test_the_dry_runs_counts_take_in_the_baselines_and_say_what_the_gpu_time_leaves_out(
    tmp_path, capsys
):
    """minimal_k's fusion line said "96 of the 96 trials ... 6 training processes" beside "100
    trials" and 4 baselines trained alone; the GPU time of a sweep with confirm seeds did not say
    that the confirm stage's full-length trials were not in it."""
    sweeps = Path(__file__).resolve().parents[3] / "sweeps"
    out = ["--dry-run", "--output", str(tmp_path), "--set", "resources.gpu=1"]
    assert main([str(sweeps / "minimal_k.yaml"), *out, "--set", "early_terminate.type=none"]) == 0
    said = capsys.readouterr().out
    assert (
        "96 of the 100 trials train in 6 fused group(s), 4 alone: 10 training processes for "
        "100 trials (unfused: 100)"
    ) in said
    confirm = ["--set", "seeds={values: [0, 1, 2], confirm: [7]}"]
    assert main([str(sweeps / "k_vs_length.yaml"), *out, *confirm]) == 0
    assert "nor the confirm stage's 28 full-length trial(s))" in capsys.readouterr().out


def test_the_dry_run_says_teachers_students_and_the_rest_are_never_fused_with_each_other():
    """memory_distill's students and its cells that teach nobody share a fuse key, yet train in
    groups of their own (a student's only once its teachers ended); the dry run's list of what
    keeps kinds apart named the attention alone."""
    from sweeps.spec import load_spec

    root = Path(__file__).resolve().parents[3]
    sweep = load_spec(str(root / "sweeps" / "memory_distill.yaml"), overrides=["resources.gpu=1"])
    plan = plan_fusion(sweep)
    (line,) = [s for s in fusion_lines(sweep, plan) if "never fused with each other" in s]
    assert "model.attention" in line and "their role (a teacher's, a student's, or neither" in line
    # a sweep without teachers says nothing of roles
    plain = load_spec(str(root / "sweeps" / "k_vs_length.yaml"), overrides=["resources.gpu=0"])
    said = "\n".join(fusion_lines(plain, plan_fusion(plain)))
    assert "their role" not in said
