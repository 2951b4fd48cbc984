"""Shared pytest fixtures. Keep this file generic: other test files add their own fixtures here.

- ``quiet_trainer``: a Lightning Trainer on CPU that logs, checkpoints and prints nothing.
"""
from __future__ import annotations

from typing import Any

import pytest
import torch


@pytest.fixture(scope="session", autouse=True)
def _single_thread_torch():
    """One intra-op thread: the test machine's few cores are shared."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(autouse=True)
def _seed_torch():
    """Each test starts from the same torch seed."""
    torch.manual_seed(0)


def pytest_collection_modifyitems(config, items):
    """Run the multi-node cluster tests before any other test that starts Ray in this process.

    Ray 2.60 cannot join a ``ray.cluster_utils.Cluster`` from a process that already ran and shut
    down a local instance: the new GCS takes the old driver's exit for its own driver's and kills
    every actor it creates ("Actor may be already destroyed"). The reverse order works.
    """
    items.sort(key=lambda item: 0 if item.nodeid.startswith("tests/test_cluster.py") else 1)


# ----------------------------------------------------------------------------------------------
# A quiet Trainer


def _quiet_trainer(**kwargs: Any):
    """``pl.Trainer`` on one CPU device with no logger, no checkpoints, no progress bar and no
    model summary; ``kwargs`` add to or replace these."""
    import lightning.pytorch as pl

    settings: dict[str, Any] = dict(
        accelerator="cpu", devices=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False,
    )
    settings.update(kwargs)
    return pl.Trainer(**settings)


@pytest.fixture(scope="session")
def quiet_trainer():
    """``quiet_trainer(max_steps=3, ...)``: a Lightning Trainer that logs, saves and prints nothing
    (session-scoped, so module-scoped fixtures can use it too)."""
    return _quiet_trainer
