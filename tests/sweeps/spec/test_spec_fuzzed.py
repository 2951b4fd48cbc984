"""Bad input a fuzzing pass found accepted, answered with a traceback or with a misleading line:
a WMT pair the datamodule refuses, a --set into a profile, a constraint's min above its max, a key
both a grid axis and a searched parameter, an infinite float, a misspelt path placeholder, YAML
that does not parse (a --set value, a sweep file), a key given twice in a --set value, an option
the relative constraints' baseline does not take, a --set key said as the file's, a list item's
path, a key YAML reads as false. Each is one line naming the key and the fix. No Ray."""

from __future__ import annotations

import pytest
from sweep_helpers import base_spec, spec_error

from sweeps.launch import main as launch_main
from sweeps.spec import SpecError, load_spec

error_of = spec_error


def _load_error(path: str, *overrides: str) -> str:
    with pytest.raises(SpecError) as info:
        load_spec(path, overrides=list(overrides))
    message = str(info.value)
    assert "\n" not in message, message
    return message


@pytest.mark.parametrize(
    "override, said",
    [
        (
            "grid.task.pair=[EN-DE]",
            "--set grid.task.pair: pair must be lower case, as the files' language suffixes are: "
            "pair='en-de', not 'EN-DE'",
        ),
        (
            "grid.task.pair=[en_de]",
            "--set grid.task.pair: pair must look like 'en-de' (source-target), got 'en_de'",
        ),
        (
            "grid.task.pair=[en-en]",
            "--set grid.task.pair: pair must look like 'en-de' (source-target), got 'en-en'",
        ),
    ],
)
def test_a_wmt_pair_the_datamodule_refuses_is_refused_at_its_key(override, said):
    """The spec check passed the pair and the datamodule's check_pair raised a ValueError
    (a traceback, exit 1) while the plan was built."""
    assert _load_error("sweeps/wmt17.yaml", override) == f"sweeps/wmt17.yaml: {said}"


def test_a_set_into_a_profile_is_refused_with_the_form_that_works():
    """--set profiles.cpu.trainer.max_steps=-5 --profile cpu was neither applied nor checked:
    the profile is applied before the --set overrides."""
    raw = base_spec(profiles={"cpu": {"trainer.max_steps": 5}})
    msg = error_of(raw, overrides=["profiles.cpu.trainer.max_steps=-5"], profile="cpu")
    assert msg == (
        "x.yaml: --set profiles.cpu.trainer.max_steps: --set applies after the chosen profile, "
        "so a profile's setting set here would never be used; write --profile cpu --set "
        "'trainer.max_steps=-5'"
    )
    msg = error_of(base_spec(), overrides=["profiles.smoke.trainer.max_step=5"], profile="smoke")
    assert msg.endswith("write --smoke --set 'trainer.max_step=5'"), msg


def test_two_profiles_are_refused_where_the_last_one_was_used_without_a_word(capsys):
    k_vs_length = "sweeps/k_vs_length.yaml"
    with pytest.raises(SystemExit) as done:
        launch_main([k_vs_length, "--dry-run", "--profile", "cpu", "--profile", "gpu"])
    assert done.value.code == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith(
            "error: --profile cpu and --profile gpu: one profile a launch; pick one, and give the "
            "other's settings you want with --set KEY=VALUE"
        )
    )
    # the same one twice is that one
    assert launch_main([k_vs_length, "--dry-run", "--profile", "cpu", "--profile", "cpu"]) == 0
    assert "profile cpu sets:" in capsys.readouterr().out


def test_a_constraint_with_min_above_max_is_refused():
    """{name: val/bleu, min: 50, max: 40} was accepted: no trial could ever count."""
    msg = _load_error("sweeps/minimal_k.yaml", "constraints=[{name: val/bleu, min: 50, max: 40}]")
    assert msg == (
        "sweeps/minimal_k.yaml: --set constraints: constraints[0]: no trial could count: min 50 "
        "is above max 40; swap them (min: 40, max: 50)"
    )


def test_a_key_both_a_grid_axis_and_a_parameter_is_refused_naming_both():
    """The sample replaced the cell's value, so the cells' labels named lengths their trials
    never trained with."""
    raw = base_spec(parameters={"task.max_length": {"values": [4, 6]}})
    raw["grid"]["task.max_length"] = [3, 5]
    assert error_of(raw) == (
        "x.yaml: parameters.task.max_length: the grid sets task.max_length too "
        "(grid.task.max_length), so the sampled value would replace the cell's and its label "
        "would be wrong; keep it in one place: remove it from parameters: or from grid:"
    )


@pytest.mark.parametrize(
    "override, said",
    [
        ("model.lr=.inf", "--set model.lr: inf is out of range; allowed: > 0, a finite number"),
        (
            "trainer.gradient_clip_val=.inf",
            "--set trainer.gradient_clip_val: inf is not a finite number; give a number, not "
            ".inf or .nan",
        ),
        (  # was a traceback (OverflowError)
            "trainer.limit_val_batches=.inf",
            "--set trainer.limit_val_batches: inf is not a finite number; give a number, not "
            ".inf or .nan",
        ),
    ],
)
def test_an_infinite_float_is_refused_where_its_range_is_finite(override, said):
    """nan was refused, .inf accepted (model.lr, gradient_clip_val) or a traceback."""
    assert error_of(base_spec(), overrides=[override]) == f"x.yaml: {said}"


def test_an_unknown_placeholder_in_a_wmt_path_is_refused():
    """data/wmt17/{pari} was kept literally as the folder's name."""
    msg = _load_error(
        "sweeps/wmt17.yaml", "task.data_dir=data/wmt17/{pari}", "grid.task.pair=[en-de]"
    )
    assert msg == (
        "sweeps/wmt17.yaml: --set task.data_dir: unknown placeholder {pari} (did you mean "
        "{pair}?); a path here takes {pair} (filled in from task.pair)"
    )


def test_a_pair_placeholder_with_no_pair_set_is_refused(tmp_path):
    """With no task.pair and no grid.task.pair, {pair} stayed literal in the planned paths."""
    text = open("sweeps/wmt17.yaml", encoding="utf-8").read()
    text = text.replace("  task.pair: [en-cs, en-de, en-fi, en-tr]\n", "")
    text = text.replace("    grid.task.pair: [en-de]", "    task.pair: en-de")
    path = tmp_path / "w.yaml"
    path.write_text(text)
    assert _load_error(str(path)) == (
        f"{path}: task.data_dir: {{pair}} is not filled in: it comes from task.pair, which this "
        f"sweep does not set; set it (--set task.pair=...) or give a grid axis grid.task.pair"
    )
    sweep = load_spec(path, overrides=["task.pair=en-fi"])
    assert sweep.plans[0].task["data_dir"].endswith("data/wmt17/en-fi")


def test_a_set_value_that_is_not_yaml_says_the_problem_and_its_column():
    """Every unparsable value got the same fix, quote it for the shell, whatever was wrong."""
    msg = error_of(base_spec(), overrides=["resources={cpu: 1, gpu: 2"])
    assert msg == (
        "x.yaml: --set resources: cannot parse the value '{cpu: 1, gpu: 2' as YAML: expected "
        "',' or '}', but got '<stream end>' at column 16 (while parsing a flow mapping that "
        "starts at column 1)"
    )
    msg = error_of(base_spec(), overrides=["grid.model=[{attention:"])
    assert msg.endswith('quote it, e.g. --set "grid.model=[1, 2]"'), msg


def test_a_key_given_twice_in_a_set_value_is_refused():
    """--set 'seeds={values: [0], values: [1]}' kept the last, as the file does not."""
    assert error_of(base_spec(), overrides=["seeds={values: [0], values: [1]}"]) == (
        "x.yaml: --set seeds: '{values: [0], values: [1]}': values is given twice in one "
        "mapping; keep one"
    )


def test_a_yaml_syntax_error_in_the_file_is_one_line(tmp_path, capsys):
    """PyYAML's context, 4 to 8 lines quoting the file under carets, was printed as it is."""
    path = tmp_path / "syn.yaml"
    path.write_text("name: x\ntask: {name: copy\n")
    assert launch_main([str(path), "--dry-run", "--output", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"error: {path}: not valid YAML: expected ',' or '}}', but got '<stream end>' at line 3, "
        f"column 1 (while parsing a flow mapping that starts at line 2, column 7); correct the file"
    )


def test_an_option_the_baseline_does_not_take_says_it_is_the_baseline():
    """--set model.K=4 said "not a model setting nor an option of attention 'bahdanau'", an
    attention the sweep's cells never name: it is the relative constraints' baseline."""
    msg = _load_error("sweeps/minimal_k.yaml", "model.K=4")
    assert msg == (
        "sweeps/minimal_k.yaml: --set model.K: not an option of attention 'bahdanau', the "
        "baseline model of the relative constraints (constraints[1].of.attention), which trains "
        "with the sweep's fixed model settings too; give K to the searched models only: through "
        "parameters: (--set 'parameters.model.K={values: [4]}') or a grid.model variant"
    )


@pytest.mark.parametrize(
    "override, said",
    [
        ("model.lrr=0.1", "--set model.lrr: not a model setting"),
        (
            "trainr.max_steps=5",
            "--set trainr.max_steps: trainr: unknown key (did you mean trainer?)",
        ),
    ],
)
def test_an_error_at_a_set_key_is_said_as_the_sets(override, said):
    """It was said as though in the file ("x.yaml: model.lrr: ...")."""
    msg = error_of(base_spec(), overrides=[override])
    assert msg.startswith(f"x.yaml: {said}"), msg


@pytest.mark.parametrize(
    "override, said",
    [
        ("trainer.lr=0.1", "--set trainer.lr: unknown key (it belongs elsewhere: model.lr)"),
        ("max_steps=5", "--set max_steps: unknown key (it belongs elsewhere: trainer.max_steps)"),
        ("task.K=4", "--set task.K: unknown copy task setting (it belongs elsewhere: model.K)"),
        (
            "model.batch_size=8",
            "--set model.batch_size: not a model setting nor an option of attention 'none' "
            "(it belongs elsewhere: task.batch_size)",
        ),
        (  # it said "did you mean sampler?"
            "search.num_samples=4",
            "--set search.num_samples: unknown key (it belongs elsewhere: num_samples (top level))",
        ),
        (
            "resources.max_concurrent_trials=2",
            "unknown key (it belongs elsewhere: max_concurrent_trials (top level))",
        ),
        # a typo of this section's own key keeps its nearest spelling
        ("trainer.max_step=5", "--set trainer.max_step: unknown key (did you mean max_steps?)"),
    ],
)
def test_a_key_in_the_wrong_section_names_the_section_that_takes_it(override, said):
    """Keys in the wrong section got no hint of where they belong, or a wrong one."""
    assert said in _load_error("sweeps/quickstart.yaml", override)


def test_a_word_outside_a_settings_choices_lists_them_without_pydantics_words():
    """It said "Input should be 'files' or 'hf' (got 'x'; expected Literal)"."""
    said = _load_error("sweeps/wmt17.yaml", "task.source=x")
    assert said.endswith("--set task.source: 'x' is not a choice of this setting; give one of "
                         "'files', 'hf'"), said  # fmt: skip
    assert "Literal" not in said and "Input should" not in said


def test_text_and_teacher_settings_say_what_they_take_and_what_they_got(tmp_path):
    """``name: 5`` said "Input should be a valid string" without the value; ``teacher: 5`` "a
    valid dictionary or instance of TeacherSpec", a class the file never names."""
    assert error_of(base_spec(name=5)) == "x.yaml: name: must be text, not 5"
    raw = base_spec(grid={"model": [{"attention": "memory", "teacher": 5}]})
    assert error_of(raw) == (
        "x.yaml: grid.model[0].teacher: must be a mapping, not 5 (e.g. teacher: {cell: "
        "{attention: bahdanau}})"
    )


def test_a_list_item_is_written_one_way_and_set_either_way():
    """Pydantic's paths said ``objectives.0.goal`` where the project's own said
    ``objectives[0].name``, and ``--set objectives[1].goal=...`` (a path copied from a message)
    was an unknown key."""
    k = "sweeps/minimal_k.yaml"
    assert _load_error(k, "objectives=[{name: val/bleu, goal: up}]") == (
        f"{k}: --set objectives: objectives[0].goal: Input should be 'maximize' or 'minimize' "
        "(got 'up')"
    )
    for key in ("objectives[1].goal", "objectives.1.goal"):
        assert _load_error(k, f"{key}=up") == (
            f"{k}: --set objectives.1.goal: Input should be 'maximize' or 'minimize' (got 'up')"
        )
    sweep = load_spec(k, overrides=["constraints[0].min=20", "objectives[1].name=val/loss"])
    assert sweep.spec.constraints[0].min == 20 and sweep.spec.objectives[1].name == "val/loss"
    raw = base_spec(grid={"model": [{"attention": "memory", "K": [2]}, {"attention": "none"}]})
    assert error_of(raw, overrides=["grid.model[0].K=[0]"]).startswith(
        "x.yaml: --set grid.model.0.K: grid.model[0].K: 0 is out of range"
    )


def test_a_key_yaml_reads_as_true_or_false_is_told_to_be_quoted():
    """``{off: ...}`` (a slip for ``of``) said "constraints.0.0: Keys should be strings": YAML
    reads an unquoted off as false, which pydantic numbers 0."""
    with pytest.raises(SpecError) as info:
        load_spec("sweeps/minimal_k.yaml", overrides=["constraints=[{off: val/bleu, max: 1}]"])
    assert (
        "constraints[0]: a key here reads as false (YAML takes an unquoted yes, no, on or off "
        "for true or false): quote it, e.g. 'off'"
    ) in str(info.value).splitlines()[-1]
    with pytest.raises(SpecError) as info:
        load_spec("sweeps/minimal_k.yaml", overrides=["constraints=[{name: val/bleu, of: x}]"])
    assert "constraints[0].of: must be a mapping, not 'x' (the settings of the baseline" in str(
        info.value
    )
