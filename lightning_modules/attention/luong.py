"""Luong et al. (2015) global attention: the dot, general and concat content scores, and the
location-based score computed from the decoder state alone."""
from __future__ import annotations

from typing import Annotated

import torch
from annotated_types import Ge
from torch import nn

from .base import Attention, register_attention
from .functional import masked_softmax


class _ContentAttention(Attention):
    """Shared step of the content-based Luong scores: softmax over the real positions, then the
    weighted sum of the memory. Subclasses provide ``_keys`` (source-only, precomputed) and
    ``_scores``."""

    def _keys(self, memory: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _scores(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def precompute(self, memory: torch.Tensor, mask: torch.Tensor):
        return {"memory": memory, "mask": mask, "keys": self._keys(memory)}

    def step(self, query, cache, state, need_weights=False):
        scores = self._scores(query, cache["keys"])  # (B, S)
        weights = masked_softmax(scores, cache["mask"])  # (B, S)
        ctx = torch.einsum("bs,bsd->bd", weights, cache["memory"])  # (B, D)
        return ctx, state, weights if need_weights else None


@register_attention("luong_dot")
class LuongDotAttention(_ContentAttention):
    """score_j = q^T s_j. Needs H == D (no parameters to bridge the two sizes): with a
    bidirectional encoder (D = 2 x units per direction) build the encoder unidirectional, or use
    luong_general, whose q^T W s_j is exactly a projected dot product."""

    equal_sizes = True

    def __init__(self, query_dim: int, memory_dim: int) -> None:
        if query_dim != memory_dim:
            raise ValueError(
                f"luong_dot scores q^T s_j, so the decoder size must equal the encoder size; got "
                f"query_dim={query_dim}, memory_dim={memory_dim}. Make them equal (a bidirectional "
                "encoder gives D = 2 x hidden_size: set bidirectional=false), or use luong_general "
                "(q^T W s_j), which maps between the two sizes."
            )
        super().__init__(query_dim, memory_dim)

    def _keys(self, memory):
        return memory  # (B, S, D)

    def _scores(self, query, keys):
        return torch.einsum("bsd,bd->bs", keys, query)  # (B, S)


@register_attention("luong_general")
class LuongGeneralAttention(_ContentAttention):
    """score_j = q^T W s_j, with W s_j precomputed (B, S, H)."""

    def __init__(self, query_dim: int, memory_dim: int) -> None:
        super().__init__(query_dim, memory_dim)
        self.W = nn.Linear(memory_dim, query_dim, bias=False)

    def _keys(self, memory):
        return self.W(memory)  # (B, S, H)

    def _scores(self, query, keys):
        return torch.einsum("bsh,bh->bs", keys, query)  # (B, S)


@register_attention("luong_concat")
class LuongConcatAttention(_ContentAttention):
    """score_j = v^T tanh(W [q; s_j]). W = [W_q | W_s] is kept as its two halves so the memory
    half W_s s_j is precomputed; the hidden width is H."""

    def __init__(self, query_dim: int, memory_dim: int) -> None:
        super().__init__(query_dim, memory_dim)
        self.W_q = nn.Linear(query_dim, query_dim, bias=False)
        self.W_s = nn.Linear(memory_dim, query_dim, bias=False)
        self.v = nn.Linear(query_dim, 1, bias=False)

    def _keys(self, memory):
        return self.W_s(memory)  # (B, S, H)

    def _scores(self, query, keys):
        hidden = torch.tanh(keys + self.W_q(query)[:, None, :])  # (B, S, H)
        return self.v(hidden).squeeze(-1)  # (B, S)


@register_attention("luong_location")
class LuongLocationAttention(Attention):
    """score = W_a h_t over positions 1..max_source_len, cut to the sentence and renormalised
    over its real positions. The source content is used only for the weighted sum.

    Args:
        query_dim: size H of the decoder state.
        memory_dim: size D of the encoder states.
        max_source_len: longest source the score layer covers; a longer source raises.
    """

    def __init__(self, query_dim: int, memory_dim: int, max_source_len: Annotated[int, Ge(1)] = 256) -> None:
        super().__init__(query_dim, memory_dim)
        self.max_source_len = max_source_len
        self.W_a = nn.Linear(query_dim, max_source_len)

    def precompute(self, memory: torch.Tensor, mask: torch.Tensor):
        if memory.shape[1] > self.max_source_len:
            raise ValueError(
                f"luong_location scores at most max_source_len={self.max_source_len} positions, but "
                f"the source has {memory.shape[1]}; build it with a larger max_source_len or filter "
                "longer sentences out of the data."
            )
        return {"memory": memory, "mask": mask}

    def step(self, query, cache, state, need_weights=False):
        S = cache["mask"].shape[1]
        scores = self.W_a(query)[:, :S]  # (B, S)
        weights = masked_softmax(scores, cache["mask"])  # (B, S)
        ctx = torch.einsum("bs,bsd->bd", weights, cache["memory"])  # (B, D)
        return ctx, state, weights if need_weights else None
