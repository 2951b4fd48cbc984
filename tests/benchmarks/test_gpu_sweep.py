"""benchmarks/gpu_sweep.py: Table 1's gpu profile three ways. The commands it runs (fast), and its
plumbing end to end on this CPU (slow: three launches)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, timeout: int = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "benchmarks/gpu_sweep.py", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def test_the_three_ways_are_eager_alone_graphed_under_mps_and_the_plans(tmp_path):
    a, b, c = run("--out", str(tmp_path), "--dry-run").stdout.splitlines()
    for line in (a, b, c):
        assert "--profile gpu --address local" in line and "heldout.enabled=false" in line
    assert "fusion=off --set resources.gpu=1 --set resources.cpu=1" in a
    assert "grid.task.max_length=[10]" in a  # a fixed subset: one eager trial a GPU is slow
    assert "trainer.cuda_graphs=true --set resources.gpu=0.125 --set resources.cpu=1" in b
    assert "resources.mps=on" in b and "fusion=off" not in c and "resources.gpu" not in c


def test_a_ways_own_overrides_land_on_its_launch_alone(tmp_path):
    a, b, c = run(
        "--out", str(tmp_path), "--dry-run", "--set", "b:budget.hours=0.05",
        "--set", "c:timing.enabled=false",
    ).stdout.splitlines()  # fmt: skip
    assert b.endswith("--set budget.hours=0.05 --verbose 0") and "budget.hours" not in a + c
    assert c.endswith("--set timing.enabled=false --verbose 0")  # after the way's own: it wins
    bad = run("--out", str(tmp_path), "--dry-run", "--set", "d:budget.hours=1")
    assert bad.returncode == 2 and "WAY:KEY=VALUE, WAY one of a, b, c" in bad.stderr
    # a misspelt key reached way a's launch after the other ways' GPU time: refused before any
    typo = run("--out", str(tmp_path), "--dry-run", "--set", "c:trainer.max_step=5")
    assert typo.returncode == 2 and not typo.stdout, typo.stdout
    assert "error: way c: " in typo.stderr and "--set trainer.max_step: unknown key" in typo.stderr
    (tmp_path / "file").write_text("")
    bad = run("--out", str(tmp_path / "file"), "--dry-run")
    assert bad.returncode == 2 and "--out " in bad.stderr and "a file; give a folder" in bad.stderr


@pytest.mark.slow
def test_the_plumbing_runs_on_a_cpu(tmp_path):
    done = run("--out", str(tmp_path), "--quick", "--ways", "a", "c", timeout=900)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    a, c, both = lines
    assert a["done"] == a["trials"] == 7 and c["done"] == 7
    assert c["member_steps"] == 7 * 20 and c["member_steps_per_gpu_second"] > 0
    assert set(both["c_bleu_within_a_seed_spread"]) == set(a["cells"])
