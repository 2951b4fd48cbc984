"""No attention: the decoder gets a zero context, the sequence-to-sequence baseline."""
from __future__ import annotations

import torch

from .base import Attention, register_attention


@register_attention("none")
class NoAttention(Attention):
    """Returns zeros; costs nothing per step. Weights, if asked for, are all zero."""

    def precompute(self, memory: torch.Tensor, mask: torch.Tensor):
        return {"mask": mask, "zeros": memory.new_zeros(memory.shape[0], memory.shape[2])}  # (B, D)

    def step(self, query, cache, state, need_weights=False):
        weights = cache["mask"].new_zeros(cache["mask"].shape, dtype=query.dtype) if need_weights else None
        return cache["zeros"], state, weights
