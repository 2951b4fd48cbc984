"""Whether a sweep's trials want an MPS daemon (NVIDIA's Multi-Process Service) under them: the
plan's part of the decision, from ``resources.mps`` and the GPU share each trial holds. Whether the
node has one, and starting it, is the driver's (:mod:`sweeps.driver.mps`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Want = Literal["no", "yes", "required"]


@dataclass(frozen=True)
class MpsPlan:
    """What a sweep wants of MPS: ``no``; ``yes`` where the node can (``auto``); ``required``
    (``on``: a node without MPS is an error). ``reason`` says why, for the console."""

    want: Want
    reason: str


def per_gpu(share: float) -> int:
    """How many processes holding ``share`` of a GPU each Ray places on one GPU: the whole shares
    that fit (``1 // 0.2`` is 4.0 in floating point; Ray counts in fixed decimals and fits 5)."""
    return max(1, int(1 / share + 1e-9)) if 0 < share < 1 else 1


def plan_mps(mode: str, gpu: float) -> MpsPlan:
    """The sweep's part of the decision: ``resources.mps`` and the GPUs each trial holds."""
    if mode == "off":
        return MpsPlan("no", "resources.mps is off")
    if gpu <= 0:
        return MpsPlan("no", "the trials use no GPU (resources.gpu 0)")
    if mode == "on":
        return MpsPlan("required", f"resources.mps is on (resources.gpu {gpu:g})")
    if gpu >= 1:
        return MpsPlan("no", f"each trial holds whole GPUs (resources.gpu {gpu:g}): none is shared")
    shares = f"{per_gpu(gpu)} training processes to a GPU, each an unfused trial or a fused group"
    return MpsPlan("yes", f"trials share GPUs (resources.gpu {gpu:g}: {shares})")
