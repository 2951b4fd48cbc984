"""Bahdanau (additive) attention: score_j = v^T tanh(W_q q + W_k s_j)."""

from __future__ import annotations

from typing import Annotated

import torch
from annotated_types import Ge
from torch import nn

from datamodules.ranges import check_ranges

from .base import Attention, beam_groups, register_attention
from .functional import masked_softmax


@register_attention("bahdanau")
class BahdanauAttention(Attention):
    """Additive attention (Bahdanau et al. 2015). The key projection W_k s is source-only, so
    ``precompute`` does it once; a step costs one (H x A) projection plus O(S*A).

    Args:
        query_dim: size H of the decoder state.
        memory_dim: size D of the encoder states.
        attention_dim: width A of the hidden scoring layer (default: H).
    """

    def __init__(
        self, query_dim: int, memory_dim: int, attention_dim: Annotated[int, Ge(1)] | None = None
    ) -> None:
        super().__init__(query_dim, memory_dim)
        check_ranges(BahdanauAttention.__init__, locals(), owner="bahdanau attention")
        self.attention_dim = query_dim if attention_dim is None else attention_dim
        self.query_proj = nn.Linear(query_dim, self.attention_dim, bias=False)  # W_q
        self.key_proj = nn.Linear(memory_dim, self.attention_dim, bias=False)  # W_k
        self.v = nn.Linear(self.attention_dim, 1, bias=False)

    shares_cache = True

    def precompute(self, memory: torch.Tensor, mask: torch.Tensor):
        return {"memory": memory, "mask": mask, "keys": self.key_proj(memory)}  # keys (B, S, A)

    def step(self, query, cache, state, need_weights=False):
        keys = cache["keys"]  # (Bc, S, A), shared by the G beams of each sentence
        Bc, G = keys.shape[0], beam_groups(query, keys.shape[0])
        q = self.query_proj(query).view(Bc, G, 1, -1)  # (Bc, G, 1, A)
        # in place: one (Bc, G, S, A) temporary per step instead of two (in beam search it is the
        # step's largest tensor, and freeing two at once lets the allocator hand them back to the
        # OS, so that every step page-faults its memory in again: 1.5x slower at beam 10, L=50)
        hidden = (keys.unsqueeze(1) + q).tanh_()  # (Bc, G, S, A)
        scores = self.v(hidden).squeeze(-1)  # (Bc, G, S)
        weights = masked_softmax(scores, cache["mask"].unsqueeze(1))  # (Bc, G, S)
        ctx = torch.bmm(weights, cache["memory"]).view(query.shape[0], -1)  # (N, D)
        return ctx, state, weights.view(query.shape[0], -1) if need_weights else None  # (N, S)
