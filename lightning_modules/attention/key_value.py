"""Key-value (dot-product) attention with learned query, key and value maps."""

from __future__ import annotations

import math
from typing import Annotated

import torch
from annotated_types import Ge
from torch import nn

from datamodules.ranges import check_ranges

from .base import Attention, beam_groups, register_attention
from .functional import masked_softmax


@register_attention("key_value")
class KeyValueAttention(Attention):
    """alpha = softmax_j((W_K s_j)^T (W_Q h) / sqrt(d_k)); ctx = sum_j alpha_j W_V s_j.

    Scaled by 1/sqrt(d_k) by default (Vaswani et al.'s scaled dot product, keeping the scores'
    spread independent of d_k); ``scaled=False`` leaves them unscaled.

    The maps have no bias, so ``ctx == W_V(sum_j alpha_j s_j)`` exactly, and a fully masked row
    (all alpha zero) gives a zero context.

    Args:
        query_dim: size H of the decoder state.
        memory_dim: size D of the encoder states.
        key_dim: d_k, the size of keys and queries (default D).
        value_dim: size of the values, hence of the context (default D).
        scaled: divide the scores by sqrt(d_k).
    """

    def __init__(
        self,
        query_dim: int,
        memory_dim: int,
        key_dim: Annotated[int, Ge(1)] | None = None,
        value_dim: Annotated[int, Ge(1)] | None = None,
        scaled: bool = True,
    ) -> None:
        super().__init__(query_dim, memory_dim)
        check_ranges(KeyValueAttention.__init__, locals(), owner="key_value attention")
        self.key_dim = memory_dim if key_dim is None else key_dim
        self.value_dim = memory_dim if value_dim is None else value_dim
        self.query_proj = nn.Linear(query_dim, self.key_dim, bias=False)  # W_Q
        self.key_proj = nn.Linear(memory_dim, self.key_dim, bias=False)  # W_K
        self.value_proj = nn.Linear(memory_dim, self.value_dim, bias=False)  # W_V
        self.scale = 1 / math.sqrt(self.key_dim) if scaled else 1.0

    shares_cache = True

    @property
    def context_dim(self) -> int:
        return self.value_dim

    def precompute(self, memory: torch.Tensor, mask: torch.Tensor):
        return {
            "keys": self.key_proj(memory),  # (B, S, d_k)
            "values": self.value_proj(memory),  # (B, S, d_v)
            "mask": mask,
        }

    def step(self, query, cache, state, need_weights=False):
        keys = cache["keys"]  # (Bc, S, d_k), shared by the G beams of each sentence
        Bc, G = keys.shape[0], beam_groups(query, keys.shape[0])
        q = self.query_proj(query).view(Bc, G, -1)  # (Bc, G, d_k)
        scores = torch.einsum("bsk,bgk->bgs", keys, q) * self.scale  # (Bc, G, S)
        weights = masked_softmax(scores, cache["mask"].unsqueeze(1))  # (Bc, G, S)
        ctx = torch.bmm(weights, cache["values"]).view(query.shape[0], -1)  # (N, d_v)
        return ctx, state, weights.view(query.shape[0], -1) if need_weights else None  # (N, S)
