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
