"""The two benchmark scripts run end to end in a tiny configuration and write their CSVs."""

from __future__ import annotations

import csv
import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest
import torch

from lightning_modules.seq2seq import Seq2Seq

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def load(name: str):
    """Import benchmarks/<name>.py as a module (the folder is scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def test_decode_speed_tiny_run_writes_csv_png_and_ratios(tmp_path, capsys):
    bench = load("decode_speed")
    mechanisms = ["none", "memory:K=4", "bahdanau", "luong", "local", "monotonic"]
    argv = [
        "--mechanisms",
        *mechanisms,
        "--lengths",
        "4",
        "7",
        "--preset",
        "tiny",
        "--batch",
        "2",
        "--beam",
        "3",
        "--repeats",
        "1",
        "--warmup",
        "0",
        "--output",
        str(tmp_path),
        "--silent",
    ]
    paths = bench.main(argv)
    rows = read_csv(paths["csv"])
    assert {"mechanism", "length", "mode", "seconds"} <= set(rows[0])
    assert len(rows) == len(mechanisms) * 2 * 2
    assert {(r["mechanism"], int(r["length"]), r["mode"]) for r in rows} == {
        (m, L, mode) for m in mechanisms for L in (4, 7) for mode in ("greedy", "beam")
    }
    # one timed run per cell (--repeats 1): the median and the fastest run are that run; per step: over L + 1 steps
    assert all(
        int(r["repeats"]) == 1 and r["seconds"] == r["min_seconds"] and float(r["seconds"]) > 0
        for r in rows
    )
    assert all(
        float(r["per_step_ms"])
        == pytest.approx(1000 * float(r["seconds"]) / int(r["steps"]), abs=1e-3)
        for r in rows
    )
    assert all(int(r["steps"]) == int(r["length"]) + 1 for r in rows)
    assert paths["png"].stat().st_size > 0
    out = capsys.readouterr().out
    assert (
        "machine:" in out and "time / no-attention time" in out and "bahdanau / memory:K=4" in out
    )
    # the headline ratios are each cell's seconds over the right baseline's, same mode and length
    seconds = {(r["mechanism"], int(r["length"]), r["mode"]): float(r["seconds"]) for r in rows}
    ratios = bench.ratio_rows(
        [{**r, "length": int(r["length"]), "seconds": float(r["seconds"])} for r in rows]
    )
    assert {(r["numerator"], r["denominator"]) for r in ratios} == {
        ("memory:K=4", "none"),
        ("bahdanau", "memory:K=4"),
    }
    assert len(ratios) == 2 * 2 * 2  # two ratios x two lengths x two modes
    for r in ratios:
        expected = (
            seconds[(r["numerator"], r["length"], r["mode"])]
            / seconds[(r["denominator"], r["length"], r["mode"])]
        )
        assert r["ratio"] == pytest.approx(expected)
    assert "Headline ratios" in out and "beam 3, L=7" in out


def test_decode_speed_plot_titles_the_beam_panel_with_the_beam_rows_size(tmp_path, monkeypatch):
    """The greedy rows come first (beam 1): the beam panel read its size from them."""
    bench = load("decode_speed")
    titles = []

    def keep_titles(fig, path):
        titles.extend(ax.get_title() for ax in fig.axes)
        bench.pyplot_or_none().close(fig)

    monkeypatch.setattr(bench, "save_png", keep_titles)
    rows = [
        {"mechanism": m, "length": L, "mode": mode, "seconds": 0.01 * L, "beam": beam}
        for mode, beam in (("greedy", 1), ("beam", 10))
        for m in ("none", "memory:K=4")
        for L in (4, 8)
    ]
    bench.plot(rows, tmp_path / "decode_speed.png")
    assert titles == ["greedy decoding", "beam decoding (beam 10)"]


def test_decode_speed_mechanism_specs():
    bench = load("decode_speed")
    assert bench.parse_mechanism("memory:K=32,position_encoding=true") == (
        "memory",
        {"K": 32, "position_encoding": True},
    )
    assert bench.parse_mechanism("luong")[0] == "luong_general"
    assert bench.parse_mechanism("local")[0] == "local_p"
    assert bench.parse_mechanism("monotonic") == ("monotonic", {"score_bias_init": 0.0})


@pytest.mark.parametrize("attention", ["none", "memory", "bahdanau", "monotonic"])
def test_min_len_forces_the_same_number_of_steps(attention):
    """With min_len = max_len every mechanism decodes exactly max_len steps (what the benchmark times)."""
    model = Seq2Seq(12, 12, attention=attention, max_source_len=6).eval()
    with torch.no_grad():  # make EOS the favourite token, so without min_len decoding stops at once
        model.decoder.out.bias[2] = 50.0
    src = torch.randint(4, 12, (3, 6))
    src_lengths = torch.full((3,), 6)
    tokens, lengths = model.greedy_decode(src, src_lengths, max_len=9)
    assert lengths.tolist() == [1, 1, 1]
    tokens, lengths = model.greedy_decode(src, src_lengths, max_len=9, min_len=9)
    assert tokens.shape == (3, 9) and not (tokens[:, :-1] == 2).any()
    beams = model.beam_search(src, src_lengths, beam_size=3, max_len=9, min_len=9)
    assert beams.shape == (3, 9) and not (beams[:, :-1] == 2).any()


def test_attention_step_tiny_run_writes_csv(tmp_path, capsys):
    bench = load("attention_step")
    argv = [
        "--sources",
        "5",
        "12",
        "--targets",
        "3",
        "6",
        "--batch",
        "2",
        "--dim",
        "16",
        "--K",
        "4",
        "--repeats",
        "1",
        "--warmup",
        "0",
        "--output",
        str(tmp_path),
        "--silent",
    ]
    paths = bench.main(argv)
    rows = read_csv(paths["csv"])
    assert {"mechanism", "S", "T", "seconds", "speedup_vs_softmax"} <= set(rows[0])
    assert {(r["mechanism"], int(r["S"]), int(r["T"])) for r in rows} == {
        (m, S, T) for m in ("softmax", "monotonic", "memory") for S in (5, 12) for T in (3, 6)
    }
    softmax = {
        (int(r["S"]), int(r["T"])): float(r["seconds"]) for r in rows if r["mechanism"] == "softmax"
    }
    for r in rows:  # each speed-up is the same cell's softmax time over this mechanism's time
        expected = softmax[(int(r["S"]), int(r["T"]))] / float(r["seconds"])
        assert float(r["speedup_vs_softmax"]) == pytest.approx(expected, rel=2e-3, abs=2e-3)
    assert paths["png"].stat().st_size > 0
    assert "softmax time / monotonic time" in capsys.readouterr().out


def test_attention_step_names_memory_k_only_when_memory_attention_ran(tmp_path, capsys):
    bench = load("attention_step")
    tiny = ["--sources", "4", "--targets", "3", "--batch", "2", "--dim", "8", "--K", "4"]
    tiny += ["--repeats", "1", "--warmup", "0", "--silent"]
    for mechanisms, said in [(["softmax", "monotonic"], False), (["softmax", "memory"], True)]:
        out = tmp_path / "-".join(mechanisms)
        paths = bench.main([*tiny, "--mechanisms", *mechanisms, "--output", str(out)])
        settings = capsys.readouterr().out.splitlines()[1]  # under the machine's line
        assert settings.startswith("batch 2, H = D = 8") and ("memory K = 4" in settings) is said
        assert ("memory K = 4" in paths["md"].read_text()) is said


def test_attention_step_square_prints_the_s_equals_t_table(tmp_path, capsys):
    bench = load("attention_step")
    argv = [
        "--square",
        "5",
        "9",
        "--batch",
        "2",
        "--dim",
        "16",
        "--K",
        "4",
        "--repeats",
        "1",
        "--warmup",
        "0",
        "--output",
        str(tmp_path),
        "--silent",
    ]
    rows = read_csv(bench.main(argv)["csv"])
    assert {(int(r["S"]), int(r["T"])) for r in rows} == {(5, 5), (9, 9)}  # only S = T cells
    table = bench.square_table(
        [
            {
                **r,
                "S": int(r["S"]),
                "T": int(r["T"]),
                "seconds": float(r["seconds"]),
                "speedup_vs_softmax": float(r["speedup_vs_softmax"]),
            }
            for r in rows
        ]
    )
    assert list(table.index) == [5, 9]
    assert {
        "softmax ms",
        "monotonic ms",
        "memory ms",
        "softmax / monotonic",
        "softmax / memory",
    } <= set(table.columns)
    for S in (5, 9):
        assert table.loc[S, "softmax / monotonic"] == pytest.approx(
            table.loc[S, "softmax ms"] / table.loc[S, "monotonic ms"], rel=2e-3, abs=2e-3
        )
    assert "S = T" in capsys.readouterr().out


def test_benchmarks_pin_to_one_core_while_running_and_give_the_cores_back(tmp_path, capsys):
    import os

    before = os.sched_getaffinity(0)
    bench = load("attention_step")
    bench.main(
        [
            "--sources",
            "4",
            "--targets",
            "3",
            "--mechanisms",
            "softmax",
            "memory",
            "--repeats",
            "1",
            "--warmup",
            "0",
            "--threads",
            "1",
            "--output",
            str(tmp_path),
            "--silent",
        ]
    )
    header = capsys.readouterr().out.splitlines()[0]
    assert header.endswith(f"pinned to CPU {max(before)}") or len(before) == 1, header
    assert os.sched_getaffinity(0) == before, "the test process keeps all its cores afterwards"


def test_train_speed_quick_prints_one_json_line_with_steps_peaks_and_ratios(capsys):
    bench = load("train_speed")
    result = bench.main(["--quick"])
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and json.loads(out[0]) == result, "stdout holds the JSON line alone"
    assert {"machine", "load", "settings", "rows", "ratios"} <= set(result)
    rows = {(r["mechanism"], r["length"]): r for r in result["rows"]}
    assert set(rows) == {(m, L) for m in ("none", "memory:K=32", "bahdanau") for L in (4, 8)}
    for r in rows.values():
        assert r["step_seconds"] > 0 and r["tokens_per_second"] > 0 and r["peak_mb"] > 0
        tokens = 4 * (r["length"] + 1)  # a batch of 4 sentences of L symbols and EOS
        assert r["tokens_per_second"] == pytest.approx(tokens / r["step_seconds"], rel=1e-3)
    assert {(q["length"], q["ratio"]) for q in result["ratios"]} == {
        (L, name) for L in (4, 8) for name in ("memory:K=32/none", "bahdanau/memory:K=32")
    }


@pytest.mark.train
def test_fusion_quick_prints_one_json_line_of_finite_speedups(capsys):
    bench = load("fusion")
    result = bench.main(["--quick", "--members", "1", "3", "--attention", "bahdanau"])
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and json.loads(out[0]) == result, "stdout holds the JSON line alone"
    assert {"speedup", "rows", "machine", "torch", "device", "load", "settings"} <= set(result)
    assert set(result["speedup"]) == {"tiny/L6/M1", "tiny/L6/M3"}
    assert result["settings"]["attention"] == "bahdanau"
    assert result["torch"] == torch.__version__ and result["device"] == "cpu"
    assert result["machine"]["line"].startswith("machine:")
    for row in result["rows"]:
        ratio = result["speedup"][row["cell"]]
        assert math.isfinite(ratio) and ratio > 0 and ratio == row["speedup"]
        assert row["unfused_step_seconds"] > 0 and row["fused_step_seconds"] > 0
        assert math.isfinite(row["cpu_time_speedup"]) and row["cpu_time_speedup"] > 0
        assert row["fused_member_steps_per_unit_second"] == pytest.approx(
            row["members"] / row["fused_step_seconds"], rel=1e-2
        )  # one process on one core: M member-steps per fused step


@pytest.mark.train
def test_fusion_mixed_cell_compares_one_padded_group_with_one_group_per_shape(capsys):
    bench = load("fusion")
    result = bench.main(["--quick", "--mixed", "--mixed-k", "1", "4", "--mixed-seeds", "2"])
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and json.loads(out[0]) == result, "stdout holds the JSON line alone"
    assert set(result["speedup"]) == {"tiny/L6/mixed8"}
    assert result["settings"]["mixed_k"] == [1, 4] and result["settings"]["mixed_seeds"] == 2
    (row,) = result["rows"]
    assert row["members"] == 8 and row["shapes"] == 4  # 2 K x 2 scoring pairs, 2 seeds each
    assert math.isfinite(row["speedup"]) and row["speedup"] > 0
    assert row["speedup"] == result["speedup"][row["cell"]]
    # one process on one core: 8 member-steps per step of the mixed group, and per round of the
    # four shape groups
    assert row["mixed_member_steps_per_unit_second"] == pytest.approx(
        8 / row["mixed_step_seconds"], rel=1e-2
    )
    assert row["by_shape_member_steps_per_unit_second"] == pytest.approx(
        8 / row["by_shape_round_seconds"], rel=1e-2
    )


@pytest.mark.train
def test_fusion_graphs_time_each_fused_group_graphed_too(capsys):
    """--graphs adds each fused group stepped by GraphedFusedSteps (on a CPU, its eager form):
    the graphed step the plan's cost table reads (``fused_graphed_step_seconds``), its ratio to
    the same M trials, and to one trial alone."""
    result = load("fusion").main(["--quick", "--graphs"])
    assert result["settings"]["graphs"] is True
    assert set(result["graphed_speedup"]) == set(result["speedup"]) == {"tiny/L6/M1", "tiny/L6/M2"}
    for row in result["rows"]:
        assert row["fused_graphed_step_seconds"] > 0
        assert row["fused_graphed_member_steps_per_unit_second"] == pytest.approx(
            row["members"] / row["fused_graphed_step_seconds"], rel=1e-2
        )
        assert row["graphed_speedup"] == result["graphed_speedup"][row["cell"]] > 0
        assert row["graphed_over_one_trial"] == result["graphed_over_one_trial"][row["cell"]] > 0
    with pytest.raises(SystemExit):
        load("fusion").main(["--quick", "--graphs", "--precision", "bf16-mixed"])
    assert "float32" in capsys.readouterr().err


def test_fusion_mixed_cell_refuses_what_it_cannot_build(capsys):
    with pytest.raises(SystemExit):
        load("fusion").main(["--mixed", "--mixed-scoring", "softmax", "--quick"])
    assert "encoder/decoder pairs" in capsys.readouterr().err


def test_fusion_names_the_mechanisms_it_takes_when_given_another(capsys):
    with pytest.raises(SystemExit):
        load("fusion").main(["--attention", "bahdanou", "--quick"])
    said = capsys.readouterr().err
    assert "--attention 'bahdanou': one of" in said and "bahdanau" in said


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal where there is no GPU")
def test_fusion_refuses_cuda_without_a_gpu(capsys):
    with pytest.raises(SystemExit) as stop:
        load("fusion").main(["--device", "cuda", "--quick"])
    assert stop.value.code == 2 and "error: --device: " in capsys.readouterr().err


@pytest.mark.parametrize("name", ["decode_speed", "attention_step", "sweep_scale", "moo_search"])
def test_an_output_folder_that_cannot_be_written_is_refused_before_the_benchmark_runs(
    tmp_path, capsys, name
):
    """decode_speed --output <a file> measured everything, then lost it to a FileExistsError."""
    bench = load(name)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(SystemExit) as stop:
        bench.main(["--output", str(blocker / "out")])
    assert stop.value.code == 2
    assert f"{blocker} is a file, not a folder" in capsys.readouterr().err


def test_sweep_scale_turns_a_finished_study_into_its_row_and_results_csv(tmp_path, monkeypatch):
    """After its trials, sweep_scale turns the result grid into results.csv rows (``result_rows``,
    which returns the rows and the trials' plans) and its per-trial figures. Here the study's
    Tune run is replaced by the results its stand-in trials report (no Ray started)."""
    from ray.tune import Checkpoint, Result

    import sweeps.driver.cluster as cluster
    import sweeps.stages.train as train
    from sweeps.driver.cluster import ClusterFit

    bench = load("sweep_scale")

    def finished(plan, settings, fit, resume, verbose, trainable_fn):
        """One finished trial per planned trial, each with a stand-in trial's last report."""
        grid = []
        for i, trial in enumerate(plan.sweep.plans):
            config = trial.trial_config(plan.sweep.grid_columns)
            folder = tmp_path / "n10" / plan.sweep.name / f"trial_{i}"
            (folder / "checkpoint_000000").mkdir(parents=True)
            (folder / "checkpoint_000000" / "checkpoint.ckpt").write_bytes(b"x")
            (folder / "result.json").write_text("{}\n")
            metrics = {
                "val/bleu": float(settings.plan(config).model["K"]), "val/loss": 1.0,
                "val/token_acc": 0.5, "val/decode_seconds": 0.01, "step": 10, "epoch": 0,
                "train_time_s": 0.1, "node_id": f"node{i % 2}", "gpu_ids": "", "config": config,
            }  # fmt: skip
            checkpoint = Checkpoint.from_directory(str(folder / "checkpoint_000000"))
            grid.append(
                Result(metrics=metrics, checkpoint=checkpoint, error=None, path=str(folder))
            )
        return grid

    monkeypatch.setattr(train, "run_tune", finished)
    monkeypatch.setattr(cluster, "check_cluster", lambda *a, **k: ClusterFit(0.5, None))
    monkeypatch.setattr(cluster, "describe_cluster", lambda: "4 nodes (simulated)")
    row = bench.run_one(10, tmp_path / "n10")
    assert row["trials"] == 10 and row["nodes_used"] == 2 and row["bytes_per_trial"] > 0
    assert row["cluster"] == "4 nodes (simulated)" and row["seconds_per_trial"] > 0
    written = read_csv(tmp_path / "n10" / "scale10" / "results.csv")
    assert len(written) == 10 and {r["status"] for r in written} == {"done"}


def test_moo_search_judges_on_arrival_when_asked():
    """The README's figures judged on arrival come from `--promotion immediate`: the study the
    script launches must carry it (it had no way to set it)."""
    from sweeps.spec import build_sweep

    moo = load("moo_search")
    for promotion in ("wait", "immediate"):
        sweep = build_sweep(moo.study(True, 3, promotion), source="moo_search")
        assert sweep.spec.early_terminate.promotion == promotion
