"""benchmarks/_flops.py counts a training step's products, fused LSTM kernels included, each once:
checked against counts done by hand here."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch
from torch import nn

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def load_flops():
    spec = importlib.util.spec_from_file_location("bench_flops", BENCH / "_flops.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_an_lstm_is_counted_once_whichever_kernel_runs_it():
    flops = load_flops()
    torch.manual_seed(0)
    lstm = nn.LSTM(8, 4, num_layers=2, bidirectional=True, batch_first=True)
    x = torch.randn(3, 5, 8, requires_grad=True)  # 15 rows

    def step():
        out, _ = lstm(x)
        out.sum().backward()

    got = flops.step_flops(lstm, step)
    # by hand: per layer and direction 2 * 15 rows * (in + H) * 4H forward, in = 8 for both layers
    # (layer 1 reads the 2 x 4 outputs); backward twice the forward (input and weight gradients)
    forward = 2 * (2 * 15 * (8 + 4) * 16) * 2
    assert got["total"] == 3 * forward
    # the fused CPU kernel is opaque to the counter (added from sizes); a decomposed one is seen
    # op by op (nothing added): never both
    assert (got["counted"], got["lstm_added"]) in ((0, 3 * forward), (3 * forward, 0))


def test_products_the_counter_sees_are_not_added_again():
    flops = load_flops()
    linear = nn.Linear(6, 10, bias=False)
    cell = nn.LSTMCell(10, 4)  # decomposed into products the counter sees
    x = torch.randn(7, 6, requires_grad=True)

    def step():
        h, _ = cell(linear(x))
        h.sum().backward()

    got = flops.step_flops(nn.Sequential(linear, cell), step)
    assert got["lstm_added"] == 0 and got["total"] == got["counted"]
    # by hand: the linear 3 x 2*7*6*10 (forward, input and weight gradients); the cell's input
    # product x W_ih^T the same 3 x 2*7*10*16; its state product h W_hh^T forward and weight
    # gradient only (the zero initial state needs no gradient): 2 x 2*7*4*16
    assert got["total"] == 3 * 2 * 7 * 6 * 10 + 3 * 2 * 7 * 10 * 16 + 2 * 2 * 7 * 4 * 16
