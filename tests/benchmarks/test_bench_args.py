"""The benchmark scripts refuse a bad command line in one line (argparse's ``usage:`` and
``script: error: ...``, exit 2) while reading it, before anything is measured: unknown mechanisms,
mechanism options and presets, counts below 1, negative warm-ups, a budget of no seconds, a data
folder without its files, a sweep file that is missing or wrong. Nothing here measures."""

from __future__ import annotations

from pathlib import Path

import pytest
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
    ("peers", ["--warmup", "-1"], "argument --warmup: must be at least 0, got -1"),
    ("peers", ["--lengths", "0"], f"argument --lengths: {AT_LEAST_1}"),
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
