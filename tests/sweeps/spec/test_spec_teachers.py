"""Dependent trials in the sweep file (sweeps.spec.teachers): which cell teaches which, the
order --dry-run prints, and the one-line errors for a missing teacher cell, a cycle and the other
mistakes, each naming its key path, before Ray starts. No Ray needed."""

from __future__ import annotations

import pytest
from sweep_helpers import spec_error

from sweeps.spec import build_sweep

STUDENT = {
    "attention": "memory",
    "K": [2, 4],
    "distill_weight": [0, 1.0],
    "teacher": {"cell": {"attention": "bahdanau"}},
}


def spec(**over):
    raw = {
        "name": "t",
        "task": {"name": "copy", "max_length": 5, "train_size": 64, "val_size": 16},
        "model": {"preset": "tiny"},
        "grid": {
            "task.max_length": [5, 7],
            "model": [{"attention": "bahdanau"}, dict(STUDENT)],
        },
        "seeds": [0, 1],
        "trainer": {"max_steps": 10},
    }
    raw.update(over)
    return raw


error_of = spec_error


def test_each_student_cell_is_taught_by_the_teacher_cell_of_its_length_and_seed():
    sweep = build_sweep(spec(), source="x.yaml")
    names = {c.slug: c.name for c in sweep.cells}
    taught = {names[s]: names[t] for s, t in sweep.teachers.items()}
    # distill_weight 0 needs no teacher: only the distill_weight 1 cells wait
    assert taught == {
        f"length={L} attention=memory K={K} distill_weight=1": f"length={L} attention=bahdanau"
        for L in (5, 7)
        for K in (2, 4)
    }
    assert all(c.name.count("teacher") == 0 for c in sweep.cells), "the teacher is no grid value"
    for i, plan in enumerate(sweep.plans):
        j = sweep.teacher_index(i)
        if plan.cell.slug not in sweep.teachers:
            assert j is None
            continue
        teacher = sweep.plans[j]
        assert teacher.seed == plan.seed and teacher.model["attention"] == "bahdanau"
        assert teacher.task == plan.task


def test_dry_run_prints_the_order(tmp_path, capsys):
    import yaml

    from sweeps.launch import main

    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(spec(), sort_keys=False))
    assert main([str(path), "--dry-run", "--output", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "teachers: 4 cell(s) wait for their teacher cell's trials" in out
    assert "1. at once: 6 cell(s), the teachers first: length=5 attention=bahdanau" in out
    assert (
        "2. length=7 attention=memory K=4 distill_weight=1  <-  length=7 attention=bahdanau" in out
    )


def test_a_chain_of_teachers_is_ordered_and_a_cycle_is_refused(tmp_path):
    chain = spec()
    chain["grid"]["model"] = [
        {"attention": "bahdanau"},
        {
            "attention": "memory",
            "K": 4,
            "init_from_teacher": "encoder",
            "teacher": {"cell": {"attention": "bahdanau"}},
        },
        {
            "attention": "memory",
            "K": 2,
            "distill_weight": 1.0,
            "teacher": {"cell": {"attention": "memory", "K": 4}},
        },
    ]
    sweep = build_sweep(chain, source="x.yaml")
    names = {c.slug: c.name for c in sweep.cells}
    assert {names[s]: names[t] for s, t in sweep.teachers.items()}[
        "length=5 attention=memory K=2 distill_weight=1"
    ] == "length=5 attention=memory K=4 init_from_teacher=encoder"
    chain["grid"]["model"][1]["teacher"] = {"cell": {"attention": "memory", "K": 2}}
    message = error_of(chain)
    assert message.startswith("x.yaml: grid.model[1].teacher: a cycle of teachers:")
    assert "'length=5 attention=memory K=4 init_from_teacher=encoder' -> " in message


def test_a_teacher_cell_that_is_not_in_the_sweep_is_refused():
    raw = spec()
    raw["grid"]["model"][1]["teacher"] = {"cell": {"attention": "luong_dot"}}
    message = error_of(raw)
    assert message.startswith("x.yaml: grid.model[1].teacher.cell: no cell of the sweep has ")
    assert "attention=luong_dot at length=5" in message
    # a misspelt key: it said "no cell of the sweep has atention=bahdanau", naming no key problem
    raw["grid"]["model"][1]["teacher"] = {"cell": {"atention": "bahdanau"}}
    message = error_of(raw)
    assert message.startswith(
        "x.yaml: grid.model[1].teacher.cell: model.atention is no grid value of any cell (did "
        "you mean model.attention?); a teacher is named by its cell's grid values: "
    ), message


def test_a_teacher_that_matches_several_cells_is_refused():
    raw = spec()
    raw["grid"]["model"][0] = {"attention": "bahdanau", "dropout": [0.0, 0.1]}
    message = error_of(raw)
    assert "grid.model[1].teacher.cell: attention=bahdanau at length=5 matches 2 cells" in message


TAUGHT = {**STUDENT, "distill_weight": 1.0}


@pytest.mark.parametrize(
    ("variant", "path", "says"),
    [
        (
            {**TAUGHT, "teacher": {"cell": {"attention": "bahdanau"}, "cel": 1}},
            "grid.model[1].teacher.cel",
            "unknown key; allowed here: cell, pick",
        ),
        (
            {**TAUGHT, "teacher": {"cell": {"attention": "bahdanau"}, "pick": "worst"}},
            "grid.model[1].teacher.pick",
            "'best'",
        ),
        (
            {"attention": "memory", "distill_weight": 1.0},
            "grid.model[1].distill_weight",
            "needs a teacher",
        ),
        (
            {"attention": "luong_general", "distill_weight": 1.0, "teacher": STUDENT["teacher"]},
            "grid.model[1].distill_weight",
            "attention 'luong_general' has no C",
        ),
        (
            {**TAUGHT, "teacher_checkpoint": "x.ckpt"},
            "grid.model[1].teacher_checkpoint",
            "keep one of the two",
        ),
        ({**TAUGHT, "hidden_size": 32}, "grid.model[1]", "memory vectors of D=64 but its teacher"),
        (
            {**TAUGHT, "distill_weight": 0, "init_from_teacher": "encoder", "embedding_dim": 16},
            "grid.model[1]",
            "differ in embedding_dim (16 vs 32)",
        ),
    ],
)
def test_mistakes_name_their_key_path(variant, path, says):
    raw = spec()
    raw["grid"]["model"][1] = variant
    message = error_of(raw)
    assert message.startswith(f"x.yaml: {path}: "), message
    assert says in message


def test_teachers_are_refused_where_students_cannot_be_held_back():
    message = error_of(spec(storage={"path": "s3://bucket/sweeps"}))
    assert message.startswith(
        "x.yaml: storage.path: a student trial reads its teacher's checkpoint"
    )
    message = error_of(spec(seeds={"values": [0, 1], "confirm": [5]}))
    assert "grid.model[1].teacher: teachers need per-seed units" in message
    assert "a teacher is named by a grid variant" in error_of(
        spec(model={"preset": "tiny", "teacher": {"cell": {"attention": "bahdanau"}}})
    )


def test_cuda_graphs_for_a_distilling_student_are_refused_with_the_fix():
    """Its teacher runs outside the graph: the student would fail at fit, after its teacher's
    trials trained. Refused on loading, wherever the graphs are asked for (the trainer section,
    a grid, a search) and wherever the student's distill_weight comes from."""
    gpu = {"resources": {"gpu": 0.5}}
    said = error_of(spec(trainer={"max_steps": 10, "cuda_graphs": True}, **gpu))
    assert said.startswith(
        "x.yaml: trainer.cuda_graphs: does not capture a distilling student's teacher, which "
        "runs outside the graph: cell 'length=5 attention=memory K=2 distill_weight=1' "
        "(distill_weight 1) would fail when it starts (after its teacher cell's trials, where "
        "it has one)"
    ), said
    assert said.endswith(
        "train distilling students without graphs (trainer.cuda_graphs: false, e.g. --set "
        "trainer.cuda_graphs=false), or set their distill_weight to 0"
    )
    auto = error_of(spec(trainer={"max_steps": 10, "cuda_graphs": True}, resources={"gpu": "auto"}))
    assert "does not capture a distilling student's teacher" in auto
    grid = spec(**gpu)
    grid["grid"]["trainer.cuda_graphs"] = [False, True]
    assert error_of(grid).startswith("x.yaml: grid.trainer.cuda_graphs: does not capture")
    assert "(take true out of grid.trainer.cuda_graphs)" in error_of(grid)
    # without students, or without graphs, nothing to refuse
    no_students = spec(trainer={"max_steps": 10, "cuda_graphs": True}, **gpu)
    no_students["grid"]["model"][1] = {**STUDENT, "distill_weight": [0]}
    no_students["grid"]["model"][1].pop("teacher")
    assert build_sweep(no_students, source="x.yaml").plans
    assert build_sweep(spec(**gpu), source="x.yaml").plans
    # a search that samples the weight, a fixed teacher checkpoint
    searched = {
        "name": "t",
        "task": {"name": "copy", "max_length": 5, "train_size": 64, "val_size": 16},
        "model": {"preset": "tiny", "attention": "memory", "K": 2, "teacher_checkpoint": "t.ckpt"},
        "trainer": {"max_steps": 10, "cuda_graphs": True},
        "parameters": {"model.distill_weight": {"min": 0.0, "max": 1.0}},
        "num_samples": 2,
        **gpu,
    }
    assert "(a sampled model.distill_weight above 0)" in error_of(searched)
    searched["trainer"]["cuda_graphs"] = False
    assert build_sweep(searched, source="x.yaml").plans
