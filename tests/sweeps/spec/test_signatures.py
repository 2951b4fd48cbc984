"""The on-disk signature cache (sweeps/spec/signatures.py): a dry run after the first reads the
model and data packages' signatures from disk, imports neither torch nor Lightning, and still
rejects every bad value it rejected before."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sweeps.spec.signatures import source_key

ROOT = Path(__file__).resolve().parents[3]

# In a fresh process: load each spec, report what it raised and whether torch/Lightning got imported.
PROBE = r"""
import json, sys
from sweeps.spec import SpecError, load_spec
out = []
for path in sys.argv[1:]:
    try:
        load_spec(path)
        error = None
    except SpecError as exc:
        error = str(exc)
    out.append({"error": error, "torch": "torch" in sys.modules, "lightning": "lightning" in sys.modules})
print(json.dumps(out))
"""


def spec_file(tmp_path: Path, name: str, variants=None, **model) -> str:
    spec = {
        "name": name,
        "task": {"name": "copy", "max_length": 5, "train_size": 64, "val_size": 16},
        "model": {"preset": "tiny", **model},
        "grid": {
            "model": variants or [{"attention": "none"}, {"attention": "memory", "K": [2, 4]}]
        },
        "trainer": {"max_steps": 10},
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def probe(cache: Path, *specs: str) -> list[dict]:
    env = {**os.environ, "SWEEPS_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *specs],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.train
def test_second_dry_run_reads_signatures_from_disk_and_still_rejects_bad_values(tmp_path):
    cache = tmp_path / "cache"
    good = spec_file(tmp_path, "good")
    dot = spec_file(
        tmp_path, "dot", variants=[{"attention": "luong_dot"}]
    )  # H=64 != D=128 on the tiny model
    bad_lr = spec_file(tmp_path, "lr", lr=-0.003)
    bad_k = spec_file(tmp_path, "k", variants=[{"attention": "memory", "K": 0}])
    cold = probe(cache, good, dot)
    assert cold[0]["error"] is None and cold[0]["torch"]  # the first run reads the packages
    assert len(list(cache.glob("signatures-*.pkl"))) == 1

    warm = probe(cache, good, dot, bad_lr, bad_k)
    assert [w["torch"] or w["lightning"] for w in warm] == [False] * 4
    assert warm[0]["error"] is None
    assert (
        "luong_dot" in warm[1]["error"] and warm[1]["error"] == cold[1]["error"]
    )  # the cached check
    assert "model.lr" in warm[2]["error"] and "> 0" in warm[2]["error"]
    assert "grid.model[0].K: 0 is out of range" in warm[3]["error"] and ">= 1" in warm[3]["error"]


@pytest.mark.train
def test_a_damaged_cache_file_is_rebuilt(tmp_path):
    cache = tmp_path / "cache"
    good = spec_file(tmp_path, "good")
    probe(cache, good)
    (pkl,) = cache.glob("signatures-*.pkl")
    pkl.write_bytes(b"not a pickle")
    assert probe(cache, good)[0]["error"] is None
    assert pkl.read_bytes() != b"not a pickle"


def test_the_key_follows_the_source(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "a.py").write_text("def f(x: int = 1): ...\n")
    before = source_key([pkg])
    assert source_key([pkg]) == before
    (pkg / "a.py").write_text("def f(x: int = 2): ...\n")
    assert source_key([pkg]) != before
    (pkg / "a.py").write_text("def f(x: int = 1): ...\n")
    (pkg / "b.py").write_text("\n")
    assert source_key([pkg]) != before
    assert source_key([pkg], ("torch==1",)) != source_key([pkg], ("torch==2",))


@pytest.mark.train
def test_headline_options_are_read_from_the_cache_without_torch(tmp_path):
    """Results, tables and plots ask each mechanism's headline option (memory attention's K) through
    the cache: a warm cache answers without importing torch."""
    cache = tmp_path / "cache"
    probe(cache, spec_file(tmp_path, "good"))
    script = (
        "import json, sys; from sweeps.spec.signatures import headline_options; "
        "print(json.dumps([headline_options()['memory'], 'torch' in sys.modules]))"
    )
    env = {**os.environ, "SWEEPS_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [["K", "memory vectors", 32], False]
