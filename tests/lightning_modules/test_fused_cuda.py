"""Fused trials on a CUDA GPU: every registered mechanism's fused steps there give what they give
on the CPU (same weights and batches: losses, weights, Adam state), and bf16-mixed trains.

Marked ``gpu`` and skipped where torch sees no CUDA device: run on a GPU machine with
``python -m pytest -m gpu tests/lightning_modules/test_fused_cuda.py``."""

from __future__ import annotations

import pytest
import torch
from test_fused import CASES, CLIP, IDS, TOL, batches_for, make_module

from lightning_modules.fused import FusedSeq2Seq

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def on(device: str, batches: list[dict]) -> list[dict]:
    return [{k: v.to(device) for k, v in b.items()} for b in batches]


@pytest.mark.parametrize("attention, options", CASES, ids=IDS)
def test_fused_steps_on_cuda_equal_those_on_cpu(attention, options):
    groups = {
        device: FusedSeq2Seq.from_modules(
            [make_module(attention, options, m) for m in range(3)], clip=list(CLIP)
        ).to(device)
        for device in ("cpu", "cuda")
    }
    for step in range(2):
        batches = batches_for(step, range(3))
        losses = {d: g.train_step(on(d, batches)).cpu() for d, g in groups.items()}
        torch.testing.assert_close(losses["cuda"], losses["cpu"], **TOL)
    for i in range(3):
        cpu, cuda = groups["cpu"].member_module(i), groups["cuda"].member_module(i)
        assert next(cuda.parameters()).is_cuda
        for name, value in cpu.state_dict().items():
            torch.testing.assert_close(cuda.state_dict()[name].cpu(), value, **TOL, msg=name)
        mine, theirs = groups["cuda"].optimizer_state(i), groups["cpu"].optimizer_state(i)
        for index, state in theirs["state"].items():
            for key in ("exp_avg", "exp_avg_sq"):
                torch.testing.assert_close(mine["state"][index][key].cpu(), state[key], **TOL)


def test_bf16_mixed_trains_on_cuda():
    fused = FusedSeq2Seq.from_modules(
        [make_module("memory", {"K": 4}, m) for m in range(2)], precision="bf16-mixed"
    ).to("cuda")
    before = fused.flat.data.clone()
    losses = fused.train_step(on("cuda", batches_for(0, range(2))))
    assert losses.is_cuda and torch.isfinite(losses).all()
    assert not torch.equal(fused.flat.data, before)
