"""benchmarks/peers.py --quick prints one JSON line with the keys the lead quotes: the project alone
always, and against JoeyNMT and OpenNMT-py when they are installed (requirements/peers.txt)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "peers.py"
SYSTEM_KEYS = {"available", "params", "train", "greedy_s", "beam_s", "greedy_cpu_s", "beam_cpu_s"}
TOP_KEYS = {
    "benchmark",
    "machine",
    "settings",
    "systems",
    "ratios",
    "ratios_cpu_time",
    "unavailable",
    "differences",
    "loadavg",
    "ceilings",
}


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_peers", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def run_quick(capsys, systems: list[str]) -> dict:
    bench = load_bench()
    bench.main(["--quick", "--warmup", "0", "--systems", *systems])
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1, out  # ONE JSON line on stdout; the tables go to stderr
    return json.loads(out[0])


def check_system(result: dict, name: str) -> None:
    system = result["systems"][name]
    assert SYSTEM_KEYS <= set(system), set(system)
    assert system["available"] and system["params"] > 0
    lengths = result["settings"]["lengths"]
    assert set(system["train"]) == {str(L) for L in lengths}
    for cell in system["train"].values():
        assert cell["s_per_step"] > 0 and cell["tokens_per_s"] > 0 and cell["cpu_s_per_step"] > 0
        assert cell["gflop_per_step"] > cell["gflop_lstm_added"] >= 0
        if not name.endswith(":bf16"):  # the products at the best fp32 rate: under the step
            assert 0 < cell["floor_s_per_step"] < cell["s_per_step"]
            assert cell["gflops"] < result["machine"]["gemm_gflops"]
    assert system["greedy_s"] > 0 and system["beam_s"] > 0


@pytest.mark.train  # trains the project's model
def test_a_quick_run_prints_the_json_line_and_names_a_peer_that_cannot_be_imported(
    capsys, monkeypatch, tmp_path
):
    """The project (and its bf16 variant where the CPU has native bf16) timed, a peer whose import
    fails named in the JSON line and on stderr, and the rest still run: one run of the script."""
    hidden = tmp_path / "joeynmt"
    hidden.mkdir()
    (hidden / "__init__.py").write_text("raise ImportError('joeynmt hidden by the test')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # the children's imports see it first
    bench = load_bench()
    bench.main(["--quick", "--warmup", "0", "--systems", "project", "project:bf16", "joeynmt"])
    captured = capsys.readouterr()
    out = captured.out.strip().splitlines()
    assert len(out) == 1, out  # ONE JSON line on stdout; the tables go to stderr
    result = json.loads(out[0])
    assert TOP_KEYS <= set(result)
    assert result["benchmark"] == "peers" and result["settings"]["quick"]
    check_system(result, "project")
    assert set(result["differences"]) == {"joeynmt"}  # a peer's, never the project's own variant
    assert "hidden by the test" in result["unavailable"]["joeynmt"]
    assert result["systems"]["joeynmt"]["available"] is False
    assert "joeynmt: NOT AVAILABLE" in captured.err
    assert "joeynmt" not in result["ratios"]
    machine = result["machine"]
    if machine["avx512_bf16"] or machine["amx_bf16"]:  # native bf16: the variant is timed
        check_system(result, "project:bf16")
        keys = {f"train_L{L}" for L in result["settings"]["lengths"]} | {"greedy", "beam"}
        assert set(result["ratios"]) == {"project:bf16"}
        assert set(result["ratios"]["project:bf16"]) == keys  # its seconds / the project's
        assert set(result["unavailable"]) == {"joeynmt"}
    else:  # e.g. an AVX2-only EPYC: oneDNN has no bf16 LSTM, so the variant is named, not run
        assert set(result["unavailable"]) == {"project:bf16", "joeynmt"}
        assert "AVX512_BF16 nor AMX-BF16" in result["unavailable"]["project:bf16"]
        assert result["systems"]["project:bf16"]["available"] is False
        assert result["ratios"] == {}
    assert {"cpu", "avx512_bf16", "amx_bf16", "torch"} <= set(result["machine"])
    assert Path(result["systems"]["project"]["source"]) == BENCH.parents[1]  # this checkout's model


@pytest.mark.skipif(
    importlib.util.find_spec("joeynmt") is None or importlib.util.find_spec("onmt") is None,
    reason="JoeyNMT / OpenNMT-py not installed: pip install --no-deps -r requirements/peers.txt",
)
def test_quick_run_against_the_peers(capsys):
    result = run_quick(capsys, ["project", "joeynmt", "opennmt"])
    assert result["unavailable"] == {}, result["unavailable"]
    for name in ("project", "joeynmt", "opennmt"):
        check_system(result, name)
    keys = {f"train_L{L}" for L in result["settings"]["lengths"]} | {"greedy", "beam"}
    for peer in ("joeynmt", "opennmt"):
        assert set(result["ratios"][peer]) == keys
        assert set(result["ratios_cpu_time"][peer]) == keys
        assert result["differences"][peer]  # what its options cannot make the same is named
        # the best ratio the project's floor allows is above the one it measured
        ceiling = result["ceilings"][f"{peer} / project floor"]
        assert set(ceiling) == {f"train_L{L}" for L in result["settings"]["lengths"]}
        assert all(ceiling[k] > result["ratios"][peer][k] for k in ceiling)
    assert result["systems"]["opennmt"]["params"] < result["systems"]["project"]["params"]


def test_the_bf16_variant_is_refused_only_on_a_cpu_without_native_bf16():
    import torch

    bench = load_bench()
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    avx2 = {"cpu": "AMD EPYC", "avx512_bf16": False, "amx_bf16": False}
    reason = bench.precision_refusal("project:bf16", cpu, avx2)
    assert "AVX512_BF16 nor AMX-BF16" in reason and "--device cuda" in reason
    assert bench.precision_refusal("project", cpu, avx2) is None  # fp32 runs anywhere
    assert bench.precision_refusal("project:bf16", cuda, avx2) is None  # the GPU decides there
    assert bench.precision_refusal("project:bf16", cpu, avx2 | {"avx512_bf16": True}) is None
    assert bench.precision_refusal("project:bf16", cpu, avx2 | {"amx_bf16": True}) is None
