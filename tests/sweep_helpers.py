"""Small sweep files for the tests that run real sweeps (test_sweep.py, test_study.py,
test_cluster.py, test_address.py). Their local Ray is conftest's ``local_ray``."""
from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

SECRET = "wandb-key-that-must-never-be-written-0123456789"


def tiny_spec(name: str, **over: Any) -> dict[str, Any]:
    """A two-cell copy-task study that trains in seconds; top-level keys in ``over`` replace its own.
    The decode-timing stage is off (each timed trial costs a fresh process, ~4 s): the tests of
    the stage itself turn it on."""
    spec: dict[str, Any] = {
        "name": name,
        "task": {"name": "copy", "max_length": 4, "train_size": 256, "val_size": 16, "batch_size": 16},
        "model": {"preset": "tiny"},
        "grid": {"model": [{"attention": "none"}, {"attention": "memory", "K": 4}]},
        "trainer": {"max_steps": 20, "val_check_interval": 10},
        "resources": {"cpu": 1},
        "wandb": {"project": "test", "tags": ["pytest"]},
        "timing": {"enabled": False},
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


def interrupt_after_one_finishes(proc: subprocess.Popen, exp: Path, last_step: int, timeout: float) -> tuple[Path, Path, str]:
    """Wait until one trial of the launcher ``proc`` reported ``last_step`` while another has
    reported twice, then SIGINT the launcher (exit 130). Returns (finished, running, its output)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        dirs = [p.parent for p in exp.glob("*/result.json")] if exp.exists() else []
        steps = {d: result_steps(d) for d in dirs}
        done = [d for d in dirs if steps[d] and steps[d][-1] == last_step]
        live = [d for d in dirs if d not in done and len(steps[d]) >= 2]
        if done and live:
            proc.send_signal(signal.SIGINT)
            log = proc.communicate(timeout=120)[0]
            assert proc.returncode == 130, log
            return done[0], live[0], log
        time.sleep(0.5)
    proc.kill()
    pytest.fail("the first trial never finished; launcher output:\n" + proc.communicate()[0][-4000:])
