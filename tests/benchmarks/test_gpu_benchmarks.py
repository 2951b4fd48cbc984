"""The GPU tests and benchmarks in one run (benchmarks/gpu_benchmarks.py) and its benchmarks
(cuda_graphs.py, gpu_share.py), run here in their CPU forms: the plumbing that a few minutes of
GPU time must not be spent on. No figure of these runs means anything (no graph is captured on a CPU); what is checked
is that each phase runs, reports one JSON line and keeps to its time, and that the MPS phase puts
its benchmark under a daemon (the stand-in of tests/mps_helpers.py: this machine has no NVIDIA
driver) and stops it afterwards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mps_helpers import install_fake_mps, mps_calls

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_benchmarks.py"


def run_script(tmp_path: Path, *args: str, mps: bool = False) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUDA_MPS")}
    if mps:
        log = install_fake_mps(tmp_path / "bin")
        env.update(PATH=f"{tmp_path / 'bin'}{os.pathsep}{env['PATH']}", FAKE_MPS_LOG=str(log))
    else:
        env["PATH"] = os.pathsep.join(
            d
            for d in env["PATH"].split(os.pathsep)
            if not (Path(d) / "nvidia-cuda-mps-control").exists()
        )
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path / "out"), *args], env=env, cwd=ROOT,
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


def test_an_output_folder_it_cannot_write_is_refused_before_any_phase(tmp_path):
    """--out under a file passed the plan and stopped the run at its first write, a traceback."""
    (tmp_path / "afile").write_text("")
    for extra in (["--dry-run"], ["--phases", "environment"]):
        out = subprocess.run(
            [sys.executable, str(SCRIPT), "--out", str(tmp_path / "afile" / "x"), *extra],
            cwd=ROOT, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
        assert f"argument --out: {tmp_path / 'afile' / 'x'}: cannot create or write there" in (
            out.stderr
        )


def test_the_plan_names_every_phase_and_what_it_needs(tmp_path):
    lines = run_script(tmp_path, "--dry-run")
    assert not (tmp_path / "out").exists(), "the dry run made its --out folder"
    by = {line["phase"]: line for line in lines}
    assert list(by) == ["environment", "cuda_graphs", "gpu_tests", "share", "share_mps",
                        "fusion", "peers", "all"]  # fmt: skip
    assert by["cuda_graphs"]["cmd"] == "python benchmarks/cuda_graphs.py --device cuda --repeats 3"
    assert by["share_mps"]["cmd"].startswith(
        "python -m sweeps.driver.mps run --want required --dir /tmp/memattn-mps-bench -- "
        "python benchmarks/gpu_share.py"
    )
    assert by["share_mps"]["skipped"] == "no nvidia-cuda-mps-control on this machine's PATH"
    assert (
        "--device cuda --preset paper_copy --lengths 40 --members 1 4 16 --repeats 3 --graphs"
        in (by["fusion"]["cmd"])
    )
    if not (ROOT / "benchmarks" / "fusion.py").exists():
        assert by["fusion"]["skipped"] == "benchmarks/fusion.py is not in this checkout"
    # every phase within 15 minutes of GPU time, less a machine's start (about 30 s on the H100)
    assert sum(line.get("limit_s", 0) for line in lines) <= 780
    assert by["all"]["phases_run"] == 0
    # the module's two calls (its docstring) each fit their budget
    first = ["environment", "cuda_graphs", "gpu_tests", "share", "share_mps"]
    for budget, names in (("470", first), ("310", ["fusion", "peers"])):
        split = run_script(tmp_path, "--dry-run", "--budget", budget, "--phases", *names)
        assert not any("may_not_fit" in line for line in split), split


def test_the_plan_says_which_phases_a_budget_may_not_reach(tmp_path):
    """The dry run printed every phase alike whatever ``--budget`` was: a device run planned
    with too small a budget found out only as the phases were skipped on the GPU."""
    lines = run_script(
        tmp_path, "--dry-run", "--budget", "200", "--phases", "environment", "cuda_graphs", "share"
    )
    by = {line["phase"]: line for line in lines}
    assert "may_not_fit" not in by["environment"] and "may_not_fit" not in by["cuda_graphs"]
    assert by["share"]["may_not_fit"] == (
        "if the phases before it take their limits (120 s), 80 s of the budget (200 s) are left "
        "for its 150 s, and it is skipped"
    )
    # a phase that would be skipped takes no time: the next one that fits still runs
    lines = run_script(
        tmp_path,
        "--dry-run",
        "--budget",
        "200",
        "--phases",
        "environment",
        "cuda_graphs",
        "share",
        "peers",
    )
    by = {line["phase"]: line for line in lines}
    assert "may_not_fit" in by["share"] and "may_not_fit" not in by["peers"], by


@pytest.mark.train  # runs the benchmarks, 20 s
def test_the_phases_run_on_a_cpu_with_mps_put_around_a_benchmark(tmp_path):
    lines = run_script(
        tmp_path, "--device", "cpu", "--phases", "environment", "cuda_graphs", "share_mps", mps=True
    )
    by = {line["phase"]: line for line in lines}
    assert [line["phase"] for line in lines] == [
        "environment",
        "cuda_graphs",
        "share_mps",
        "all",
    ]
    for name in ("environment", "cuda_graphs", "share_mps"):
        assert by[name]["rc"] == 0 and not by[name]["timed_out"], by[name]
    assert by["environment"]["summary"]["torch"].startswith("2.")
    assert by["environment"]["summary"]["mps_control"].endswith("nvidia-cuda-mps-control")
    graphs = by["cuda_graphs"]["summary"]
    assert set(graphs["speedup"]) == {"tiny/L6"} and graphs["steps"]["tiny/L6"]["graphs"] == 0
    share = by["share_mps"]["summary"]
    assert share["mps"] is True
    assert set(share["speedup"]) == {f"tiny/{m}/P{p}" for m in ("eager", "graphed") for p in (1, 2)}
    assert [c.split()[0] for c in mps_calls(tmp_path / "mps-calls.log")] == ["start", "quit"]
    text = (tmp_path / "out" / "share_mps.out").read_text()
    full = json.loads([line for line in text.splitlines() if line.startswith("{")][-1])
    assert full["benchmark"] == "gpu_share" and full["mps_pipe"].endswith("/pipe")


def test_a_phase_past_its_budget_is_skipped_and_said(tmp_path):
    lines = run_script(tmp_path, "--device", "cpu", "--phases", "environment", "--budget", "5")
    assert lines[0]["skipped"] == "its 30 s no longer fit the budget (5 s)"
