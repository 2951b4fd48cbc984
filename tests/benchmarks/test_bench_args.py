"""The benchmark scripts refuse a bad command line in one line (argparse's ``usage:`` and
``script: error: ...``, exit 2) while reading it, before anything is measured: unknown mechanisms,
mechanism options and presets, counts below 1, negative warm-ups, a budget of no seconds, a data
folder without its files, a sweep file that is missing or wrong, an unknown system, another
checkout that is not one. What only the script can judge once it has read the line, a device
torch cannot use, is refused the same way (``script: error: --device: ...``, exit 2) without the
usage. Nothing here measures; ``--help`` gives whole sentences."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from test_benchmarks import load

ROOT = Path(__file__).resolve().parents[2]


def refusal(capsys, name: str, argv: list[str]) -> str:
    """What ``benchmarks/<name>.py argv`` says after argparse's usage and ``error:``, read by its
    ``parse_args`` (else its ``main``, whose first step is reading the command line)."""
    module = load(name)
    read = getattr(module, "parse_args", None) or module.main
    with pytest.raises(SystemExit) as stop:
        read(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage:"), err
    assert err.count(": error: ") == 1, err
    return err.split(": error: ")[1].strip()


UNKNOWN_MECHANISM = "argument --mechanisms: unknown attention 'foo'; valid names: bahdanau,"
AT_LEAST_1 = "must be at least 1, got 0"
CASES = [
    ("decode_speed", ["--mechanisms", "none", "foo"], UNKNOWN_MECHANISM),
    ("train_speed", ["--mechanisms", "foo"], UNKNOWN_MECHANISM),
    (
        "train_speed",
        ["--quick", "--mechanisms", "memory:Q=3"],
        "argument --mechanisms: 'memory:Q=3': attention 'memory' has no option(s) Q; "
        "it accepts: K,",
    ),
    (
        "decode_speed",
        ["--mechanisms", "memory:K"],
        "argument --mechanisms: bad mechanism option 'K' in 'memory:K': expected key=value",
    ),
    (
        "train_speed",
        ["--preset", "foo"],
        "argument --preset: unknown preset 'foo'; valid presets: paper_copy, paper_wmt, tiny",
    ),
    ("decode_speed", ["--preset", "foo"], "argument --preset: unknown preset 'foo'"),
    ("cuda_graphs", ["--presets", "tiny", "big"], "argument --presets: unknown preset 'big'"),
    ("fusion", ["--preset", "huge"], "argument --preset: unknown preset 'huge'"),
    ("gpu_share", ["--presets", "foo"], "argument --presets: unknown preset 'foo'"),
    # option values the model rejects: a traceback once the measuring began
    (
        "train_speed",
        ["--quick", "--mechanisms", "memory:K=0"],
        "argument --mechanisms: 'memory:K=0': memory attention: K must be >= 1, got 0",
    ),
    (
        "decode_speed",
        ["--quick", "--mechanisms", "luong_dot"],
        "argument --mechanisms: 'luong_dot': luong_dot scores q^T s_j, so the decoder size must "
        "equal the encoder size",
    ),
    ("decode_speed", ["--lengths", "0"], f"argument --lengths: {AT_LEAST_1}"),
    ("decode_speed", ["--beam", "0"], f"argument --beam: {AT_LEAST_1}"),
    ("decode_speed", ["--batch", "x"], "argument --batch: expected a whole number, got 'x'"),
    ("decode_speed", ["--warmup", "-1"], "argument --warmup: must be at least 0, got -1"),
    ("train_speed", ["--lengths", "4", "0"], f"argument --lengths: {AT_LEAST_1}"),
    ("train_speed", ["--memory-repeats", "0"], f"argument --memory-repeats: {AT_LEAST_1}"),
    ("train_speed", ["--warmup", "-1"], "argument --warmup: must be at least 0, got -1"),
    ("attention_step", ["--K", "0"], f"argument --K: {AT_LEAST_1}"),
    ("attention_step", ["--square", "0"], f"argument --square: {AT_LEAST_1}"),
    ("attention_step", ["--threads", "0"], f"argument --threads: {AT_LEAST_1}"),
    ("cuda_graphs", ["--repeats", "0"], f"argument --repeats: {AT_LEAST_1}"),
    ("fusion", ["--mixed-k", "4", "0"], f"argument --mixed-k: {AT_LEAST_1}"),
    ("fusion", ["--cores", "0"], f"argument --cores: {AT_LEAST_1}"),
    ("fusion", ["--members", "0", "--quick"], f"argument --members: {AT_LEAST_1}"),
    ("gpu_share", ["--processes", "1", "0"], f"argument --processes: {AT_LEAST_1}"),
    ("gpu_share", ["--rounds", "0"], f"argument --rounds: {AT_LEAST_1}"),
    ("gpu_benchmarks", ["--budget", "-5"], "argument --budget: must be a number above 0, got -5"),
    ("gpu_benchmarks", ["--budget", "nan"], "argument --budget: must be a number above 0"),
    ("gpu_sweep", ["--out", "x", "--a-lengths", "0"], f"argument --a-lengths: {AT_LEAST_1}"),
    ("moo_search", ["--seeds", "0"], f"argument --seeds: {AT_LEAST_1}"),
    ("moo_search", ["--reduction-factor", "1"], "--reduction-factor: must be above 1, got 1"),
    ("peers", ["--rounds", "0"], f"argument --rounds: {AT_LEAST_1}"),
    (  # a study is 10 lengths x N/10 values of K: 15 built 10 trials and failed after Ray started
        "sweep_scale",
        ["--trials", "15"],
        "argument --trials: 15 is not a multiple of 10 (a study is 10 lengths x N/10 values of K)",
    ),
    ("peers", ["--warmup", "-1"], "argument --warmup: must be at least 0, got -1"),
    ("peers", ["--lengths", "0"], f"argument --lengths: {AT_LEAST_1}"),
    (
        "peers",
        ["--systems", "project@/no/such/checkout", "--quick"],
        "argument --systems: 'project@/no/such/checkout': /no/such/checkout is not a folder "
        "(no such path)",
    ),
    (
        "peers",
        ["--systems", "projekt"],
        "argument --systems: unknown system 'projekt'; use project, project:bf16, "
        "project:graphed, project@DIR",
    ),
    ("selection_bias", ["--samples", "0"], f"argument --samples: {AT_LEAST_1}"),
    ("sweep_scale", ["--trials", "100", "0"], f"argument --trials: {AT_LEAST_1}"),
    ("sweep_scale", ["--dry-run-cells", "-1"], "argument --dry-run-cells: must be at least 0"),
    ("sweep_overhead", ["--rounds", "0"], f"argument --rounds: {AT_LEAST_1}"),
    ("data_throughput", ["--vocab", "0"], f"argument --vocab: {AT_LEAST_1}"),
    ("data_throughput", ["--scale", "-1"], "argument --scale: must be at least 0, got -1"),
]


@pytest.mark.parametrize("name, argv, said", CASES, ids=[f"{n}:{' '.join(a)}" for n, a, _ in CASES])
def test_a_bad_value_is_refused_in_one_line_while_reading_the_command_line(
    capsys, name, argv, said
):
    line = refusal(capsys, name, argv)
    assert said in line and "\n" not in line, line


def test_mechanism_specs_take_aliases_and_options_and_stay_as_given():
    args = load("train_speed").parse_args(
        ["--mechanisms", "luong", "local", "memory:K=4,position_encoding=true", "monotonic"]
    )
    assert args.mechanisms == ["luong", "local", "memory:K=4,position_encoding=true", "monotonic"]


def test_the_defaults_still_parse():
    decode = load("decode_speed")
    args = decode.parse_args([])
    assert (args.mechanisms, args.lengths, args.preset) == (
        decode.FULL_MECHANISMS,
        decode.FULL_LENGTHS,
        "paper_copy",
    )
    assert (args.batch, args.repeats, args.warmup) == (32, 5, 1)
    quick = decode.parse_args(["--quick", "--warmup", "0"])
    assert (quick.batch, quick.repeats, quick.warmup) == (4, 3, 0)
    for name in ("train_speed", "attention_step", "cuda_graphs", "fusion", "gpu_share", "peers"):
        load(name).parse_args([])
    assert load("peers").parse_args([]).warmup is None  # filled in per --quick later


def test_the_hidden_worker_arguments_still_parse():
    """fusion's and gpu_share's workers (-1: a GPU worker, no core of its own), peers' children."""
    assert load("fusion").parse_args(["--worker", "-1"]).worker == -1
    assert load("gpu_share").parse_args(["--worker", "0"]).worker == 0
    assert load("peers").parse_args(["--child", "project"]).child == "project"


def test_a_data_folder_that_is_missing_or_lacks_its_files_is_named(tmp_path, capsys):
    line = refusal(capsys, "data_throughput", ["--data", str(tmp_path / "nonexist")])
    assert line == (
        f"--data {tmp_path / 'nonexist'}: no such folder; the folder "
        "must hold train.en and train.de (the training split of --src and --tgt, one sentence a "
        "line)"
    )
    (tmp_path / "train.en").write_text("a sentence\n")
    line = refusal(capsys, "data_throughput", ["--data", str(tmp_path)])
    assert (
        f"--data {tmp_path}: no train.de in it; the folder must hold train.en and train.de" in line
    )
    line = refusal(capsys, "data_throughput", ["--data", str(tmp_path), "--tgt", "cs"])
    assert "no train.cs in it; the folder must hold train.en and train.cs" in line
    (tmp_path / "train.de").write_text("ein Satz\n")
    bench = load("data_throughput")
    assert bench.parse_args(["--data", str(tmp_path)]).data == str(tmp_path)
    assert Path(bench.parse_args([]).data).is_dir()  # the default: the sample, or the slice


def test_a_sweep_file_that_is_missing_or_wrong_is_refused_with_its_problem(tmp_path, capsys):
    line = refusal(capsys, "sweep_overhead", ["--spec", "nonexist.yaml"])
    assert line == ("nonexist.yaml: no such sweep file; the shipped ones are in sweeps/*.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nnot_a_key: 1\n")
    line = refusal(capsys, "sweep_overhead", ["--spec", str(bad)])
    assert line.startswith(f"{bad}: ") and "not_a_key: unknown key" in line, line
    line = refusal(capsys, "sweep_overhead", ["--set", "no_such_key=1"])
    assert "no_such_key: unknown key" in line


def test_the_default_sweep_file_is_found_from_another_folder(tmp_path, monkeypatch):
    bench = load("sweep_overhead")
    monkeypatch.chdir(ROOT)
    assert bench.parse_args([]).spec == "sweeps/quickstart.yaml"  # as given, from the root
    monkeypatch.chdir(tmp_path)
    args = bench.parse_args(["--quick"])
    assert args.spec == str(ROOT / "sweeps" / "quickstart.yaml")
    assert args.sweep.plans and args.overrides == bench.QUICK
    own = tmp_path / "sweeps" / "quickstart.yaml"  # a relative path found here is read here
    own.parent.mkdir()
    own.write_text((ROOT / "sweeps" / "quickstart.yaml").read_text())
    assert bench.parse_args([]).spec == "sweeps/quickstart.yaml"


def test_another_checkout_must_be_a_checkout_of_the_project(tmp_path, capsys):
    """peers.py --systems project@DIR with DIR a folder of something else ran this checkout's
    model under DIR's name."""
    line = refusal(capsys, "peers", ["--systems", f"project@{tmp_path}:bf16"])
    assert line == (
        f"argument --systems: 'project@{tmp_path}:bf16': {tmp_path} has no "
        "lightning_modules/seq2seq.py or datamodules/vocab.py: not a checkout of this project"
    )
    peers = load("peers")
    args = peers.parse_args(["--systems", "project", f"project@{ROOT}", f"project@{ROOT}:graphed"])
    assert args.systems == ["project", f"project@{ROOT}", f"project@{ROOT}:graphed"]


def test_a_relative_checkout_is_found_from_the_folder_the_command_was_given_in(monkeypatch):
    """The children run in the repository's root: they are given the folder made absolute."""
    peers = load("peers")
    monkeypatch.chdir(ROOT / "benchmarks")
    assert peers.parse_args(["--systems", "project@..:bf16"]).systems == ["project@..:bf16"]
    assert peers.absolute("project@..:bf16") == f"project@{ROOT}:bf16"
    assert peers.absolute("project@..") == f"project@{ROOT}" and peers.absolute("joeynmt") == (
        "joeynmt"
    )


def late_refusal(capsys, name: str, argv: list[str]) -> str:
    """What ``benchmarks/<name>.py argv`` says when its ``main`` refuses what argparse let through:
    one line, ``script: error: ...``, exit 2, as argparse's own refusals."""
    with pytest.raises(SystemExit) as stop:
        load(name).main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.count(": error: ") == 1, err
    return err.split(": error: ")[1]


DEVICE_FOO = [
    ("peers", ["--device", "foo"]),
    ("peers", ["--device", "foo", "--quick"]),
    ("gpu_share", ["--device", "foo", "--rounds", "1"]),
    ("gpu_share", ["--device", "foo", "--quick"]),  # --quick ran it on the CPU instead
    ("cuda_graphs", ["--device", "foo"]),
    ("cuda_graphs", ["--device", "foo", "--quick"]),
]


@pytest.mark.parametrize(
    "name, argv", DEVICE_FOO, ids=[f"{n}:{' '.join(a)}" for n, a in DEVICE_FOO]
)
def test_an_unknown_device_is_refused_in_one_line_before_anything_runs(name, argv, capsys):
    assert late_refusal(capsys, name, argv) == "--device: unknown device 'foo'; use cpu or cuda[:N]"


def test_more_cores_than_the_process_may_use_are_refused_in_one_line(capsys):
    cores = len(os.sched_getaffinity(0)) + 1
    said = late_refusal(capsys, "fusion", ["--quick", "--device", "cpu", "--cores", str(cores)])
    assert said == f"--cores {cores}: this process may use {cores - 1} core(s)"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal where there is no GPU")
@pytest.mark.parametrize("name", ["peers", "gpu_share", "cuda_graphs"])
def test_cuda_without_a_gpu_is_refused_in_one_line_even_with_quick(name, capsys):
    """--quick no longer turns an explicit --device cuda into the CPU (gpu_share, cuda_graphs)."""
    assert late_refusal(capsys, name, ["--device", "cuda", "--quick"]) == (
        "--device: device cuda asked for, but torch sees no CUDA device; use cpu"
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal where there is no GPU")
@pytest.mark.parametrize("name", ["gpu_share", "cuda_graphs"])
def test_the_cuda_default_without_a_gpu_names_the_cpu_ways_to_run(name, capsys):
    """Run bare, as the README lists them: nobody asked for cuda, so the message says it is the
    default and names the flags that run the benchmark on a CPU."""
    said = late_refusal(capsys, name, [])
    assert said.startswith("--device: ") and "on cuda by default" in said, said
    assert "give --device cpu" in said and "or --quick" in said and "asked for" not in said


@pytest.mark.parametrize("name", ["gpu_share", "cuda_graphs"])
def test_quick_runs_on_the_cpu_unless_a_device_is_given(name):
    bench = load(name)
    assert bench.parse_args([]).device == "cuda"
    assert bench.parse_args(["--quick"]).device == "cpu"  # the plumbing, on any machine
    assert bench.parse_args(["--quick", "--device", "cuda:1"]).device == "cuda:1"
    assert bench.parse_args(["--device", "cpu"]).device == "cpu"


SCRIPTS = sorted(p.stem for p in (ROOT / "benchmarks").glob("[a-z]*.py"))


@pytest.mark.parametrize("name", SCRIPTS)
def test_help_describes_the_script_in_whole_sentences(capsys, name):
    """moo_search --help cut its question after its first line ("... front, and")."""
    module = load(name)
    with pytest.raises(SystemExit) as stop:
        (getattr(module, "parse_args", None) or module.main)(["--help"])
    assert stop.value.code == 0
    help_text = capsys.readouterr().out
    description = " ".join(help_text.split("\n\n")[1].split())
    assert description.endswith((".", "?")), description
    first = " ".join(module.__doc__.split("\n\n")[0].split())
    assert description == first


@pytest.mark.parametrize(
    "name, given",
    [
        ("cuda_graphs", {"--repeats": ("9", "repeats", 9)}),
        ("gpu_share", {"--rounds": ("4", "rounds", 4)}),
        ("train_speed", {"--repeats": ("7", "repeats", 7)}),
        (
            "fusion",
            {
                "--repeats": ("5", "repeats", 5),
                "--preset": ("paper_copy", "presets", ["paper_copy"]),
            },
        ),
    ],
)
def test_quick_keeps_an_option_given_and_sets_the_rest(name, given):
    """--quick fills in its smoke settings where the command line leaves the default: cuda_graphs,
    gpu_share and train_speed overwrote an option given with it, as fusion did not."""
    bench = load(name)
    flags = [x for flag, (text, _, _) in given.items() for x in (flag, text)]
    args = bench.parse_args(["--quick", *flags])
    for _, key, value in given.values():
        assert getattr(args, key) == value
    others = {k: v for k, v in bench.QUICK.items() if k not in {k for _, k, _ in given.values()}}
    assert others and all(getattr(args, k) == v for k, v in others.items())
