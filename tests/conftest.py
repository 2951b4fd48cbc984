"""Shared pytest fixtures. Keep this file generic: other test files add their own fixtures here."""
from __future__ import annotations

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
