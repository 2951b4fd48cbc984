"""Small sweep files and a local Ray for the tests that run real sweeps (test_sweep.py,
test_study.py, test_cluster.py); test modules import the fixture by name."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

SECRET = "wandb-key-that-must-never-be-written-0123456789"


def tiny_spec(name: str, **over: Any) -> dict[str, Any]:
    """A two-cell copy-task study that trains in seconds; top-level keys in ``over`` replace its own."""
    spec: dict[str, Any] = {
        "name": name,
        "task": {"name": "copy", "max_length": 4, "train_size": 256, "val_size": 16, "batch_size": 16},
        "model": {"preset": "tiny"},
        "grid": {"model": [{"attention": "none"}, {"attention": "memory", "K": 4}]},
        "trainer": {"max_steps": 20, "val_check_interval": 10},
        "resources": {"cpu": 1},
        "wandb": {"project": "test", "tags": ["pytest"]},
    }
    spec.update(over)
    return spec


def write_spec(tmp_path: Path, spec: dict[str, Any]) -> Path:
    path = tmp_path / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.fixture(scope="module")
def local_ray():
    """A private local Ray for one test module (never another engineer's or a test cluster)."""
    import ray

    saved = dict(os.environ)
    os.environ.update(WANDB_MODE="offline", WANDB_SILENT="true", RAY_USAGE_STATS_ENABLED="0")
    ray.init(address="local", num_cpus=2, include_dashboard=False, object_store_memory=80 * 2**20, log_to_driver=False)
    yield ray
    ray.shutdown()
    # ray.init and the launcher set variables (RAY_AUTH_MODE, WANDB_MODE...) that would leak into
    # Ray instances later tests start in this process
    os.environ.clear()
    os.environ.update(saved)
