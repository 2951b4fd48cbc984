"""Inputs a dry run used to accept, or to answer in pydantic's words (an internal class name,
"unable to parse string as an integer"): seeds Lightning refuses or repeats, trainer values
Lightning refuses when the trial starts, numbers YAML reads as text, yes/no values for numbers, a
section given one value, a profile checked only when used, an empty --output, a tolerance under
asha. Each fails before anything starts, in one line naming the key, the value and what to write.
No Ray."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from sweep_helpers import base_spec, spec_error

from sweeps.launch import main as launch_main
from sweeps.spec import SpecError, build_sweep, load_spec

error_of = spec_error


# ---- seeds: what Lightning's seed_everything takes, each once


def test_the_seed_range_is_lightnings():
    from lightning.fabric.utilities.seed import max_seed_value, min_seed_value

    from sweeps.spec.selection_schema import SEED_MAX

    assert (min_seed_value, max_seed_value) == (0, SEED_MAX)
    sweep = build_sweep(base_spec(seeds=[0, SEED_MAX]))
    assert sorted({p.seed for p in sweep.plans}) == [0, SEED_MAX]


WHOLE = "a seed is a whole number from 0 to 4294967295"


@pytest.mark.parametrize(
    "seeds, said",
    [
        (
            [0, -1],
            f"seeds: -1 is out of range; {WHOLE} (Lightning's seed_everything refuses others), "
            "e.g. seeds: [0, 1, 2]",
        ),
        ([2**32], f"seeds: 4294967296 is out of range; {WHOLE}"),
        ([True], f"seeds: True is a yes/no value; {WHOLE}, e.g. seeds: [0, 1, 2]"),
        # two trials of one seed are the same trial (and the same Optuna study's name)
        ([0, 1, 0], "seeds: repeats a seed: [0, 1, 0]; list each seed once"),
        ([], "seeds: an empty list trains nothing; give at least one seed, e.g. seeds: [0, 1, 2]"),
        (
            {"values": []},
            "seeds.values: an empty list trains nothing; give at least one seed, "
            "e.g. values: [0, 1, 2]",
        ),
        ({"values": [-1]}, f"seeds.values: -1 is out of range; {WHOLE}"),
        (
            {"values": [0], "confirm": [2**32]},
            f"seeds.confirm: 4294967296 is out of range; {WHOLE}",
        ),
    ],
)
def test_seeds_lightning_refuses_repeated_or_none_are_refused(seeds, said):
    msg = error_of(base_spec(seeds=seeds))
    assert msg.startswith(f"x.yaml: {said}"), msg


# ---- trainer values Lightning refuses when the trial starts


@pytest.mark.parametrize(
    "key, value, said",
    [
        (
            "val_check_interval",
            1.5,
            "1.5 is above 1.0: Lightning reads a float as a fraction of an epoch (0.0 to 1.0) and "
            "a whole number as a count of training batches between validations; write a fraction "
            "up to 1.0, or a whole number (e.g. 2)",
        ),
        # a float, so a fraction to Lightning, not "every 4 batches"
        ("val_check_interval", 4.0, "4.0 is above 1.0: Lightning reads a float as a fraction"),
        (
            "limit_val_batches",
            2.5,
            "2.5 is above 1.0: Lightning reads a float as a fraction of the validation set (0.0 "
            "to 1.0) and a whole number as a count of validation batches; write a fraction up to "
            "1.0, or a whole number (e.g. 2)",
        ),
        ("limit_train_batches", 3.5, "3.5 is above 1.0: Lightning reads a float as a fraction"),
    ],
)
def test_a_float_above_one_for_a_fraction_or_count_is_refused(key, value, said):
    msg = error_of(base_spec(trainer={"max_steps": 10, key: value}))
    assert msg.startswith(f"x.yaml: trainer.{key}: {said}"), msg


@pytest.mark.parametrize(
    "trainer",
    [
        {"max_steps": 10, "val_check_interval": 1.0, "limit_val_batches": 0.5},
        {"max_steps": 10, "val_check_interval": 10, "limit_val_batches": 2},
        {"max_steps": 10, "limit_train_batches": 1.0, "limit_val_batches": 1},
        # 40 batches are 10 steps of 4 batches: validated at the last step
        {"max_steps": 10, "val_check_interval": 40, "accumulate_grad_batches": 4},
    ],
)
def test_fractions_up_to_one_and_counts_within_the_trial_pass(trainer):
    assert build_sweep(base_spec(trainer=trainer)).plans


def test_a_val_check_interval_past_the_last_step_is_taken():
    """A shorter run by ``--set trainer.max_steps=100`` on a file that validates every 400 steps
    still validates, reports and checkpoints once, as the trial ends (finish_fit)."""
    over = ["trainer.max_steps=100", "trainer.val_check_interval=400"]
    assert build_sweep(base_spec(), overrides=over).plans


def test_a_cells_trainer_section_error_has_one_key_path():
    """A check of the whole section (cuda_graphs with precision), for a cell: ``trainer:``, not
    ``trainer.:``."""
    raw = base_spec(resources={"gpu": 1}, trainer={"max_steps": 10, "cuda_graphs": True})
    raw["grid"]["trainer.precision"] = ["32-true", "16-mixed"]
    msg = error_of(raw)
    assert msg.startswith("x.yaml: trainer: cuda_graphs captures float32 steps"), msg
    assert msg.endswith("(where grid.trainer.precision = '16-mixed')")


@pytest.mark.parametrize(
    "where",
    [
        {"trainer": {"max_steps": 10, "precision": "16-mixed"}},
        {"trainer": {"max_steps": 10, "precision": 16}},  # the legacy spelling, as YAML reads it
        {"grid": {"model": [{"attention": "none"}], "trainer.precision": ["32-true", "16-mixed"]}},
    ],
)
def test_float16_mixed_precision_on_the_cpu_is_refused_with_the_fix(where):
    """Lightning trains ``16-mixed`` as bf16-mixed on a CPU, saying so only in the trial's log:
    every record would name a precision the trials did not train at."""
    said = error_of(base_spec(**where))
    assert said.startswith("x.yaml: trainer.precision: 16"), said
    assert "on a GPU only" in said and "would train bf16-mixed in its place" in said
    assert said.endswith("set trainer.precision: bf16-mixed, or set resources.gpu (e.g. 1 or 0.5)")
    # what the fix says is taken: the CPU's own half precision, or a GPU for the trials
    build_sweep(base_spec(**where), overrides=["resources.gpu=0.5"])
    assert build_sweep(base_spec(trainer={"max_steps": 10, "precision": "bf16-mixed"})).plans


def test_a_trial_on_the_cpu_stops_before_it_builds_anything_at_float16_mixed_precision():
    """Where a cluster's Ray gave a trial no GPU (``resources.gpu: auto`` on CPU nodes), the
    trial is the first to know it is on the CPU: it stops with the fix before any data or model,
    rather than train bf16-mixed."""
    # (the trial's module imports Lightning: this test alone of the file needs it)
    from sweeps.errors import CpuPrecisionError
    from sweeps.trial.fitting import check_cpu_precision

    for precision in ("16-mixed", "16"):
        with pytest.raises(CpuPrecisionError, match="set trainer.precision: bf16-mixed, or give"):
            check_cpu_precision(precision)
    for precision in ("32-true", "bf16-mixed", "16-true", "64-true"):
        check_cpu_precision(precision)


# ---- the file itself: a key given twice, a relative storage path


def test_a_key_given_twice_in_one_mapping_is_refused_with_its_line(tmp_path):
    """PyYAML keeps the last of two equal keys without a word: a pasted line would replace a
    setting unseen."""
    from sweeps.spec import load_spec

    path = tmp_path / "t.yaml"
    path.write_text("name: t\ntask: {name: copy, max_length: 12, max_length: 50}\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert str(info.value) == (
        f"{path}: line 2: max_length is given twice in one mapping; keep one"
    )
    path.write_text("name: t\ntask: {name: copy}\nname: u\n")
    with pytest.raises(SpecError, match="line 3: name is given twice in one mapping "
                       r"\(first on line 1\); keep one"):  # fmt: skip
        load_spec(path)
    # a merge still overrides, and YAML's own errors name the file, not "<unicode string>"
    path.write_text(
        "name: t\nbase: &b {name: copy, max_length: 4}\ntask: {<<: *b, max_length: 5}\n"
    )
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert "base: unknown key" in str(info.value)
    path.write_text("name: t\ntask: {name: copy\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert str(info.value) == (
        f"{path}: not valid YAML: expected ',' or '}}', but got '<stream end>' at line 3, column 1 "
        f"(while parsing a flow mapping that starts at line 2, column 7); correct the file"
    )


def test_a_relative_storage_path_is_taken_from_the_launch_folder(tmp_path, monkeypatch):
    """Tune takes a URI or an absolute path: a relative one ended in pyarrow's error after Ray
    had started."""
    monkeypatch.chdir(tmp_path)
    spec = build_sweep(base_spec(storage={"path": "ckpts"})).spec
    assert spec.storage.path == str(tmp_path / "ckpts")
    assert build_sweep(base_spec(storage={"path": "s3://b/x"})).spec.storage.path == "s3://b/x"


# ---- numbers YAML reads as text, yes/no values for numbers


def test_a_whole_number_yaml_reads_as_text_says_how_to_write_it():
    said = (
        "x.yaml: trainer.max_steps: '1e5' is text; expected int "
        "(YAML reads 1e5 as text: write 100000)"
    )
    as_yaml = yaml.safe_load("{max_steps: 1e5}")  # YAML 1.1: no dot, so not a number
    assert error_of(base_spec(trainer=as_yaml)) == said
    assert error_of(base_spec(), overrides=["trainer.max_steps=1e5"]) == said.replace(
        "x.yaml: ", "x.yaml: --set ", 1
    )
    # the constructor settings say it alike (pydantic: "unable to parse string as an integer")
    task = {**base_spec()["task"], "train_size": yaml.safe_load("2e4")}
    assert error_of(base_spec(task=task)) == (
        "x.yaml: task.train_size: '2e4' is text; expected int (YAML reads 2e4 as text: write 20000)"
    )
    # a float's own message is as it was
    assert "YAML reads 3e-3 as text: write 3.0e-3 or 0.003" in error_of(
        base_spec(model={"preset": "tiny", "lr": yaml.safe_load("3e-3")})
    )


@pytest.mark.parametrize(
    "over, said",
    [
        (
            {"trainer": {"max_steps": True}},
            "trainer.max_steps: True is a yes/no value; expected int",
        ),
        ({"num_samples": True}, "num_samples: True is a yes/no value; expected int"),
        ({"timing": {"repeats": False}}, "timing.repeats: False is a yes/no value; expected int"),
        (
            {"trainer": {"max_steps": 10, "val_check_interval": True}},
            "trainer.val_check_interval: True is a yes/no value; expected int or float or null",
        ),
        (
            {"budget": {"hours": True}},
            "budget.hours: True is a yes/no value; expected float or null",
        ),
    ],
)
def test_a_yes_no_value_for_a_number_is_refused_as_model_settings_are(over, said):
    """pydantic's lax mode would read true as 1 (one step, one sample); ``model.K: true`` has been
    refused in these words."""
    assert error_of(base_spec(**over)) == f"x.yaml: {said}"


# ---- a section given one value


@pytest.mark.parametrize(
    "over, said",
    [
        (
            {"fusion": 4},
            "fusion: 4 is neither off nor a mapping; write `fusion: off` or "
            "`fusion: {max_members: 4}`",
        ),
        (
            {"heldout": False},
            "heldout: must be a mapping, not False; write heldout: {enabled: false}",
        ),
        ({"timing": False}, "timing: must be a mapping, not False; write timing: {enabled: false}"),
        (
            {"search": "random"},
            "search: must be a mapping of its keys (e.g. search: {sampler: random}), not "
            "'random'; allowed keys: sampler, seed",
        ),
        # the word goes under the key that takes it
        (
            {"early_terminate": "asha"},
            "early_terminate: must be a mapping of its keys (e.g. early_terminate: {type: asha}), "
            "not 'asha'; allowed keys: grace_period, max_t, promotion, reduction_factor, "
            "tolerance, type",
        ),
        (
            {"wandb": "offline"},
            "wandb: must be a mapping of its keys (e.g. wandb: {mode: offline})",
        ),
        (
            {"stop_when": 3},
            "stop_when: must be a mapping of its keys, not 3; allowed keys: at_least, at_most, "
            "metric, reports",
        ),
        ({"task": 5}, "task: must be a mapping, not 5"),
        (  # one fraction per objective: a single number is the likely mistake
            {"early_terminate": {"type": "pareto", "tolerance": 0.1}},
            "early_terminate.tolerance: must be a mapping, not 0.1 (one fraction per objective, "
            "e.g. early_terminate.tolerance: {decode_seconds: 0.2})",
        ),
    ],
)
def test_a_section_given_one_value_says_it_takes_a_mapping(over, said):
    msg = error_of(base_spec(**over))
    assert msg.startswith(f"x.yaml: {said}"), msg
    assert "instance of" not in msg and "Spec" not in msg


def test_a_set_of_a_whole_section_to_one_value_lists_its_keys():
    msg = error_of(base_spec(), overrides=["trainer=5"])
    assert msg.startswith(
        "x.yaml: --set trainer: must be a mapping of its keys (e.g. trainer: {max_steps: 1000}), "
        "not 5; "
        "allowed keys: accumulate_grad_batches, check_val_every_n_epoch, "
    )
    assert "TrainerSpec" not in msg


# ---- profiles: every one checked when the file loads, its errors naming it


def test_every_profile_is_checked_when_the_file_loads():
    raw = base_spec(profiles={"ok": {"trainer.max_steps": 20}, "fast": {"trainer.max_stepz": 5}})
    said = "x.yaml: profiles.fast: trainer.max_stepz: unknown key (did you mean max_steps?); "
    assert error_of(raw).startswith(said)  # no --profile
    assert error_of(raw, profile="ok").startswith(said)  # another profile
    assert error_of(raw, profile="fast").startswith(said)  # the profile itself
    # a value only a profile's grid brings, caught by the cell checks
    cells = base_spec(profiles={"big": {"grid.model": [{"attention": "memory", "K": 0}]}})
    assert error_of(cells).startswith("x.yaml: profiles.big: grid.model[0].K: 0 is out of range")
    # the smoke profile's own block, applied after the smoke defaults
    smoke = base_spec(profiles={"smoke": {"trainer.val_check_interval": 2.5}})
    assert error_of(smoke).startswith(
        "x.yaml: profiles.smoke: trainer.val_check_interval: 2.5 is above 1.0"
    ), error_of(smoke)


def test_an_error_of_the_file_or_of_a_set_is_not_put_on_a_profile():
    raw = base_spec(profiles={"fast": {"trainer.max_steps": 5}})
    raw["trainer"]["max_stepz"] = 3
    assert error_of(raw, profile="fast").startswith("x.yaml: trainer.max_stepz: unknown key")
    fine = base_spec(profiles={"fast": {"trainer.max_steps": 5}})
    msg = error_of(fine, profile="fast", overrides=["trainer.bogus=1"])
    assert msg.startswith("x.yaml: --set trainer.bogus: unknown key")


def test_a_profiles_warm_start_folder_is_needed_only_when_it_is_used(tmp_path):
    """A profile that continues an earlier run names a folder that run has not written yet."""
    raw = base_spec(profiles={"again": {"warm_start": str(tmp_path / "first" / "t")}})
    assert build_sweep(raw).plans
    assert error_of(raw, profile="again").startswith(
        f"x.yaml: profiles.again: warm_start: {tmp_path / 'first' / 't'} is not an earlier "
        "sweep's output"
    )


# ---- the launcher: an empty --output


@pytest.mark.parametrize("output", ["", "  "])
def test_an_empty_output_folder_is_refused(tmp_path, capsys, output):
    spec = tmp_path / "ok.yaml"
    spec.write_text(yaml.safe_dump(base_spec()))
    with pytest.raises(SystemExit) as info:  # argparse's own exit for a bad argument
        launch_main([str(spec), "--dry-run", "--output", output])
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert (
        f"argument --output: empty folder name {output!r}; give the folder for the results, "
        "e.g. --output sweep-results (the default), or --output . for the current folder"
    ) in err


@pytest.mark.parametrize("output", ["s3://bucket/sweeps", "gs://b/x", "s4://typo/x"])
def test_a_uri_as_output_folder_is_refused_with_storage_path_named(tmp_path, capsys, output):
    """``--output s3://bucket/x`` became a local folder named ``s3:`` (pathlib folds the //)."""
    spec = tmp_path / "ok.yaml"
    spec.write_text(yaml.safe_dump(base_spec()))
    with pytest.raises(SystemExit) as info:
        launch_main([str(spec), "--dry-run", "--output", output])
    err = capsys.readouterr().err
    assert info.value.code == 2 and f"--set storage.path={output}" in err
    assert not (Path.cwd() / output.split("/")[0]).exists()


# ---- early_terminate: the key the rule does not take


def test_a_tolerance_under_asha_names_the_tolerance():
    raw = base_spec(
        early_terminate={"type": "asha", "tolerance": {"val/bleu": 0.1}},
        parameters={"model.lr": {"min": 0.001, "max": 0.01}},
        num_samples=2,
    )
    assert error_of(raw) == (
        "x.yaml: early_terminate.tolerance: type asha does not read a tolerance (the Pareto rung "
        "rule of a multi-objective study does, per objective); remove it"
    )
    pareto = base_spec(early_terminate={"type": "pareto"})
    assert error_of(pareto).startswith("x.yaml: early_terminate.type: pareto ranks trials")


# ---- goals against a metric's direction, bounds no trial can reach


def test_a_goal_against_the_metrics_direction_is_refused():
    """Maximizing a loss picks the worst trials: refused for the sweep's metric and for each
    objective, with the goal to write."""
    msg = error_of(base_spec(metric={"name": "val/loss", "goal": "maximize"}))
    assert msg == (
        "x.yaml: metric: goal maximize for val/loss would pick the worst trials (a lower val/loss "
        "is better); write goal: minimize"
    )
    objectives = [
        {"name": "val/bleu", "goal": "minimize"},
        {"name": "decode_seconds", "goal": "minimize"},
    ]
    raw = base_spec(objectives=objectives)
    raw.pop("metric", None)
    assert "goal minimize for val/bleu would pick the worst trials" in error_of(raw)
    assert build_sweep(base_spec(metric={"name": "val/loss", "goal": "minimize"})).plans
    # without a goal, the metric's own
    assert build_sweep(base_spec(metric={"name": "val/loss"})).spec.metric.goal == "minimize"
    assert build_sweep(base_spec(metric={"name": "val/bleu"})).spec.metric.goal == "maximize"


def test_a_bound_past_what_the_metric_can_reach_is_refused():
    """Token accuracy is a fraction and BLEU at most 100: a stop at 95 accuracy never comes."""
    msg = error_of(base_spec(stop_when={"metric": "val/token_acc", "at_least": 95}))
    assert msg.endswith(
        "no trial would stop: val/token_acc is at most 1, so at least 95 is never met"
    )
    assert "val/loss is at least 0, so at most -1 is never met" in error_of(
        base_spec(stop_when={"metric": "val/loss", "at_most": -1})
    )
    assert build_sweep(base_spec(stop_when={"metric": "val/bleu", "at_least": 99.5})).plans
    assert "at_least: a bound is a finite number, not nan" in error_of(
        base_spec(stop_when={"metric": "val/bleu", "at_least": float("nan")})
    )


def test_a_metric_the_task_never_reports_is_refused_for_selection_and_stopping():
    """val/sacrebleu is a metric of WMT only: a copy-task sweep selecting or stopping on it would
    wait for a figure no trial reports."""
    why = "'val/sacrebleu' is a metric this sweep never produces (val/sacrebleu needs a task"
    msg = error_of(base_spec(metric={"name": "val/sacrebleu"}))
    assert msg.startswith("x.yaml: metric.name: " + why), msg
    msg = error_of(base_spec(stop_when={"metric": "val/sacrebleu", "at_least": 20}))
    assert msg.startswith("x.yaml: stop_when.metric: " + why), msg
    assert "valid: train/loss, val/loss" in msg and "valid: val/sacrebleu" not in msg
    wmt = base_spec(metric={"name": "val/sacrebleu"})
    wmt["task"] = {"name": "wmt17", "pair": "de-en"}
    assert build_sweep(wmt).spec.metric.name == "val/sacrebleu"


def test_wmt_settings_that_leave_a_batch_unsized_or_a_split_unnamed_are_refused_at_the_check():
    """batch_tokens: null without batch_size, or an empty train/valid prefix, passed the sweep
    check and stopped the launch with a bare ValueError traceback when the plan built the data."""

    def wmt(**task):
        raw = base_spec()
        raw["task"] = {"name": "wmt17", "pair": "de-en", **task}
        return raw

    msg = error_of(wmt(batch_tokens=None))
    assert msg.startswith("x.yaml: task.batch_tokens: is null and batch_size is not given"), msg
    assert "give batch_size (sentences a batch)" in msg
    msg = error_of(wmt(valid_prefix=""))
    assert msg.startswith("x.yaml: task.valid_prefix: is empty, so no file is named"), msg
    assert build_sweep(wmt(batch_tokens=None, batch_size=32)).plans  # a size given another way
    searched = wmt(batch_tokens=None)
    searched["parameters"] = {"task.batch_size": {"values": [16, 32]}}
    assert build_sweep(searched).plans  # searched: each sample gives it


# ---- GPU shares a trial cannot use


@pytest.mark.parametrize(
    "gpu, said",
    [
        (True, "resources.gpu: True is a yes/no value"),
        (
            8,
            "resources.gpu: 8 GPUs a trial: a trial (or each of its DDP workers) trains on one GPU",
        ),
        (2.0, "write workers: 2 with gpu: 1"),
        (
            3,
            "for 3 GPUs a trial write workers: 3 with gpu: 1 (a DDP job, one GPU a worker: it "
            "needs 3 GPUs on one node, or on a cluster's nodes together), else gpu: 1",
        ),
        (0.0001, "gpu 0.0001 packs 10000 trials on one GPU; NVIDIA MPS serves at most 48"),
    ],
)
def test_a_gpu_share_no_trial_can_use_is_refused(gpu, said):
    """A trial trains on one GPU (devices=1; a DDP worker on one too): more GPUs would stay held
    and idle; a share below one MPS client's packs more processes than MPS serves."""
    assert said in error_of(base_spec(resources={"gpu": gpu}))


def test_gpu_shares_a_trial_uses_pass():
    for gpu in (0, 1 / 48, 0.125, 0.5, 1, "auto"):
        assert build_sweep(base_spec(resources={"gpu": gpu})).plans


def test_a_list_in_the_base_section_points_to_the_grid():
    raw = base_spec(model={"preset": "tiny", "attention": "memory", "K": [1, 4]})
    raw.pop("grid")
    msg = error_of(raw)
    assert msg.startswith("x.yaml: model.K: ") and msg.endswith(
        "to sweep these values, put them under grid: (grid: {model.K: [1, 4]})"
    )
    raw = {**raw, "model": {"preset": "tiny", "attention": "memory"}, "grid": {"model.K": [1, 4]}}
    assert len(build_sweep(raw).plans) == 2  # what the hint says to write


def test_a_parameter_with_both_choices_and_a_range_is_refused():
    """Which of the two Optuna would draw from was not said anywhere: the choices won."""
    both = {"model.lr": {"values": [0.001], "min": 0.1, "max": 0.2}}
    msg = error_of(base_spec(parameters=both, num_samples=2))
    assert msg == (
        "x.yaml: parameters.model.lr: give either `values: [...]` (the choices) or `min` and "
        "`max` (a range), not both"
    )


def test_asha_rungs_that_can_never_stop_a_trial_are_said():
    """A grace_period above max_t was cut to max_t without a word; one at or past a trial's last
    report stops nothing, and the dry run said the trials were compared."""
    searched = dict(parameters={"model.lr": {"min": 0.001, "max": 0.01}}, num_samples=4)
    trainer = {"max_steps": 30, "val_check_interval": 10}  # 3 reports a trial
    late = {"type": "asha", "grace_period": 10, "max_t": 2}
    assert error_of(base_spec(**searched, trainer=trainer, early_terminate=late)) == (
        "x.yaml: early_terminate: grace_period 10 is above max_t 2: the first rung would come "
        "after the rungs end; give a grace_period up to max_t"
    )
    for grace, stops in ((3, False), (2, True)):
        et = {"type": "asha", "grace_period": grace}
        note = build_sweep(base_spec(**searched, trainer=trainer, early_terminate=et))
        note = note.early_stopping_note()
        assert ("there is nothing to stop" not in note) == stops, note


def test_early_stopping_settings_without_a_rule_are_said_to_be_unused():
    """``{type: none, grace_period: 3}`` ran every trial to the end without a word about the
    grace period the user meant to apply."""
    et = {"type": "none", "grace_period": 3, "reduction_factor": 4}
    note = build_sweep(base_spec(early_terminate=et)).early_stopping_note()
    assert note == (
        "early_terminate none: grace_period 3, reduction_factor 4.0 not used, no trial is stopped "
        "early (set early_terminate.type asha or pareto to use it, or remove it)"
    )
    assert build_sweep(base_spec(early_terminate={"type": "none"})).early_stopping_note() is None
    # the smoke defaults set a first rung for every sweep: not a user's setting to warn about
    smoke = load_spec(Path("sweeps/quickstart.yaml"), profile="smoke")
    assert smoke.spec.early_terminate.type == "none" and smoke.early_stopping_note() is None
    given = load_spec(
        Path("sweeps/quickstart.yaml"), ["early_terminate.grace_period=2"], profile="smoke"
    )
    assert given.early_stopping_note().startswith("early_terminate none: grace_period 2 not used")


def test_a_misspelt_key_gets_the_nearest_name_in_every_section():
    """Only task settings said "did you mean"; the sections and model settings listed their keys."""
    raw = base_spec(trainer={"max_step": 10})
    assert "trainer.max_step: unknown key (did you mean max_steps?); allowed here: " in error_of(
        raw
    )
    raw = base_spec(model={"preset": "tiny", "lrr": 0.1})
    assert "model.lrr: not a model setting nor an option of attention" in error_of(raw)
    assert "(did you mean lr?)" in error_of(raw)
    raw = base_spec(nme="x")
    assert error_of(raw).startswith("x.yaml: nme: unknown key (did you mean name?)")


@pytest.mark.parametrize(
    "setting, got",
    [("trainer.max_steps=abc", "(got 'abc')"), ("trainer.max_steps=", "(got nothing)"),
     ("budget.hours=abc", "(got 'abc')")],
)  # fmt: skip
def test_a_value_of_the_wrong_type_is_quoted_in_its_error(tmp_path, capsys, setting, got):
    """`--set model.lr=abc` quoted the value, `--set trainer.max_steps=abc` did not: the error of
    a value that is not the key's type says what was given."""
    spec = tmp_path / "ok.yaml"
    spec.write_text(yaml.safe_dump(base_spec()))
    assert launch_main([str(spec), "--dry-run", "--set", setting]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"error: {spec}: --set {setting.split('=')[0]}: Input should be a valid")
    assert err.endswith(got)


@pytest.mark.parametrize("before", [False, True])
def test_a_set_value_the_shell_cut_at_a_space_says_to_quote_it(capsys, before):
    """`--set grid.task.max_length=[4, 8]` unquoted reached the launcher as two arguments: argparse
    said only "unrecognized arguments: 8]" (or took "8]" for the sweep file)."""
    spec = "sweeps/quickstart.yaml"
    cut = ["--set", "grid.task.max_length=[4,", "8]"]
    with pytest.raises(SystemExit) as info:
        launch_main([*cut, spec, "--dry-run"] if before else [spec, "--dry-run", *cut])
    assert info.value.code == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith(
            "--set grid.task.max_length=[4, was cut at a space by the shell (8] came as another "
            "argument): quote the whole value, --set 'grid.task.max_length=[4, 8]'"
        )
    )


def test_a_bad_set_value_is_named_as_the_set_it_came_from():
    """The file was named as if it held the bad value the command line gave."""
    assert error_of(base_spec(), overrides=["trainer.max_steps=abc"]) == (
        "x.yaml: --set trainer.max_steps: Input should be a valid integer, unable to parse string "
        "as an integer (got 'abc')"
    )
    assert error_of(base_spec(wandb={"project": "p"}), overrides=["wandb.project="]) == (
        "x.yaml: --set wandb.project: must be text, not null (nothing after '=': YAML reads that "
        "as null)"
    )


def test_a_constraint_no_trial_can_meet_is_refused():
    """A constraint is refused where it keeps every trial out (BLEU at most -5, a decode time at
    most -1 s, as a loss at most -1 is) or bounds nothing (NaN: every comparison is false, so every
    trial counted as feasible)."""
    objectives = [
        {"name": "val/bleu", "goal": "maximize"},
        {"name": "decode_seconds", "goal": "minimize"},
    ]

    lr = {"model.lr": {"min": 1e-4, "max": 1e-2, "distribution": "log_uniform_values"}}

    def study(constraint):
        raw = base_spec(objectives=objectives, constraints=[constraint], parameters=lr)
        raw.pop("metric", None)
        return raw

    for constraint, said in [
        ({"name": "val/bleu", "max": -5}, "val/bleu is at least 0, so at most -5 is never met"),
        ({"name": "val/bleu", "min": 101}, "val/bleu is at most 100, so at least 101 is never met"),
        (
            {"name": "decode_seconds", "max": -1},
            "decode_seconds is at least 0, so at most -1 is never met",
        ),
        ({"name": "val/loss", "max": -1}, "val/loss is at least 0, so at most -1 is never met"),
        ({"name": "val/bleu", "min": float("nan")}, "min: a bound is a finite number, not nan"),
        ({"name": "val/loss", "max": float("inf")}, "max: a bound is a finite number, not inf"),
    ]:
        msg = error_of(study(constraint))
        assert said in msg and len(msg.splitlines()) == 1, (constraint, msg)
    assert build_sweep(study({"name": "val/bleu", "min": 10})).spec.constraints[0].min == 10


def test_a_set_reaches_an_item_of_a_list_by_its_number():
    """``--set objectives.1.goal=...`` was refused ("'objectives' is not a mapping"), though the
    dry run's own errors name list items that way (``constraints.0.min``)."""
    objectives = [
        {"name": "val/bleu", "goal": "maximize"},
        {"name": "decode_seconds", "goal": "minimize"},
    ]
    lr = {"model.lr": {"min": 1e-4, "max": 1e-2, "distribution": "log_uniform_values"}}
    raw = base_spec(
        objectives=objectives, parameters=lr, constraints=[{"name": "val/bleu", "min": 10}]
    )
    raw.pop("metric", None)
    sweep = build_sweep(raw, overrides=["constraints.0.min=20", "objectives.1.name=val/loss"])
    assert sweep.spec.constraints[0].min == 20
    assert [o.name for o in sweep.spec.objectives] == ["val/bleu", "val/loss"]
    assert error_of(raw, overrides=["objectives.2.goal=minimize"]) == (
        "x.yaml: --set objectives.2.goal: objectives is a list of 2 item(s) (numbered 0 to 1), "
        "cannot set objectives.2.goal"
    )


def test_a_set_that_fails_only_beside_a_profile_is_said_as_the_sets():
    """A --set grid that the profile's settings make wrong was said as "profiles.short: ...",
    though the profile alone builds; it is the --set's, under that profile."""
    raw = base_spec(profiles={"short": {"model.hidden_size": 32}})
    raw["model"] = {"preset": "tiny"}
    student = {"attention": "memory", "K": 4, "distill_weight": 1, "hidden_size": 64}
    student["teacher"] = {"cell": {"attention": "bahdanau"}}
    grid = (
        "grid.model="
        + yaml.safe_dump([{"attention": "bahdanau"}, student], default_flow_style=True).strip()
    )
    assert build_sweep(raw, source="x.yaml", overrides=[grid]).plans  # without the profile
    assert build_sweep(raw, source="x.yaml", profile="short").plans  # the profile alone
    msg = error_of(raw, overrides=[grid], profile="short")
    assert msg.startswith("x.yaml: --set grid.model (with --profile short): grid.model[1]: "), msg


def test_a_range_is_integer_only_where_the_file_writes_integers(tmp_path, capsys):
    """{min: 0.0, max: 1.0} was taken for whole numbers and drew only 0 and 1 (a weight decay of
    1 learns nothing); an explicit int_uniform of 0.5 to 10.5 drew 0, below its range. The dry run
    names each parameter's distribution."""
    from sweeps.spec.search_schema import ParamSpec

    assert ParamSpec(min=0.0, max=1.0).resolved_distribution() == "uniform"
    assert ParamSpec(min=16, max=64).resolved_distribution() == "int_uniform"
    assert yaml.safe_load("{min: 0.0, max: 1.0}") == {"min": 0.0, "max": 1.0}  # floats in YAML
    with pytest.raises(ValueError, match="int_uniform needs whole numbers for min and max"):
        ParamSpec(min=0.5, max=10.5, distribution="int_uniform").resolved_distribution()
    spec = base_spec(
        parameters={
            "model.weight_decay": {"min": 0.0, "max": 1.0},
            "model.hidden_size": {"min": 16, "max": 64},
        }
    )
    path = tmp_path / "x.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert launch_main([str(path), "--dry-run", "--output", str(tmp_path / "o")]) == 0
    said = capsys.readouterr().out
    assert "over model.hidden_size (int_uniform), model.weight_decay (uniform)" in said


def test_a_setting_of_seeds_in_their_list_form_says_to_write_the_mapping_form():
    msg = error_of(base_spec(seeds=[0, 1]), overrides=["seeds.per_configuration=true"])
    assert msg.endswith(
        "cannot set seeds.per_configuration; write seeds in their mapping form, "
        "--set 'seeds={values: [0, 1], per_configuration: true}'"
    ), msg


def test_lcb_without_seeds_to_pool_is_refused():
    """``objective: lcb`` without per_configuration was dropped (each (cell, seed) its own study,
    chosen by the mean), and over one seed the dry run said "told the lcb" of a single value."""
    searched = dict(parameters={"model.lr": {"min": 1e-3, "max": 1e-2}}, num_samples=2)
    msg = error_of(base_spec(seeds={"values": [0, 1], "objective": "lcb"}, **searched))
    assert "seeds.objective: lcb is what Optuna is told" in msg and "per_configuration: true" in msg
    one = {"values": [0], "per_configuration": True, "objective": "lcb"}
    assert "lcb over one seed has no interval" in error_of(base_spec(seeds=one, **searched))
    pooled = {"values": [0, 1], "per_configuration": True, "objective": "lcb"}
    assert build_sweep(base_spec(seeds=pooled, **searched), source="x.yaml").plans


def test_a_setting_of_seeds_values_in_their_list_form_suggests_a_valid_mapping():
    """The hint for --set seeds.values=[1] was --set 'seeds={values: [0], values: ...}', a key
    given twice; it is the mapping with the given values."""
    msg = error_of(base_spec(seeds=[0]), overrides=["seeds.values=[1]"])
    assert msg.endswith("write seeds in their mapping form, --set 'seeds={values: [1]}'"), msg


def test_configurations_with_no_rung_to_compare_at_say_so_and_fuse():
    """Configurations judged over seeds whose first rung is at or past a trial's last report: the
    dry run promised comparisons "at each rung" that never come, and left their seeds unfused (the
    rungs pause them) for early stopping that cannot happen."""
    from sweeps.plan.fusion import sweep_off

    raw = base_spec(
        parameters={"model.lr": {"min": 1e-3, "max": 1e-2}},
        num_samples=2,
        seeds={"values": [0, 1], "per_configuration": True},
        early_terminate={"type": "asha", "grace_period": 2},
        trainer={"max_steps": 20, "val_check_interval": 10},  # 2 reports: no rung below 2
    )
    sweep = build_sweep(raw, source="x.yaml")
    assert "no rung to compare configurations at" in sweep.early_stopping_note()
    assert sweep_off(sweep, 4) is None
    sweep = build_sweep({**raw, "early_terminate": {"type": "asha", "grace_period": 1}})
    assert "at each rung" in sweep.early_stopping_note()
    assert "pauses a configuration's seeds" in sweep_off(sweep, 4)
