"""benchmarks/step_costs.py turns the GPU benchmarks' outputs into the plan's cost table entry of
that GPU. The outputs here are real ones, of gpu_benchmarks.py's phases in their CPU forms
(tests/data/gpu_benchmarks_cpu/); on a GPU the same lines carry the GPU's figures."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import step_costs  # noqa: E402

OUTPUTS = ROOT / "tests" / "data" / "gpu_benchmarks_cpu"


def test_the_entry_holds_each_phase_s_figures_under_the_names_the_plan_reads(tmp_path):
    out = tmp_path / "out"
    shutil.copytree(OUTPUTS, out)
    env = json.loads((out / "environment.out").read_text())
    env["gpu"], env["nvidia_smi"] = "NVIDIA Test GPU", "590.1, Default, 80000 MiB, NVIDIA Test GPU"
    (out / "environment.out").write_text(json.dumps(env) + "\n")
    fusion = json.loads((out / "fusion.out").read_text())
    (out / "fusion.out").write_text(json.dumps({**fusion, "device": "cuda"}) + "\n")
    name, entry = step_costs.device_entry(out, date="2026-11-28")
    assert name == "NVIDIA Test GPU"
    assert entry["measured"].startswith(
        "NVIDIA Test GPU, driver 590.1, torch 2.13.0+cpu, 2026-11-28"
    )
    fusion = json.loads((out / "fusion.out").read_text())
    (cell,) = entry["presets"]["tiny"]["lengths"].values()
    rows = {r["members"]: r for r in fusion["rows"]}
    assert cell["unfused_s"] == rows[1]["unfused_step_seconds"]
    assert cell["fused_s"] == {str(m): r["fused_step_seconds"] for m, r in rows.items()}
    assert cell["graphed_speedup"] > 0
    share = json.loads((out / "share.out").read_text())
    assert cell["shared_eager_timesliced"]["2"] == share["speedup"]["tiny/eager/P2"]
    assert "shared_eager_mps" not in cell  # share_mps did not run: nothing to choose from
    table = tmp_path / "step_costs.json"
    shutil.copy(step_costs.TABLE, table)
    step_costs.write(name, entry, table)
    written = json.loads(table.read_text())["devices"]
    assert written[name] == entry and "cpu" in written and "NVIDIA H100 80GB HBM3" in written


def test_a_run_on_the_cpu_is_not_written_as_a_gpu(tmp_path, capsys):
    """gpu_benchmarks.py --device cpu (its plumbing run) was written as a GPU named after the CPU."""
    with pytest.raises(SystemExit) as info:
        step_costs.device_entry(OUTPUTS)
    assert "ran on the CPU" in str(info.value) and "not a GPU" in str(info.value)


def test_a_second_run_adds_to_the_gpu_s_entry_and_a_run_without_steps_alone_is_refused(tmp_path):
    """The GPU benchmarks run in two calls; a call that measured graphs and sharing but no fused
    step replaced the GPU's entry with one the plan could not cost."""
    table = tmp_path / "step_costs.json"
    shutil.copy(step_costs.TABLE, table)
    before = json.loads(table.read_text())["devices"]["NVIDIA H100 80GB HBM3"]
    graphs = {
        "measured": "NVIDIA H100 80GB HBM3, driver 600.1, 2026-12-01: cuda_graphs.py --device cuda",
        "presets": {"tiny": {"lengths": {"40": {"graphed_speedup": 9.0}}}},
    }
    written = step_costs.write("NVIDIA H100 80GB HBM3", graphs, table)
    cell = written["presets"]["tiny"]["lengths"]["40"]
    assert cell["graphed_speedup"] == 9.0
    assert cell["fused_s"] == before["presets"]["tiny"]["lengths"]["40"]["fused_s"]
    assert written["presets"]["paper_copy"] == before["presets"]["paper_copy"]
    assert written["measured"].startswith(graphs["measured"] + "; the figures this run did not")
    assert before["measured"] in written["measured"]
    assert json.loads(table.read_text())["devices"]["NVIDIA H100 80GB HBM3"] == written
    with pytest.raises(SystemExit) as info:
        step_costs.write("NVIDIA New GPU", graphs, table)
    assert "would hold no training step to cost" in str(info.value)
    assert "NVIDIA New GPU" not in json.loads(table.read_text())["devices"]


def test_a_missing_folder_is_said_with_the_command_that_makes_it(tmp_path, capsys):
    """It said "no GPU named (environment.out and fusion.out are missing)" of a folder that is
    not there."""
    (tmp_path / "a-file").write_text("")
    for out, said in [
        (tmp_path / "nope", f"{tmp_path / 'nope'}: no such folder; the folder comes from"),
        (tmp_path / "a-file", f"{tmp_path / 'a-file'} is a file, not a folder; the folder comes"),
    ]:
        with pytest.raises(SystemExit) as stop:
            step_costs.main([str(out)])
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert stop.value.code == 2 and said in err, err
        assert "python benchmarks/gpu_benchmarks.py --out DIR" in err
