"""Bad input a dry run used to accept, or to answer with a misleading line or a traceback: text
for a yes/no setting, validation turned off, a negative sampler seed, a validation interval past
an epoch, a max_source_len below the task's sources, a stop_when bound against its metric's
direction, ``--set`` into a grid variant or a parameter's range, a damaged launch.json, a number
YAML reads as text though written unquoted, a folder of more than 8 sweep files. Each fails
before anything starts, in one line naming the key, the value and what to write. No Ray."""

from __future__ import annotations

import json
import os

import pytest
import yaml
from sweep_helpers import base_spec, spec_error

from sweeps.launch import main as launch_main
from sweeps.spec import build_sweep, load_spec

error_of = spec_error


# ---- text for a yes/no setting: pydantic's lax mode read 'false' as False for the check, and
# the constructor was given the text, which is true


def _variant(**extra):
    raw = base_spec()
    raw["grid"]["model"].append({"attention": "memory", "K": 4, **extra})
    return raw


@pytest.mark.parametrize(
    "raw, overrides, said",
    [
        (
            _variant(position_encoding="false"),
            [],
            "grid.model[2].position_encoding: 'false' is text; expected bool (write false "
            "without quotes)",
        ),
        (
            base_spec(model={"preset": "tiny", "bidirectional": "false"}),
            [],
            "model.bidirectional: 'false' is text; expected bool or null (write false without "
            "quotes)",
        ),
        (
            base_spec(task={**base_spec()["task"], "bucket_batches": "no"}),
            [],
            "task.bucket_batches: 'no' is text; expected bool (write false without quotes)",
        ),
        (
            base_spec(),
            ["model.bidirectional='yes'"],
            "--set model.bidirectional: 'yes' is text; expected bool or null (write true without "
            "quotes)",
        ),
        (
            base_spec(),
            ["trainer.deterministic='false'"],
            "--set trainer.deterministic: 'false' is text; expected bool (write false without "
            "quotes)",
        ),
        (
            base_spec(),
            ["grid.trainer.deterministic=['false', true]"],
            "trainer.deterministic: 'false' is text; expected bool (write false without quotes)",
        ),
        (
            base_spec(),
            ["heldout.enabled='off'"],
            "--set heldout.enabled: 'off' is text; expected bool (write false without quotes)",
        ),
        (
            base_spec(model={"preset": "tiny", "bidirectional": "maybe"}),
            [],
            "model.bidirectional: 'maybe' is text; expected bool or null (write true or false "
            "without quotes)",
        ),
    ],
)
def test_text_for_a_yes_no_setting_is_refused(raw, overrides, said):
    msg = error_of(raw, overrides=overrides)
    assert msg.startswith(f"x.yaml: {said}"), msg
    # a yes/no value itself, and text for a setting that takes text, pass as before
    sweep = build_sweep(_variant(position_encoding=False), overrides=["model.bidirectional=true"])
    assert {p.model.get("position_encoding") for p in sweep.plans} == {None, False}
    assert build_sweep(base_spec(model={"preset": "tiny", "attention": "none"})).plans


# ---- validation off, a negative sampler seed: each crashed the launch after the dry run passed


@pytest.mark.parametrize("value", ["0", "0.0"])
def test_validation_turned_off_is_refused(value):
    msg = error_of(base_spec(), overrides=[f"trainer.limit_val_batches={value}"])
    assert msg == (
        f"x.yaml: --set trainer.limit_val_batches: {value} turns validation off, so no trial "
        "would report the sweep's metric (trials report when they validate); give a count of "
        "validation batches (e.g. 2) or a fraction above 0 (e.g. 0.25)"
    )
    grid = error_of(base_spec(), overrides=["grid.trainer.limit_val_batches=[2, 0]"])
    assert grid.startswith("x.yaml: trainer.limit_val_batches: 0 turns validation off"), grid
    assert build_sweep(base_spec(), overrides=["trainer.limit_val_batches=0.5"]).plans


def test_a_negative_sampler_seed_is_refused():
    msg = error_of(base_spec(), overrides=["search.seed=-5"])
    assert msg.startswith(
        "x.yaml: --set search.seed: -5 is out of range; the samplers' base seed is a whole "
        "number from 0"
    ), msg
    assert build_sweep(base_spec(), overrides=["search.seed=0"]).spec.search.seed == 0


# ---- settings that do not fit the copy task's data


def test_a_validation_interval_past_an_epoch_with_check_val_every_n_epoch_is_refused():
    raw = base_spec(task={**base_spec()["task"], "train_size": 650, "batch_size": 64})
    every = ["trainer.check_val_every_n_epoch=1", "trainer.max_steps=40"]
    msg = error_of(raw, overrides=[*every, "trainer.val_check_interval=12"])
    assert msg == (
        "x.yaml: --set trainer.check_val_every_n_epoch: 1 makes Lightning count val_check_interval "
        "(12) in training batches within one epoch, but an epoch has 11 (train_size 650 / "
        "batch_size 64); remove check_val_every_n_epoch (the interval then counts batches "
        "across epochs) or give a val_check_interval up to 11"
    )
    assert build_sweep(raw, overrides=[*every, "trainer.val_check_interval=11"]).plans
    # without check_val_every_n_epoch the interval counts batches across epochs: taken
    assert build_sweep(raw, overrides=["trainer.val_check_interval=12"]).plans
    cut = error_of(
        raw, overrides=[*every, "trainer.val_check_interval=6", "trainer.limit_train_batches=5"]
    )
    assert "an epoch has 5 (train_size 650 / batch_size 64, cut by limit_train_batches)" in cut


def test_a_max_source_len_below_the_copy_tasks_sources_is_refused():
    pe = "grid.model=[{attention: memory, K: 4, position_encoding: true}]"
    msg = error_of(base_spec(), overrides=[pe, "model.max_source_len=5"])
    assert msg == (
        "x.yaml: --set model.max_source_len: 5 is below the copy task's longest source, 6 tokens "
        "(max_length 5 plus EOS), and attention 'memory' here covers only max_source_len "
        "positions; write max_source_len: 6 (or more), or leave it out (the trial gives the "
        "task's)"
    )
    assert build_sweep(base_spec(), overrides=[pe, "model.max_source_len=6"]).plans
    # memory attention without position encodings covers any length
    plain = "grid.model=[{attention: memory, K: 4}]"
    assert build_sweep(base_spec(), overrides=[plain, "model.max_source_len=5"]).plans
    location = "grid.model=[{attention: luong_location, max_source_len: [6, 5]}]"
    msg = error_of(base_spec(), overrides=[location])
    assert msg.startswith("x.yaml: --set grid.model: grid.model[0].max_source_len: 5 is below"), msg


@pytest.mark.parametrize("bucket_batches", [False, True])
def test_the_copy_tasks_sizes_are_its_datamodules(bucket_batches):
    """The dry run's figures (:mod:`sweeps.spec.data_fit`) are what the datamodule builds."""
    from datamodules.copy_task import CopyTaskDataModule
    from sweeps.spec.data_fit import copy_longest_source, copy_train_batches

    for size, batch, length in [(650, 64, 5), (640, 64, 12), (20_000, 64, 3), (7, 8, 1)]:
        task = {"name": "copy", "train_size": size, "batch_size": batch, "max_length": length}
        dm = CopyTaskDataModule(
            train_size=size,
            batch_size=batch,
            max_length=length,
            val_size=4,
            test_size=0,
            bucket_batches=bucket_batches,
        )
        dm.setup("fit")
        assert copy_train_batches(task) == len(dm.train_dataloader())
        assert copy_longest_source(task) == dm.max_source_len
    assert copy_train_batches({"name": "copy"}) == len(
        CopyTaskDataModule(val_size=4, test_size=0).train_dataloader()
    )


# ---- stop_when against its metric's direction stopped every trial at its first report


@pytest.mark.parametrize(
    "stop, said",
    [
        (
            "{metric: val/bleu, at_most: 90, reports: 1}",
            "at_most 90 for val/bleu would stop every trial as converged at its first report (a "
            "higher val/bleu is better, and an untrained model's is at most 90 already); write "
            "at_least: 90",
        ),
        (
            "{metric: val/loss, at_least: 0.1}",
            "at_least 0.1 for val/loss would stop every trial as converged at its first report "
            "(a lower val/loss is better, and an untrained model's is at least 0.1 already); "
            "write at_most: 0.1",
        ),
    ],
)
def test_a_stop_when_bound_against_the_metrics_direction_is_refused(stop, said):
    assert (
        error_of(base_spec(), overrides=[f"stop_when={stop}"]) == f"x.yaml: --set stop_when: {said}"
    )


# ---- --set into a grid variant or a parameter's range


def _cells(sweep):
    return [c.name for c in sweep.cells]


def test_a_set_reaches_into_a_grid_variant_by_its_number():
    raw = base_spec()  # grid.model: [{attention: none}, {attention: memory, K: [2, 4]}]
    assert _cells(build_sweep(raw, overrides=["grid.model.1.K=[4, 8]"])) == [
        "attention=none",
        "attention=memory K=4",
        "attention=memory K=8",
    ]
    assert _cells(build_sweep(raw, overrides=["grid.model.1.K=4"]))[1:] == ["attention=memory K=4"]
    whole = build_sweep(raw, overrides=["grid.model.1={attention: memory, K: [4, 8]}"])
    assert _cells(whole)[1:] == ["attention=memory K=4", "attention=memory K=8"]
    assert error_of(raw, overrides=["grid.model.5.K=4"]) == (
        "x.yaml: --set grid.model.5.K: grid.model is a list of 2 item(s) (numbered 0 to 1), "
        "cannot set grid.model.5.K"
    )
    # an axis's value by its number
    axis = build_sweep(raw, overrides=["grid.task.max_length=[3, 4]", "grid.task.max_length.1=6"])
    assert sorted({p.task["max_length"] for p in axis.plans}) == [3, 6]
    # a new axis named with a dot is added as before, not looked for in grid.model's list
    sweep = build_sweep(raw, overrides=["grid.model.dropout=[0.1, 0.2]"])
    assert sweep.spec.grid["model.dropout"] == [0.1, 0.2]
    assert sorted({p.model["dropout"] for p in sweep.plans}) == [0.1, 0.2]


def test_a_set_reaches_into_a_parameters_range():
    searched = {
        "model.lr": {"min": 1e-4, "max": 1e-2, "distribution": "log_uniform_values"},
        "model.dropout": {"values": [0.0, 0.2]},
    }
    raw = base_spec(parameters=searched, num_samples=2)
    sweep = build_sweep(
        raw, overrides=["parameters.model.lr.max=0.05", "parameters.model.dropout.values=[0.1]"]
    )
    assert sweep.spec.parameters["model.lr"].max == 0.05
    assert sweep.spec.parameters["model.lr"].min == 1e-4
    assert sweep.spec.parameters["model.dropout"].values == [0.1]
    assert error_of(raw, overrides=["parameters.model.lr.maxx=1"]).startswith(
        "x.yaml: --set parameters.model.lr.maxx: unknown key"
    )
    # a new parameter given by its keys, one --set each ("must be a mapping of its keys" before)
    sweep = build_sweep(
        raw,
        overrides=[
            "parameters.model.weight_decay.min=0.001",
            "parameters.model.weight_decay.max=0.1",
            "parameters.model.weight_decay.distribution=log_uniform_values",
            "parameters.model.hidden_size.values=[16, 32]",
        ],
    )
    wd = sweep.spec.parameters["model.weight_decay"]
    assert (wd.min, wd.max, wd.distribution) == (0.001, 0.1, "log_uniform_values")
    assert sweep.spec.parameters["model.hidden_size"].values == [16, 32]
    assert error_of(raw, overrides=["parameters.model.weight_decay.min=0.001"]) == (
        "x.yaml: parameters.model.weight_decay: give either `values: [...]` or both `min` and `max`"
    )


# ---- a damaged launch.json: --resume said it with a traceback


def _started(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump(base_spec()))
    out = tmp_path / "out"
    sweep = load_spec(str(spec))
    folder = out.resolve() / sweep.name
    from sweeps.spec import save_launch

    path = save_launch(folder, [], None, sweep.planned)
    (folder / "results.csv").write_text("trial_id,status\nabc,budget\n")
    return spec, out, path


@pytest.mark.parametrize(
    "damage, said",
    [
        (lambda text: text[:30], "is damaged (not JSON: "),
        (lambda text: "{}", "is damaged (no list of --set overrides)"),
        (lambda text: "[]", "is damaged (not a mapping)"),
        (lambda text: '{"overrides": [], "planned": 3}', "is damaged (its profile or plan"),
    ],
)
def test_a_damaged_launch_record_is_one_line_naming_it(tmp_path, capsys, damage, said):
    spec, out, path = _started(tmp_path)
    path.write_text(damage(path.read_text()))
    assert launch_main([str(spec), "--output", str(out), "--resume", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert f"--resume: {path} {said}" in err, err
    assert "restore it from a backup, or start the sweep anew in another --output" in err


def test_the_launch_record_is_replaced_in_one_step(tmp_path, monkeypatch):
    """Written to a temporary file and moved over the old one: a launch killed while writing
    leaves the old record whole."""
    from sweeps.spec import save_launch

    replaced = []
    real = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: (replaced.append(str(b)), real(a, b)))
    path = save_launch(tmp_path, ["model.lr=0.01"], None)
    assert replaced == [str(path)]
    assert json.loads(path.read_text())["overrides"] == ["model.lr=0.01"]


# ---- a number YAML reads as text, though written unquoted


def test_a_dotted_number_with_an_unsigned_exponent_says_how_yaml_reads_it():
    assert error_of(base_spec(), overrides=["trainer.max_steps=1.2e3"]) == (
        "x.yaml: --set trainer.max_steps: '1.2e3' is text; expected int (YAML reads 1.2e3 as "
        "text: write 1200 (or 1.2e+3))"
    )
    task = {**base_spec()["task"], "train_size": yaml.safe_load("2.0e4")}
    assert error_of(base_spec(task=task)) == (
        "x.yaml: task.train_size: '2.0e4' is text; expected int (YAML reads 2.0e4 as text: "
        "write 20000 (or 2.0e+4))"
    )
    lr = yaml.safe_load("2.5e3")
    assert "YAML reads 2.5e3 as text: write 2.5e+3 or 2500" in error_of(
        base_spec(model={"preset": "tiny", "lr": lr})
    )
    assert isinstance(yaml.safe_load("2.0e+4"), float)  # the form the line suggests is a number


# ---- a folder as the spec


def test_a_folder_as_the_spec_lists_all_its_sweep_files(tmp_path, capsys):
    names = [f"s{i:02d}.yaml" for i in range(12)]
    for name in names:
        (tmp_path / name).write_text("name: a\n")
    assert launch_main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"({', '.join(names)})" in err, err


# ---- search settings a single-metric sweep would not use: they loaded, and the launch counted
# num_samples trials per cell (its budget, its completeness check) where one per seed trained, or
# sampled at random where NSGA-II was asked for


def test_num_samples_without_parameters_is_refused_naming_both_ways_out():
    said = error_of(base_spec(num_samples=8))
    assert said.startswith("x.yaml: num_samples: 8 is Optuna's budget of trials per cell and seed")
    assert "remove num_samples, or add parameters" in said
    searched = base_spec(num_samples=8, parameters={"model.lr": {"min": 1e-4, "max": 1e-2}})
    assert build_sweep(searched, source="x.yaml").num_trials == 3 * 8
    assert build_sweep(base_spec(num_samples=1), source="x.yaml").num_trials == 3


def test_nsga2_on_one_metric_is_refused_and_taken_with_objectives():
    said = error_of(base_spec(), overrides=["search.sampler=nsga2"])
    assert said == (
        "x.yaml: --set search.sampler: nsga2 (Optuna's NSGAIISampler) ranks trials on several "
        "objectives; this sweep has one metric: use tpe or random, or declare `objectives:`"
    )
    two = base_spec(
        objectives=[
            {"name": "val/bleu", "goal": "maximize"},
            {"name": "decode_seconds", "goal": "minimize"},
        ],
        parameters={"model.lr": {"min": 1e-4, "max": 1e-2}},
        num_samples=4,
        search={"sampler": "nsga2"},
    )
    assert build_sweep(two, source="x.yaml").spec.search.sampler == "nsga2"
