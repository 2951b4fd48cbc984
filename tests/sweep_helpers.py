"""Small sweep files for the tests that run real sweeps (test_sweep.py, test_cluster.py)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

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
