"""The sweep file: validation messages, grid expansion, the shipped studies. No Ray needed."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from sweep_helpers import base_spec

from sweeps.launch import main as launch_main
from sweeps.spec import SpecError, build_sweep, expand_grid, load_spec
from sweeps.spec.load import profile_line

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = sorted((ROOT / "sweeps").glob("*.yaml"))


def error_of_profile(raw, profile: str) -> str:
    with pytest.raises(SpecError) as info:
        build_sweep(raw, source="x.yaml", profile=profile)
    return str(info.value)


def error_of(raw) -> str:
    with pytest.raises(SpecError) as info:
        build_sweep(raw, source="x.yaml")
    return str(info.value)


def test_grid_variants_concatenate_and_axes_cross():
    cells = expand_grid(
        {
            "task.max_length": [10, 50],
            "model": [
                {"attention": "none"},
                {"attention": "memory", "K": [1, 4, 16]},
                {"attention": "bahdanau"},
            ],
        },
        "x",
    )
    assert len(cells) == 2 * (1 + 3 + 1)
    names = [c.name for c in cells]
    assert "length=10 attention=memory K=16" in names
    assert "length=50 attention=none" in names
    # no meaningless combinations: K only appears with memory attention
    assert not any("K=" in n and "memory" not in n for n in names)


@pytest.mark.parametrize("variants", [[3], [{"attention": "none"}, "memory"]])
def test_a_section_variant_that_is_not_a_mapping_is_named_with_the_two_forms(variants):
    with pytest.raises(SpecError) as info:
        expand_grid({"model": variants}, "x.yaml")
    bad = len(variants) - 1
    assert str(info.value) == (
        f"x.yaml: grid.model[{bad}]: a variant is a mapping of model settings (e.g. {{attention: "
        f"memory, K: 4}}), not {variants[bad]!r}; an axis over one setting is written "
        "grid.model.<setting>: [values]"
    )


def test_a_variant_number_past_the_list_is_named_with_the_numbers_it_has():
    with pytest.raises(SpecError) as info:
        expand_grid(
            {"model": [{"attention": "none"}, {"attention": "memory"}], "model.-1.K": [3]}, "x"
        )
    assert str(info.value) == (
        "x: grid.model.-1.K: grid.model is a list of 2 variant(s), numbered 0 to 1: -1 names none "
        "of them"
    )


def dry_run(path, capsys) -> str:
    """The launcher's ``--dry-run`` in this process (the command line itself is run as a process by
    test_cli_reports_bad_spec_without_traceback): what it printed."""
    capsys.readouterr()
    code = launch_main([str(path), "--dry-run"])
    said = capsys.readouterr()
    assert code == 0, said.err
    return said.out


def test_k_vs_length_dry_run_lists_the_28_cells_of_table_1_over_3_seeds(capsys):
    said = dry_run(ROOT / "sweeps" / "k_vs_length.yaml", capsys)
    rows = [
        line
        for line in said.splitlines()
        if line.split() and line.split()[0].isdigit() and " cells x " not in line
    ]
    assert len(rows) == 84  # 28 cells x 3 seeds
    assert "28 cells x 3 seed(s) = 84 grid points, 84 trials" in said
    # planned for GPUs (resources.gpu auto): memory attention's K joins at each length, and each
    # baseline's lengths join: 6 fused groups; by the measured costs the arrangement trains the
    # trials alone, graphed, 8 to a GPU (the table holds no graphed fused step yet), and says so
    assert "its 6 fused group(s) are planned" in said
    assert "GPU arrangement, the plan's (resources.gpu auto): 84 trial(s) alone, 8 to a GPU" in said
    assert "instead: the fused groups as planned would give" in said
    for length in (20, 50, 100, 200):  # Table 1's lengths (the paper's text says 10)
        for model in (
            "attention=none",
            "attention=bahdanau",
            *(f"attention=memory K={k}" for k in (1, 4, 16, 32, 64)),
        ):
            assert any(f"length={length} {model}" in r for r in rows), (length, model)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
@pytest.mark.parametrize("smoke", [False, True], ids=["full", "smoke"])
def test_shipped_studies_validate(path, smoke):
    sweep = load_spec(path, profile="smoke" if smoke else None)
    assert sweep.plans
    if smoke:
        assert all(p.model.get("preset") == "tiny" for p in sweep.plans)
        full = load_spec(path)
        if path.name != "wmt17.yaml":  # the bundled WMT sample is en-de only
            assert len(sweep.cells) == len(full.cells), "--smoke must keep the grid's shape"


def test_every_named_profile_of_every_shipped_study_validates():
    checked = 0
    for path in SHIPPED:
        for name in yaml.safe_load(path.read_text()).get("profiles") or {}:
            assert load_spec(path, profile=name).plans, (path.name, name)
            checked += 1
    assert checked >= 2  # k_vs_length's and scoring_functions' cpu profiles at least


def test_k_vs_length_cpu_profile_is_table_1_scaled_down():
    sweep = load_spec(ROOT / "sweeps" / "k_vs_length.yaml", profile="cpu")
    lengths = sorted({p.task["max_length"] for p in sweep.plans})
    ks = sorted({p.model["K"] for p in sweep.plans if p.model.get("attention") == "memory"})
    attentions = {p.model.get("attention") for p in sweep.plans}
    assert (lengths, ks, attentions) == (
        [10, 20, 40],
        [1, 4, 16, 32],
        {"none", "memory", "bahdanau"},
    )
    assert {p.model["val_beam_size"] for p in sweep.plans} == {10}  # the paper's beam, kept
    assert len(sweep.cells) == 18 and sorted({p.seed for p in sweep.plans}) == [
        0,
        1,
        2,
    ]  # 3 seeds
    assert len(sweep.plans) == 18 * 3
    # random batches: length-bucketed ones learn the copy task slower (the profile's comment has the figures)
    assert not any(p.task.get("bucket_batches") for p in sweep.plans)


@pytest.mark.parametrize(
    "mutate, expected",
    [
        (
            lambda s: s.update(shedule={"type": "asha"}),
            ["shedule", "unknown key", "early_terminate"],
        ),
        (
            lambda s: s["trainer"].update(max_step=5),
            ["trainer.max_step", "unknown key", "max_steps"],
        ),
        (
            lambda s: s["trainer"].update(max_steps=0),
            ["trainer.max_steps", "0 is out of range; allowed: >= 1"],
        ),
        # the sweep's own sections say a range as the constructor settings do (pydantic's "Input
        # should be greater than 0"), and an empty list the other way to ask for nothing
        (
            lambda s: s.update(budget={"hours": -1}),
            ["budget.hours: -1 is out of range; allowed: > 0"],
        ),
        (
            lambda s: s.update(timing={"measure": []}),
            ["timing.measure: an empty list; give at least 1 item(s) (or timing.enabled: false"],
        ),
        (
            lambda s: s.update(metric={"name": "val/bleu", "goal": "up"}),
            ["metric.goal", "maximize", "minimize"],
        ),
        # a metric no trial reports would pass Ray and fail at the end of the sweep
        (
            lambda s: s.update(metric={"name": "val/blue"}),
            ["metric.name", "'val/blue' is not a metric", "val/sacrebleu"],
        ),
        (
            lambda s: s.update(metric={"name": "decode_seconds", "goal": "minimize"}),
            ["metric.name", "timing stage"],
        ),
        (lambda s: s["task"].update(name="mnist"), ["task.name", "copy", "wmt17"]),
        # CONTRIBUTING's recipe for a new key, done once: wandb.notes is checked like any key
        (lambda s: s.update(wandb={"notes": [1]}), ["wandb.notes", "must be text, not [1]"]),
        (
            lambda s: s["task"].update(max_lenght=7),
            ["task.max_lenght", "unknown copy task setting", "max_length"],
        ),
        # WMT's old spelling of a task's length (one name now: max_length) is answered with the new one
        (
            lambda s: s.update(task={"name": "wmt17", "max_len": 50}),
            ["task.max_len", "unknown wmt17 task setting (did you mean max_length?)"],
        ),
        (
            lambda s: s["grid"].update({"task.max_len": [5]}),
            ["grid.task.max_len", "(did you mean max_length?)"],
        ),
        (lambda s: s["task"].update(train_size="many"), ["task.train_size", "int"]),
        (lambda s: s["model"].update(hiden_size=7), ["model.hiden_size", "hidden_size"]),
        (lambda s: s["model"].update(preset="huge"), ["model.preset", "paper_copy"]),
        (lambda s: s["model"].update(src_vocab_size=9), ["model.src_vocab_size", "derived"]),
        (
            lambda s: s["grid"]["model"].append({"attention": "bahdanau", "K": [8]}),
            ["grid.model[2].K", "bahdanau"],
        ),
        (
            lambda s: s["grid"]["model"].append({"attention": "fancy"}),
            ["grid.model[2].attention", "unknown attention", "memory"],
        ),
        (lambda s: s["grid"].update({"model.lr": 0.1}), ["grid.model.lr", "non-empty list"]),
        (lambda s: s["grid"].update({"lr": [0.1]}), ["grid.lr", "dotted"]),
        (
            lambda s: s["grid"]["model"][1].update(encoder_scoring=["softmax", "tanh"]),
            ["grid.model[1].encoder_scoring"],
        ),
        (
            lambda s: s.update(parameters={"model.lr": {"min": 0.1, "max": 0.01}}),
            ["parameters.model.lr", "below max"],
        ),
        (
            lambda s: s.update(parameters={"model.lr": {"min": 0.1}}),
            ["parameters.model.lr", "min", "max"],
        ),
        (
            lambda s: s.update(resources={"gpu": 1.5}),
            ["resources.gpu", "trains on one GPU", "workers: 2"],
        ),
        (lambda s: s.update(name="my sweep"), ["name", "letters"]),
        # tiny is bidirectional: memory D = 2H, so q^T s_j has mismatched sizes (unidirectional works)
        (
            lambda s: s["grid"]["model"].append({"attention": "luong_dot"}),
            ["grid.model[2]", "luong_dot", "bidirectional"],
        ),
    ],
)
def test_bad_specs_name_the_key_and_what_is_allowed(mutate, expected):
    raw = base_spec()
    mutate(raw)
    msg = error_of(raw)
    assert msg.startswith("x.yaml: ")
    for part in expected:
        assert part in msg, f"{part!r} not in {msg!r}"


@pytest.mark.parametrize("value", ["atuo", "one"])
def test_a_word_for_resources_gpu_is_one_line_naming_both_choices(value):
    """Neither a number nor auto: one line, not one per arm of the field's union (pydantic names
    them ``resources.gpu.float`` and ``resources.gpu.literal['auto']``)."""
    raw = base_spec()
    raw["resources"] = {"gpu": value}
    msg = error_of(raw)
    assert msg == (
        f"x.yaml: resources.gpu: the GPUs each trial holds: a number (0, 0.5, 1) or auto "
        f"(got {value!r})"
    )


@pytest.mark.parametrize("value", [3, "abc"])
def test_seeds_that_are_neither_a_list_nor_a_mapping_say_both_forms(value):
    """``seeds: 3`` reads as "three seeds" to a user; the line says what the key takes."""
    raw = base_spec()
    raw["seeds"] = value
    msg = error_of(raw)
    assert msg.startswith(
        "x.yaml: seeds: a list of seeds (e.g. [0, 1, 2]: three seeds) or a mapping"
    )
    assert msg.endswith(f"(got {value!r})")


def test_luong_dot_with_a_unidirectional_encoder_passes():
    raw = base_spec()
    raw["grid"]["model"].append({"attention": "luong_dot", "bidirectional": False})
    assert len(build_sweep(raw, source="x.yaml").plans) == 4


def test_overrides_and_their_errors():
    sweep = build_sweep(
        base_spec(),
        overrides=["trainer.max_steps=77", "model.lr=0.01", "grid.task.max_length=[3, 4]"],
    )
    assert all(p.trainer["max_steps"] == 77 and p.model["lr"] == 0.01 for p in sweep.plans)
    assert len(sweep.plans) == 2 * 3
    assert sorted({p.task["max_length"] for p in sweep.plans}) == [3, 4]
    assert "--set trainer" in error_of_override(["trainer"])
    msg = error_of_override(["trainer.bogus=1"])
    assert "trainer.bogus: unknown key" in msg and "max_steps" in msg


def error_of_override(over):
    with pytest.raises(SpecError) as info:
        build_sweep(base_spec(), overrides=over)
    return str(info.value)


@pytest.mark.parametrize(
    "override, where, fix",
    [
        ("grid.model=[{attention:memory}]", "grid.model[0].attention:memory", "attention: memory"),
        ("task={name:copy, max_length: 4}", "task.name:copy", "name: copy"),
    ],
)
def test_a_mapping_without_a_space_after_its_colon_is_said_as_yaml_reads_it(override, where, fix):
    """``{attention:memory}`` is one YAML key with no value: the line says so and how to write it,
    where the checks after it would call the key unknown or the task's name missing."""
    msg = error_of_override([override])
    key = override.partition("=")[0]
    assert msg == (
        f"<spec>: --set {key}: {where}: YAML reads {where.rpartition('.')[2]!r} as one key with no value; "
        f"a value needs a space after the colon: {fix}"
    )


def test_a_set_of_a_whole_mapping_that_would_drop_settings_is_refused():
    """``--set model={preset: tiny}`` replaced the whole section: the file's other model settings
    were dropped without a word."""
    assert error_of_override(["task={name: copy, max_length: 6}"]) == (
        "<spec>: --set task: replaces the whole mapping, which drops train_size, val_size; set "
        "one key at a time (--set task.max_length=VALUE), or give every key to keep"
    )
    whole = "task={name: copy, max_length: 6, train_size: 64, val_size: 16}"
    assert build_sweep(base_spec(), overrides=[whole]).plans[0].task["max_length"] == 6


def test_the_set_line_says_which_of_a_key_given_twice_holds():
    """A later ``--set`` wins (a wrapper's own overrides come first, its user's after); the line
    said nothing of the one not used."""
    line = profile_line(None, {}, ["trainer.max_steps=5", "model.K=4", "trainer.max_steps=600"])
    assert line.endswith("(trainer.max_steps given twice: the last holds)")
    sweep = build_sweep(base_spec(), overrides=["trainer.max_steps=5", "trainer.max_steps=600"])
    assert sweep.plans[0].trainer["max_steps"] == 600
    whole = ["task.max_length=5", "task={name: copy, max_length: 6, train_size: 64, val_size: 16}"]
    assert profile_line(None, {}, whole).endswith(
        "(task.max_length replaced by a later --set task)"
    )
    assert "(" not in profile_line(None, {}, ["trainer={max_steps: 6}", "trainer.max_steps=7"])


def test_a_profile_that_gives_a_whole_mapping_that_would_drop_settings_is_refused():
    """A profile's ``model: {lr: 0.003}`` replaced the whole section without a word, where the
    same ``--set`` was refused: the profile ran the default model with the file's preset,
    attention and K gone."""
    raw = base_spec()
    raw["profiles"] = {"fast": {"task": {"max_length": 6}}}
    assert error_of_profile(raw, "fast") == (
        "x.yaml: profiles.fast.task: replaces the whole mapping, which drops name, train_size, "
        "val_size; set one key at a time, a profile's keys dotted (task.max_length: VALUE), or "
        "give every key to keep"
    )
    raw["profiles"] = {"fast": {"task.max_length": 6}}
    assert build_sweep(raw, profile="fast").plans[0].task["max_length"] == 6


@pytest.mark.train
def test_cli_reports_bad_spec_without_traceback(tmp_path):
    raw = base_spec()
    raw["model"]["attention_dim"] = 8  # a bahdanau option, invalid for the none/memory variants
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(raw))
    out = subprocess.run(
        [sys.executable, "sweeps/launch.py", str(bad), "--dry-run"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert (
        "model.attention_dim" in out.stderr
        and "not a model setting nor an option of attention" in out.stderr
    )
    missing = subprocess.run(
        [sys.executable, "sweeps/launch.py", str(tmp_path / "nope.yaml")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (
        missing.returncode == 2
        and "no such sweep file" in missing.stderr
        and "Traceback" not in missing.stderr
    )


def test_attention_zoo_covers_every_registered_mechanism():
    from lightning_modules.attention import ATTENTION_REGISTRY

    sweep = load_spec(ROOT / "sweeps" / "attention_zoo.yaml")
    zoo = {p.model["attention"] for p in sweep.plans}
    assert zoo == set(ATTENTION_REGISTRY), (
        f"sweeps/attention_zoo.yaml's grid lacks {sorted(set(ATTENTION_REGISTRY) - zoo)} "
        f"(and names no longer registered: {sorted(zoo - set(ATTENTION_REGISTRY))})"
    )


def test_wmt_paths_are_filled_in_per_pair_and_made_absolute():
    sweep = load_spec(ROOT / "sweeps" / "wmt17.yaml")
    dirs = {p.task["pair"]: p.task["data_dir"] for p in sweep.plans}
    # relative to the working directory, like every default folder of a shipped sweep file
    assert dirs["en-tr"] == str(Path.cwd() / "data/wmt17/en-tr")
    assert dirs["en-cs"] == str(Path.cwd() / "data/wmt17/en-cs")
    assert len(sweep.cells) == 4 * (4 + 1)  # pairs x (memory K x PE, bahdanau)
    smoke = load_spec(ROOT / "sweeps" / "wmt17.yaml", profile="smoke")
    assert all(
        Path(p.task["data_dir"]).is_absolute() and Path(p.task["data_dir"]).exists()
        for p in smoke.plans
    )


def test_named_profiles_and_the_smoke_profile():
    raw = base_spec(
        profiles={
            "cpu": {"trainer.max_steps": 500, "grid.task.max_length": [4, 6]},
            "smoke": {"task.max_length": 3, "task.val_size": 8},
        },
    )
    cpu = build_sweep(raw, profile="cpu")
    assert {p.trainer["max_steps"] for p in cpu.plans} == {500}
    assert sorted({p.task["max_length"] for p in cpu.plans}) == [4, 6]
    assert {p.model["preset"] for p in cpu.plans} == {"tiny"}  # smoke's defaults are not applied
    smoke = build_sweep(raw, profile="smoke")
    assert smoke.spec.trainer.max_steps == 60  # SMOKE_DEFAULTS
    # the timing stage's plumbing, not speed figures: one process, 5 s a measure (tune_optuna's
    # smoke run spent 4 of its 5 minutes timing 4 models at the stage's defaults)
    assert (smoke.spec.timing.processes, smoke.spec.timing.max_seconds) == (1, 5)
    assert {(p.task["max_length"], p.task["val_size"]) for p in smoke.plans} == {(3, 8)}
    # the older top-level spelling is refused with where it goes now, not silently ignored
    assert "move it under `profiles:`" in error_of(base_spec(smoke={"task.max_length": 3}))
    with pytest.raises(SpecError, match="no such profile; it has: smoke, cpu"):
        build_sweep(raw, profile="gpu")
    own_smoke = base_spec(profiles={"smoke": {"seeds": [1]}, "cpu": {"seeds": [2]}})
    assert error_of_profile(own_smoke, "gpu").endswith("no such profile; it has: smoke, cpu")
    assert "profile name 'a b'" in error_of(base_spec(profiles={"a b": {}}))


def test_trial_configs_are_flat_readable_and_unique():
    from sweeps.spec import flat_columns

    sweep = build_sweep(
        base_spec(
            grid={"task.max_length": [3], "model": [{"attention": "memory", "K": 2}]},
            parameters={
                "model.lr": {"min": 0.001, "max": 0.1},
                "model.dropout": {"values": [0.0, 0.1]},
            },
        )
    )
    assert sweep.grid_columns == {
        "length": "task.max_length",
        "attention": "model.attention",
        "K": "model.K",
    }
    assert sweep.param_columns == {"lr": "model.lr", "dropout": "model.dropout"}
    assert sweep.plans[0].trial_config(sweep.grid_columns) == {
        "cell": "length=3 attention=memory K=2",
        "seed": 0,
        "length": 3,
        "attention": "memory",
        "K": 2,
    }
    # a short name two keys share, or a reserved one, keeps its dotted form
    assert flat_columns(["model.dropout", "task.dropout", "task.seed", "model.K"]) == {
        "model.dropout": "model.dropout",
        "task.dropout": "task.dropout",
        "task.seed": "task.seed",
        "K": "model.K",
    }


def test_dry_run_says_when_early_stopping_has_nothing_to_stop(tmp_path, capsys):
    raw = base_spec(early_terminate={"type": "asha"})
    path = tmp_path / "asha.yaml"
    path.write_text(yaml.safe_dump(raw))
    said = dry_run(path, capsys)
    assert "each holds a single trial" in said and "nothing to stop" in said
    searched = build_sweep(
        base_spec(
            early_terminate={"type": "asha"},
            num_samples=4,
            parameters={"model.lr": {"min": 0.001, "max": 0.1}},
        )
    )
    assert (
        "compares the 4 trials of each (cell, seed) among themselves only"
        in searched.early_stopping_note()
    )


@pytest.mark.parametrize(
    "section, key, value, allowed",
    [
        ("task", "batch_size", 0, ">= 1"),
        ("task", "max_length", 0, ">= 1"),
        ("task", "vocab_size", 0, ">= 1"),
        ("task", "train_size", 0, ">= 1"),
        ("model", "lr", -0.003, "> 0"),
        ("trainer", "val_check_interval", 0, "0 is out of range; allowed: > 0"),
    ],
)
def test_dry_run_rejects_out_of_range_values_naming_the_key(
    tmp_path, capsys, section, key, value, allowed
):
    """Ranges come from the constructors' Annotated markers (datamodule, Seq2SeqModule) and the
    schema's Field constraints; --dry-run catches them before anything runs."""
    from sweeps.launch import main

    raw = base_spec()
    raw[section][key] = value
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main([str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert f"{section}.{key}" in err and allowed in err and repr(value) in err


def test_search_ranges_are_checked_like_fixed_settings():
    msg = error_of(base_spec(parameters={"model.lr": {"min": -0.1, "max": 0.01}}))
    assert "parameters.model.lr" in msg and "> 0" in msg
    msg = error_of(base_spec(parameters={"task.batch_size": {"values": [0, 8]}}))
    assert "parameters.task.batch_size" in msg and ">= 1" in msg


def test_unparseable_set_and_unwritable_folders_fail_in_one_line_before_ray(tmp_path, capsys):
    ray = pytest.importorskip("ray")
    from sweeps.launch import main

    spec = tmp_path / "ok.yaml"
    spec.write_text(yaml.safe_dump(base_spec()))
    assert main([str(spec), "--set", "trainer.max_steps=[1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--set trainer.max_steps" in err and "cannot parse" in err

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    assert main([str(spec), "--output", str(blocker / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        len(err.splitlines()) == 1
        and f"--output {blocker / 'out'}" in err
        and "cannot create" in err
    )

    out = tmp_path / "out"
    assert main([str(spec), "--output", str(out), "--set", f"storage.path={blocker / 'ckpt'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"storage.path {blocker / 'ckpt'}" in err
    assert not ray.is_initialized(), "nothing may start before the folders are known to be writable"


def test_resume_reuses_the_first_runs_overrides_and_refuses_new_ones(tmp_path):
    from sweeps.spec import resume_launch, save_launch

    save_launch(tmp_path, ["trainer.max_steps=300", "model.lr=0.01"], profile="smoke")
    assert resume_launch(tmp_path, [], None, "x.yaml") == (
        ["trainer.max_steps=300", "model.lr=0.01"],
        "smoke",
    )
    assert (
        resume_launch(tmp_path, ["trainer.max_steps= 300"], "smoke", "x.yaml")[0][0]
        == "trainer.max_steps=300"
    )
    with pytest.raises(SpecError, match=r"--set seeds: --resume continues .*seeds unset"):
        resume_launch(tmp_path, ["seeds=[1]"], None, "x.yaml")
    with pytest.raises(SpecError, match="--profile: the first run used profile 'smoke', not 'cpu'"):
        resume_launch(tmp_path, [], "cpu", "x.yaml")
    save_launch(tmp_path / "plain", [], profile=None)
    with pytest.raises(SpecError) as info:
        resume_launch(tmp_path / "plain", [], "cpu", "x.yaml")
    assert "the first run used no profile, not 'cpu'" in str(info.value)
    assert str(info.value).endswith("resume it with no --profile")
    assert resume_launch(tmp_path / "older", ["seeds=[1]"], None, "x.yaml") == (["seeds=[1]"], None)


def test_resume_refuses_a_sweep_file_that_plans_its_trials_otherwise(tmp_path):
    from sweeps.spec import resume_launch, save_launch

    spec = base_spec(seeds=[0, 1], budget={"hours": 1}, failure={"max_failures": 0})
    first = build_sweep(spec, source="x.yaml").planned
    assert "budget" not in first and "failure" not in first and first["seeds"] == [0, 1]
    save_launch(tmp_path, [], None, first)
    assert json.loads((tmp_path / "launch.json").read_text())["planned"] == first
    # a larger budget, the cause of a failure removed, other timing: the plan is the same
    again = base_spec(seeds=[0, 1], budget={"hours": 3}, timing={"processes": 1})
    assert resume_launch(tmp_path, [], None, "x.yaml", build_sweep(again).planned) == ([], None)
    edited = base_spec(seeds=[0], trainer={"max_steps": 20, "val_check_interval": 5})
    with pytest.raises(SpecError) as info:
        resume_launch(tmp_path, [], None, "x.yaml", build_sweep(edited).planned)
    said = str(info.value)
    assert "the sweep file plans its trials otherwise than at the first run: " in said
    assert "trainer.max_steps was 10, is 20; trainer.val_check_interval was unset, is 5" in said
    assert "seeds was [0, 1], is [0]" in said and str(tmp_path / "launch.json") in said
    # a new sweep beside a storage.path's one would meet its trials there: that changes too
    assert "a storage.path must change with --output where one is set" in said
    # the profile's settings count as the file's (the profile itself must be the first run's)
    profiled = {**spec, "profiles": {"short": {"trainer.max_steps": 5}}}
    with pytest.raises(SpecError, match="trainer.max_steps was 10, is 5"):
        planned = build_sweep(profiled, profile="short").planned
        resume_launch(tmp_path, [], None, "x.yaml", planned)
    # settings outside the plan may be given with --set too; those of the plan may not
    assert resume_launch(tmp_path, ["failure.max_failures=3"], None, "x.yaml", first) == (
        ["failure.max_failures=3"],
        None,
    )
    with pytest.raises(SpecError, match="--set task.max_length: --resume continues"):
        resume_launch(tmp_path, ["task.max_length=6"], None, "x.yaml", first)
    # the resources decide which trials fuse, and the GPU arrangement: part of the plan
    with pytest.raises(SpecError, match="--set resources.gpu: --resume continues"):
        resume_launch(tmp_path, ["resources.gpu=0.5"], None, "x.yaml", first)
    # a sweep started before the plan was recorded: nothing to compare
    save_launch(tmp_path / "older", [], None)
    planned = build_sweep(edited).planned
    assert resume_launch(tmp_path / "older", [], None, "x.yaml", planned) == ([], None)


def test_the_printed_resume_command_continues_a_sweep_started_with_a_profile(tmp_path, capsys):
    """The resume command a stop prints names no --profile: the launch reads the first run's from
    launch.json, and the sweep file's plan is compared with the first run's as read under that
    profile (it was compared as read without it, and every profiled sweep's resume was refused)."""
    from sweeps.spec import save_launch

    spec = tmp_path / "profiled.yaml"
    spec.write_text(
        yaml.safe_dump({**base_spec(), "profiles": {"short": {"trainer.max_steps": 5}}})
    )
    out = tmp_path / "out"
    first = load_spec(str(spec), overrides=["model.lr=0.01"], profile="short")
    folder = out.resolve() / first.name
    save_launch(folder, ["model.lr=0.01"], "short", first.planned)  # as the launch records it
    (folder / "results.csv").write_text("trial_id,status\nabc,budget\n")  # the stopped run's
    assert launch_main([str(spec), "--output", str(out), "--resume", "--dry-run"]) == 0
    said = capsys.readouterr()
    assert "resuming with the recorded overrides: --set model.lr=0.01 --profile short" in said.out
    assert "(profile short)" in said.out and "plans its trials otherwise" not in said.err
    # a setting outside the plan given now is this command's, not the first run's
    argv = [str(spec), "--output", str(out), "--resume", "--dry-run", "--set", "budget.hours=1"]
    assert launch_main(argv) == 0
    assert (
        "resuming with the recorded overrides: --set model.lr=0.01 --profile short; and this "
        "command's: --set budget.hours=1"
    ) in capsys.readouterr().out
    # the file edited under the profile: refused, naming what changed
    spec.write_text(
        yaml.safe_dump({**base_spec(), "profiles": {"short": {"trainer.max_steps": 7}}})
    )
    assert launch_main([str(spec), "--output", str(out), "--resume", "--dry-run"]) == 2
    assert "trainer.max_steps was 5, is 7" in capsys.readouterr().err


def test_a_resume_finds_the_trials_its_first_runs_set_sent_to_a_storage_path(tmp_path, capsys):
    """A first run with --set storage.path, killed before results.csv existed: its --output folder
    held only the launch's record, so a bare --resume never read the record, looked for the trials
    beside it and said no trial had started; the command it offered trained every trial again
    beside the stored ones. It now reads the record where its storage.path holds the sweep."""
    from sweeps.spec import save_launch

    spec = tmp_path / "s.yaml"
    spec.write_text(yaml.safe_dump(base_spec()))
    out, store = tmp_path / "out", tmp_path / "store"
    sets = [f"storage.path={store}"]
    first = load_spec(str(spec), overrides=sets)
    save_launch(out.resolve() / first.name, sets, None, first.planned)  # as the launch records it
    argv = [str(spec), "--output", str(out), "--resume", "--dry-run"]
    assert launch_main(argv) == 2  # the storage holds nothing yet: the record binds nobody
    said = capsys.readouterr()
    assert "resuming with the recorded overrides" not in said.out
    assert "stopped before any trial started" in said.err
    (store / first.name).mkdir(parents=True)
    (store / first.name / "experiment_state-2026-12-02_10-00-00.json").write_text("{}")
    assert launch_main(argv) == 0
    assert f"resuming with the recorded overrides: --set storage.path={store}" in (
        capsys.readouterr().out
    )


def test_every_metric_a_study_may_name_is_a_results_column():
    from lightning_modules.metric_names import FIT_METRICS
    from sweeps.report.results import METRIC_COLUMNS
    from sweeps.spec.schema import MetricSpec

    for name in FIT_METRICS:
        assert MetricSpec(name=name).name in METRIC_COLUMNS
    assert "val/sacrebleu" in METRIC_COLUMNS and "train/loss" in METRIC_COLUMNS


@pytest.mark.parametrize(
    "mutate, expected",
    [
        # pydantic's lax mode would read True as 1 and the model would fail inside torch
        (
            lambda s: s["grid"]["model"].append({"attention": "memory", "K": True}),
            ["grid.model[2].K", "yes/no value"],
        ),
        (
            lambda s: s["task"].update(min_length=7),
            ["task.min_length", "above task.max_length", "min_length <= max_length"],
        ),
        (
            lambda s: s["trainer"].update(precision="bogus"),
            ["trainer.precision", "not a Lightning precision", "bf16-mixed"],
        ),
        # a precision Lightning knows, whose package is missing: each trial's Trainer refused it
        pytest.param(
            lambda s: s["trainer"].update(precision="transformer-engine"),
            [
                "trainer.precision",
                "Transformer Engine",
                "pip install 'transformer-engine[pytorch]'",
            ],
            marks=pytest.mark.skipif(
                importlib.util.find_spec("transformer_engine") is not None,
                reason="Transformer Engine is installed here",
            ),
        ),
        # and 64.0 as 64, "32" as 32: the model is given the value itself, and fails in training
        (
            lambda s: s["model"].update(hidden_size=64.0),
            ["model.hidden_size", "64.0 is not a whole number; expected int or null (write 64)"],
        ),
        (
            lambda s: s["grid"]["model"].append({"attention": "memory", "K": 16.0}),
            ["grid.model[2].K", "16.0 is not a whole number", "(write 16)"],
        ),
        (
            lambda s: s["task"].update(batch_size="32"),
            ["task.batch_size", "'32' is text; expected int (write it without quotes)"],
        ),
        # the sweep's own sections as the constructor settings: pydantic read "600" as 600, but
        # the folder's record kept the text, and --resume refused the file once it was unquoted
        (
            lambda s: s["trainer"].update(max_steps="600"),
            ["trainer.max_steps", "'600' is text; expected int (write it without quotes)"],
        ),
        (
            lambda s: s.update(seeds=[1, "1"]),
            ["seeds", "'1' is text; a seed is a whole number", "written without quotes"],
        ),
        # YAML 1.1 reads 1e-4 (no dot before the exponent) as text
        (
            lambda s: s["model"].update(lr=yaml.safe_load("1e-4")),
            ["model.lr", "YAML reads 1e-4 as text: write 1.0e-4 or 0.0001"],
        ),
    ],
)
def test_values_that_used_to_pass_dry_run_are_refused(mutate, expected):
    raw = base_spec()
    mutate(raw)
    msg = error_of(raw)
    for part in expected:
        assert part in msg, f"{part!r} not in {msg!r}"


def test_a_set_that_the_grid_would_override_is_refused():
    with pytest.raises(SpecError) as info:
        build_sweep(base_spec(), source="x.yaml", overrides=["model.attention=bahdanau"])
    assert "--set model.attention" in str(info.value) and "the grid sets model.attention" in str(
        info.value
    )
    # a key inside one the grid sets whole: the cells' value replaces it, so it is refused too
    with pytest.raises(SpecError) as info:
        build_sweep(base_spec(), source="x.yaml", overrides=["model.attention.k=0"])
    assert "--set model.attention.k" in str(info.value)
    assert "the grid sets model.attention in its cells" in str(info.value)
    # so is a key the search samples in every trial, unless a baseline model trains with it
    searched = base_spec(parameters={"model.lr": {"min": 0.0001, "max": 0.01}}, num_samples=2)
    with pytest.raises(SpecError) as info:
        build_sweep(searched, source="x.yaml", overrides=["model.lr=0.01"])
    assert "--set model.lr: the search samples model.lr (parameters.model.lr)" in str(info.value)
    searched["objectives"] = [
        {"name": "val/bleu", "goal": "maximize"},
        {"name": "decode_seconds", "goal": "minimize"},
    ]
    searched["grid"] = {"model": [{"attention": "memory"}]}
    searched["constraints"] = [{"name": "val/bleu", "within": 1.0, "of": {"attention": "none"}}]
    baseline = build_sweep(searched, source="x.yaml", overrides=["model.lr=0.01"])
    assert baseline.spec.model["lr"] == 0.01
    assert (
        build_sweep(base_spec(), source="x.yaml", overrides=["model.lr=0.01"]).plans[0].model["lr"]
        == 0.01
    )


def test_a_folder_or_a_non_utf8_file_as_the_spec_is_one_line(tmp_path, capsys):
    from sweeps.launch import main

    (tmp_path / "a.yaml").write_text("name: a\n")
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is a folder" in err and "a.yaml" in err
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("name: caf\xe9\n".encode("latin-1"))
    assert main([str(latin)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not UTF-8" in err and "byte 9" in err


def test_bad_launcher_arguments_fail_in_one_line_before_ray(tmp_path, capsys):
    ray = pytest.importorskip("ray")
    from sweeps.launch import main

    spec = tmp_path / "ok.yaml"
    spec.write_text(yaml.safe_dump(base_spec()))
    with pytest.raises(SystemExit) as info:  # argparse's own exit for a bad argument
        main([str(spec), "--num-cpus", "-1"])
    assert (
        info.value.code == 2 and "--num-cpus: must be at least 1, got -1" in capsys.readouterr().err
    )
    # an address of no form a Ray is reached by: refused as an argument, by --dry-run too
    for address, dry in [("http://:::", []), ("bogus:xx", ["--dry-run"])]:
        with pytest.raises(SystemExit) as info:
            main([str(spec), "--output", str(tmp_path / "o"), "--address", address, *dry])
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert info.value.code == 2 and err.endswith(
            f"argument --address: {address!r}: expected HOST:PORT, ray://HOST:10001, auto or local"
        )
    # --resume with nothing there to continue names the folder instead of starting a new sweep
    assert main([str(spec), "--output", str(tmp_path / "empty"), "--resume"]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        len(err.splitlines()) == 1
        and f"{tmp_path / 'empty' / 't'} holds no sweep to continue" in err
    )
    assert not ray.is_initialized()


def test_resume_accepts_a_set_that_repeats_the_first_runs_planned_value(tmp_path):
    """A --set of the value the first run planned with, from its profile or its file (not from a
    --set), repeats it: accepted. Another value is refused, saying where the first run's came from
    (not "unset")."""
    from sweeps.spec import resume_launch, save_launch

    raw = {**base_spec(), "profiles": {"short": {"trainer.max_steps": 5}}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    for profile, key, value, where in [
        ("smoke", "trainer.max_steps", 60, "profile smoke"),  # the smoke defaults
        ("short", "trainer.max_steps", 5, "profile short"),  # the file's own profile
        (None, "trainer.max_steps", 10, "the sweep file"),
    ]:
        folder = tmp_path / str(profile)
        sweep = build_sweep(raw, source=str(path), profile=profile)
        save_launch(folder, [], profile, sweep.planned, sweep.profile_settings)
        assert resume_launch(folder, [f"{key}={value}"], profile, str(path)) == ([], profile)
        with pytest.raises(SpecError) as info:
            resume_launch(folder, [f"{key}=100"], profile, str(path))
        said = str(info.value)
        assert f"--set {key}: --resume continues the first run with its own overrides" in said
        assert f"(the first run's: {key}={value} from {where}; recorded in" in said
        assert "unset" not in said
    # a search parameter's key is itself dotted (parameters: {model.lr: ...})
    lr = {"min": 0.001, "max": 0.01, "distribution": "log_uniform_values"}
    raw = {
        **base_spec(),
        "parameters": {"model.lr": lr},
        "profiles": {"narrow": {"parameters.model.lr": {**lr, "max": 0.005}}},
    }
    path.write_text(yaml.safe_dump(raw))
    for profile, value, where in [
        (None, lr, "the sweep file"),
        ("narrow", {**lr, "max": 0.005}, "profile narrow"),
    ]:
        folder = tmp_path / f"search-{profile}"
        sweep = build_sweep(raw, source=str(path), profile=profile)
        save_launch(folder, [], profile, sweep.planned, sweep.profile_settings)
        again = f"parameters.model.lr={json.dumps(value)}"
        assert resume_launch(folder, [again], profile, str(path)) == ([], profile)
        with pytest.raises(SpecError) as info:
            resume_launch(
                folder,
                [f"parameters.model.lr={json.dumps({**lr, 'min': 1e-4})}"],
                profile,
                str(path),
            )
        said = str(info.value)
        assert f"(the first run's: parameters.model.lr={value!r} from {where}; recorded in" in said


def test_the_sweep_id_is_made_once_and_kept_by_every_resume(tmp_path):
    """The W&B Report plotted every run of the sweep's group: a smoke run or an earlier run of a
    sweep of the same name shares it. Each sweep has an id of its own, in its launch.json and in
    every run's config, made by its first launch and kept by its resumes."""
    import json

    from sweeps.spec import save_launch
    from sweeps.spec.launch_record import sweep_id

    save_launch(tmp_path / "a", [], profile="smoke")
    first = sweep_id(tmp_path / "a")
    assert first and len(first) == 12 and int(first, 16) >= 0
    save_launch(tmp_path / "a", ["budget.hours=1"], profile="smoke")  # a resume
    assert sweep_id(tmp_path / "a") == first
    save_launch(tmp_path / "b", [], profile="smoke")
    assert sweep_id(tmp_path / "b") not in (None, first)
    old = tmp_path / "old"  # a sweep whose launch recorded none: its runs carry none either
    old.mkdir()
    (old / "launch.json").write_text(json.dumps({"overrides": [], "profile": None}))
    save_launch(old, [], profile=None)
    assert sweep_id(old) is None and "sweep_id" not in json.loads((old / "launch.json").read_text())
    older = tmp_path / "older"  # resumed with no launch.json at all: its runs carry none either
    save_launch(older, [], profile=None, resume=True)
    assert sweep_id(older) is None


@pytest.mark.parametrize(
    "sets, said, fixed",
    [
        (  # the list of metrics says which one only WMT reports
            ["metric.name=val/sacreblue"],
            "valid: train/loss, val/loss, val/token_acc, val/bleu, val/sacrebleu (wmt17 only), ",
            ["metric.name=val/bleu"],
        ),
        (  # one metric: the Pareto rule is no way out, so the fix is to remove the key
            ["early_terminate.type=asha", "early_terminate.promotion=wait"],
            "read by the Pareto rung rule only; remove it (the Pareto rule ranks trials on "
            "`objectives:`, which this sweep has not)",
            ["early_terminate.type=asha"],
        ),
        (
            ["grid.model.attention=[memory]"],
            "model.attention is set by two grid entries (grid.model[0].attention and "
            "grid.model.attention): keep it in one of them",
            ["grid.model=[{attention: memory}]"],
        ),
        (
            ["parameters.model.lr={min: 0.01, max: 0.0001}"],
            "min (0.01) must be below max (0.0001): swap them",
            ["parameters.model.lr={min: 0.0001, max: 0.01}"],
        ),
    ],
)
def test_a_refusal_names_a_fix_that_passes(sets, said, fixed, tmp_path, capsys):
    """Each refusal's fix, applied as it says, passes the dry run (the Pareto rule suggested to a
    one-metric sweep was refused in turn; the metric list offered val/sacrebleu to the copy task)."""
    argv = [str(ROOT / "sweeps" / "quickstart.yaml"), "--dry-run", "--output", str(tmp_path)]
    assert launch_main([*argv, *(x for s in sets for x in ("--set", s))]) == 2
    assert said in capsys.readouterr().err
    assert launch_main([*argv, *(x for s in fixed for x in ("--set", s))]) == 0, capsys.readouterr()


def test_a_model_key_refusal_lists_only_settings_a_model_section_takes():
    message = error_of_override(["model.KK=16"])
    settings = message.split("Model settings: ")[1].split(";")[0].split(", ")
    assert "attention" in settings and "lr" in settings
    assert "attention_kwargs" not in settings and "src_vocab_size" not in settings
