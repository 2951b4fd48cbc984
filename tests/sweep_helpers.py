"""Small sweep files, and a deterministic Ctrl-C of a launcher, for the tests that run real sweeps
(test_sweep.py, test_study.py, test_cluster.py, test_address.py). Their local Ray is conftest's
``local_ray``."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

TESTS = Path(__file__).resolve().parent
SECRET = "wandb-key-that-must-never-be-written-0123456789"


def base_spec(**over: Any) -> dict[str, Any]:
    """A copy-task sweep of three cells (no attention; memory K=2 and K=4), ten steps a trial, for
    the sweep-file checks; ``over`` replaces top-level keys."""
    spec = {
        "name": "t",
        "task": {"name": "copy", "max_length": 5, "train_size": 64, "val_size": 16},
        "model": {"preset": "tiny"},
        "grid": {"model": [{"attention": "none"}, {"attention": "memory", "K": [2, 4]}]},
        "trainer": {"max_steps": 10},
    }
    spec.update(over)
    return spec


def spec_error(raw: dict[str, Any], **kwargs: Any) -> str:
    """The one-line message :func:`sweeps.spec.build_sweep` refuses ``raw`` with."""
    import pytest

    from sweeps.spec import SpecError, build_sweep

    with pytest.raises(SpecError) as info:
        build_sweep(raw, source="x.yaml", **kwargs)
    message = str(info.value)
    assert "\n" not in message, "one line"
    return message


def tiny_spec(name: str, **over: Any) -> dict[str, Any]:
    """A two-cell copy-task study that trains in seconds; top-level keys in ``over`` replace its own.
    The decode-timing stage is off (each timed trial costs a fresh process, ~4 s), and so is the
    held-out stage (a Ray task per chosen trial): the tests of each stage turn it on. One trial at a
    time: Tune reuses the finished trial's process for the next, where two at once would start a
    second trial actor importing torch and Lightning (~5 CPU-s, more than the trial's training);
    the tests of trials running side by side ask for ``max_concurrent_trials=2``. No attention
    heatmaps: a trial draws them for its W&B run in its own process (~1 CPU-s a trial); the
    end-to-end sweep and the fused sweep draw them, and tests/sweeps/trial checks them."""
    spec: dict[str, Any] = {
        "name": name,
        "task": {
            "name": "copy",
            "max_length": 4,
            "train_size": 256,
            "val_size": 16,
            "batch_size": 16,
        },
        "model": {"preset": "tiny"},
        "grid": {"model": [{"attention": "none"}, {"attention": "memory", "K": 4}]},
        "trainer": {"max_steps": 20, "val_check_interval": 10},
        "resources": {"cpu": 1},
        "wandb": {"project": "test", "tags": ["pytest"], "log_heatmaps": False},
        "timing": {"enabled": False},
        "heldout": {"enabled": False},
        "max_concurrent_trials": 1,
    }
    spec.update(over)
    return spec


def write_spec(tmp_path: Path, spec: dict[str, Any]) -> Path:
    path = tmp_path / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def result_steps(trial_dir: Path) -> list[int]:
    """The steps a trial reported, from its result.json."""
    lines = (trial_dir / "result.json").read_text().splitlines()
    return [json.loads(line)["step"] for line in lines if line.strip()]


def interrupt_env(
    exp: Path, step: int, subprocess: bool = False, finished: int = 1, signal: str = "SIGINT"
) -> dict[str, str]:
    """Environment variables under which a launcher's Tune run gets a real SIGINT (Ctrl-C) the
    moment a trial of the sweep in ``exp`` reports ``step`` while ``finished`` other trials have
    finished (:mod:`interrupt_hook`, which Tune itself loads: no polling, no race). ``subprocess``:
    for a launcher started as its own process, which must find the hook's module too."""
    env = {
        "RAY_TUNE_CALLBACKS": "interrupt_hook.InterruptAtStep",
        "INTERRUPT_AT_STEP": str(step),
        "INTERRUPT_RECORD": str(exp.parent / f"{exp.name}.interrupted.json"),
        "INTERRUPT_AFTER_FINISHED": str(finished),
        "INTERRUPT_SIGNAL": signal,
    }
    if subprocess:
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(TESTS), os.environ.get("PYTHONPATH")) if p
        )
    return env


def interrupted_trials(exp: Path) -> tuple[Path, Path]:
    """(the finished trial's folder, the interrupted one's) of a sweep run under :func:`interrupt_env`."""
    record = exp.parent / f"{exp.name}.interrupted.json"
    assert record.exists(), "the interrupt hook never fired"
    seen = json.loads(record.read_text())
    (finished,) = (d for d in exp.iterdir() if d.name.startswith(seen["finished"][0] + "_"))
    (running,) = (d for d in exp.iterdir() if d.name.startswith(seen["running"] + "_"))
    return finished, running


def _wandb_inspect(run: Path, *flags: str) -> str:
    shown = subprocess.run(
        [str(Path(sys.executable).parent / "wandb"), "leet", "inspect", *flags, "--json", str(run)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return shown.stdout


def wandb_read(run: Path) -> dict:
    """An offline W&B run as W&B's own client reads it (``wandb leet inspect --summary --json``)."""
    return json.loads(_wandb_inspect(run, "--summary"))


def wandb_run_record(run: Path) -> dict:
    """The run record of an offline W&B run (config, tags, notes), as W&B's own reader prints it
    (``wandb leet inspect --json``, one record a line)."""
    records = [json.loads(line) for line in _wandb_inspect(run).splitlines() if line.strip()]
    return next(r["run"] for r in records if r.get("type") == "run")


#: the planning functions a launch runs once (:mod:`sweeps.plan`), by the file that defines each
PLANNING = {
    "build_plan": "sweeps/plan/sweep_plan.py",
    "plan_warm_start": "sweeps/plan/warm_start.py",
    "sweep_units": "sweeps/plan/units.py",
    "plan_fusion": "sweeps/plan/fusion.py",
    "plan_mps": "sweeps/plan/mps.py",
    "sweep_folders": "sweeps/plan/folders.py",
    "launch_lines": "sweeps/plan/estimate.py",
}


@contextlib.contextmanager
def counting_calls():
    """Profiles this process while the block runs; yields ``calls(functions)``: how many times
    each of ``functions`` (name -> the file defining it, relative to the repository) was called,
    however it was reached (an import by name, a module attribute, a method)."""
    import cProfile
    import pstats

    profile = cProfile.Profile()
    stats: list[pstats.Stats] = []

    def calls(functions: dict[str, str]) -> dict[str, int]:
        counted = dict.fromkeys(functions, 0)
        for (path, _, name), row in stats[0].stats.items():
            if name in functions and path.endswith(functions[name]):
                counted[name] += row[1]  # primitive calls: a recursion counts once
        return counted

    profile.enable()
    try:
        yield calls
    finally:
        profile.disable()
        stats.append(pstats.Stats(profile))


def done_row(
    model: str, attention: str, k: int | None, length: int, seed: int, **figures: Any
) -> dict[str, Any]:
    """One finished trial of a hand-made study, as results.csv holds it (its cell named after the
    length and the model), with ``figures`` (BLEU, decode seconds, ...)."""
    return {
        "cell": f"length={length} {model}",
        "model": model,
        "attention": attention,
        "K": k,
        "length": length,
        "seed": seed,
        "status": "done",
        **figures,
    }


def stub_trial():
    """A Tune trial as Tune's controller holds it, without a Ray instance (Tune's own stub mode)."""
    # Ray's Tune (seconds to import): only the tests that build a trial pay for it
    from ray.tune import PlacementGroupFactory
    from ray.tune.experiment import Trial

    trial = Trial(
        "run_trial",
        config={"cell": "c", "seed": 0},
        stub=True,
        placement_group_factory=PlacementGroupFactory([{"CPU": 1}]),
    )
    trial.create_placement_group_factory()
    return trial
