"""The on-disk signature cache (sweeps/spec/signatures.py): a dry run after the first reads the
model and data packages' signatures from disk, imports neither torch nor Lightning, and still
rejects every bad value it rejected before; a damaged cache file is rebuilt."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sweeps.spec.signatures import Signatures, _package_dirs, _versions, source_key

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


def probe(cache: Path, *specs: str, script: str = PROBE) -> list[dict]:
    """``script`` in a fresh process with the signature cache in ``cache``: its last line's JSON."""
    env = {**os.environ, "SWEEPS_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", script, *specs],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.train
def test_a_damaged_cache_is_rebuilt_then_a_dry_run_reads_it_and_rejects_bad_values(tmp_path):
    cache = tmp_path / "cache"
    good = spec_file(tmp_path, "good")
    dot = spec_file(
        tmp_path, "dot", variants=[{"attention": "luong_dot"}]
    )  # H=64 != D=128 on the tiny model
    bad_lr = spec_file(tmp_path, "lr", lr=-0.003)
    bad_k = spec_file(tmp_path, "k", variants=[{"attention": "memory", "K": 0}])
    # the file the first run reads, damaged: it must rebuild it (and not fail)
    key = source_key(_package_dirs(), _versions())
    cache.mkdir()
    pkl = cache / f"signatures-{key}.pkl"
    pkl.write_bytes(b"not a pickle")
    cold = probe(cache, good, dot)
    assert cold[0]["error"] is None and cold[0]["torch"]  # the first run reads the packages
    # one file, the damaged one (a key computed here unlike the probe's would leave two), rebuilt
    assert list(cache.glob("signatures-*.pkl")) == [pkl]
    assert pkl.read_bytes() != b"not a pickle"
    with open(pkl, "rb") as fh:
        rebuilt = pickle.load(fh)
    assert isinstance(rebuilt, Signatures) and rebuilt.key == key

    warm = probe(cache, good, dot, bad_lr, bad_k)
    assert [w["torch"] or w["lightning"] for w in warm] == [False] * 4
    assert warm[0]["error"] is None
    assert (
        "luong_dot" in warm[1]["error"] and warm[1]["error"] == cold[1]["error"]
    )  # the cached check
    assert "model.lr" in warm[2]["error"] and "> 0" in warm[2]["error"]
    assert "grid.model[0].K: 0 is out of range" in warm[3]["error"] and ">= 1" in warm[3]["error"]


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


# In a fresh process: import what a launch imports (the launcher, its stages, the timing stage's
# Ray task, the held-out stage, the trainable it hands Tune) and ask what a launch asks of the
# model package: each trial's expected cost (the order trials start in), whether it can train
# fused, and (for results, tables and plots) each mechanism's headline option.
LAUNCH_PROBE = r"""
import json, sys
import sweeps.launch, sweeps.stages.setup, sweeps.stages.train, sweeps.stages.measure, sweeps.stages.publish
import sweeps.stages.confirm, sweeps.timing.remote, sweeps.heldout.stage, sweeps.trial.trainable
from sweeps.plan.fusion import unfusable
from sweeps.plan.cost import estimated_cost
from sweeps.spec import load_spec
from sweeps.spec.signatures import headline_options, save
sweep = load_spec(sys.argv[1])
answers = [[estimated_cost(p.task, p.model, p.trainer), unfusable(p)] for p in sweep.plans]
save()
print(json.dumps({"answers": answers, "memory": headline_options()["memory"], "torch": "torch" in sys.modules, "lightning": "lightning" in sys.modules}))
"""


@pytest.mark.train
def test_a_launch_orders_and_fuses_trials_from_the_cache_without_torch(tmp_path):
    """The launcher loads neither torch nor Lightning once the cache knows its trials: the
    mechanisms' step costs and their fused forms are asked once and kept, and the answers are the
    model package's own; so is memory attention's headline option (K, 32 by default)."""
    from lightning_modules.attention import step_cost
    from lightning_modules.fused import unfusable_reason

    path = spec_file(
        tmp_path,
        "launch",
        variants=[
            {"attention": "none"},
            {"attention": "memory", "K": [2, 64]},
            {"attention": "monotonic", "mode": "hard"},
        ],
    )
    cold, warm = (probe(tmp_path / "cache", path, script=LAUNCH_PROBE) for _ in range(2))
    assert cold["torch"]  # the first launch asked the package
    assert not warm["torch"] and not warm["lightning"]
    assert warm["answers"] == cold["answers"]
    assert warm["memory"] == ["K", "memory vectors", 32]
    # the package's own answers: steps x length x the mechanism's cost per step, and its reason
    steps, length = 10, 5
    expected_costs = [
        steps * length * step_cost("none"),
        steps * length * step_cost("memory", {"K": 2}),
        steps * length * step_cost("memory", {"K": 64}),
        steps * length * step_cost("monotonic", {"mode": "hard"}),
    ]
    assert [c for c, _ in warm["answers"]] == pytest.approx(expected_costs)
    assert expected_costs[2] > expected_costs[1]  # K moves the cost: the cache keys on options
    reasons = [r for _, r in warm["answers"]]
    assert reasons[:3] == [None, None, None]
    hard = unfusable_reason(
        {
            "attention": "monotonic",
            "attention_kwargs": {"mode": "hard"},
            "src_vocab_size": 1,
            "tgt_vocab_size": 1,
        }
    )
    assert hard is not None and reasons[3] == hard


def test_a_cached_check_answers_only_for_values_of_its_own_type(tmp_path, monkeypatch):
    """Python holds 64.0 equal to 64 and True to 1: an attention check that failed for float sizes
    (a ``hidden_size: 64.0``, before the type check refused it) was served from the cache for the
    integer ones, and every later dry run of the sweep failed inside torch."""
    from sweeps.spec import signatures as sig_module

    monkeypatch.setenv("SWEEPS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(sig_module, "_LOADED", None)
    assert sig_module.attention_problem("memory", {"K": 16}, (64.0, 128.0)) is not None
    assert sig_module.attention_problem("memory", {"K": 16}, (64, 128)) is None
    assert sig_module.attention_problem("memory", {"K": 16.0}, (64, 128)) is not None
    assert sig_module.attention_problem("memory", {"K": 16}, (64, 128)) is None
    assert sig_module.frozen({"position_encoding": True}) != sig_module.frozen(
        {"position_encoding": 1}
    )
    sig_module.save()
    monkeypatch.setattr(sig_module, "_LOADED", None)  # and from the disk cache, in a new process
    assert sig_module.attention_problem("memory", {"K": 16}, (64, 128)) is None
