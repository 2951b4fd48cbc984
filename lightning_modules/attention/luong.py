"""Luong et al. (2015) global attention: the dot, general and concat content scores, and the
location-based score computed from the decoder state alone."""

from __future__ import annotations

from typing import Annotated

import torch
from annotated_types import Ge
from torch import nn

from datamodules.ranges import check_ranges

from .base import Attention, beam_groups, register_attention
from .functional import check_positions, masked_softmax


def _attend(query: torch.Tensor, scores: torch.Tensor, cache, need_weights: bool):
    """Softmax over each sentence's real positions and the weighted sum of its memory.

    Args:
        query: (N, H), N = Bc * G rows; scores: (Bc, G, S) for the G query rows of each sentence.
    Returns:
        ctx (N, D) and weights (N, S) or None.
    """
    weights = masked_softmax(scores, cache["mask"].unsqueeze(1))  # (Bc, G, S)
    ctx = torch.bmm(weights, cache["memory"]).view(query.shape[0], -1)  # (N, D)
    return ctx, weights.view(query.shape[0], -1) if need_weights else None  # (N, S)


class _ContentAttention(Attention):
    """Shared step of the content-based Luong scores: softmax over the real positions, then the
    weighted sum of the memory. Subclasses provide ``_keys`` (source-only, precomputed) and
    ``_scores``."""

    shares_cache = True

    def _keys(self, memory: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _scores(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """query (Bc, G, H) and keys (Bc, S, X) -> scores (Bc, G, S)."""
        raise NotImplementedError

    def precompute(self, memory: torch.Tensor, mask: torch.Tensor):
        return {"memory": memory, "mask": mask, "keys": self._keys(memory)}

    def step(self, query, cache, state, need_weights=False):
        keys = cache["keys"]  # (Bc, S, X), shared by the G beams of each sentence
        Bc, G = keys.shape[0], beam_groups(query, keys.shape[0])
        scores = self._scores(query.view(Bc, G, -1), keys)  # (Bc, G, S)
        ctx, weights = _attend(query, scores, cache, need_weights)
        return ctx, state, weights


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
                "encoder gives D = 2 x hidden_size: a unidirectional one, bidirectional=False, or "
                "bidirectional: false in a sweep file, gives D = hidden_size), or use luong_general "
                "(q^T W s_j), which maps between the two sizes."
            )
        super().__init__(query_dim, memory_dim)

    def _keys(self, memory):
        return memory  # (B, S, D)

    def _scores(self, query, keys):
        return torch.einsum("bsd,bgd->bgs", keys, query)  # (Bc, G, S)


@register_attention("luong_general")
class LuongGeneralAttention(_ContentAttention):
    """score_j = q^T W s_j, with W s_j precomputed (B, S, H)."""

    def __init__(self, query_dim: int, memory_dim: int) -> None:
        super().__init__(query_dim, memory_dim)
        self.W = nn.Linear(memory_dim, query_dim, bias=False)

    def _keys(self, memory):
        return self.W(memory)  # (B, S, H)

    def _scores(self, query, keys):
        return torch.einsum("bsh,bgh->bgs", keys, query)  # (Bc, G, S)


@register_attention("luong_concat")
class LuongConcatAttention(_ContentAttention):
    """score_j = v^T tanh(W [q; s_j]). W = [W_q | W_s] is kept as its two halves so the memory
    half W_s s_j is precomputed; the hidden width is H.

    In this project's one decoder, where every mechanism is queried with the same state, this is
    Bahdanau's score with ``attention_dim`` = H, and its layers have the same shapes and are made
    in the same order: under one seed it is the same model as ``bahdanau``, weight for weight, and
    trains to the same figures. Luong et al.'s concat differs from Bahdanau's attention only in
    the decoder around it. A result "luong_concat matches bahdanau" holds by construction."""

    def __init__(self, query_dim: int, memory_dim: int) -> None:
        super().__init__(query_dim, memory_dim)
        self.W_q = nn.Linear(query_dim, query_dim, bias=False)
        self.W_s = nn.Linear(memory_dim, query_dim, bias=False)
        self.v = nn.Linear(query_dim, 1, bias=False)

    def _keys(self, memory):
        return self.W_s(memory)  # (B, S, H)

    def _scores(self, query, keys):
        # in place: one (Bc, G, S, H) temporary per step, not two (see BahdanauAttention.step)
        hidden = (keys.unsqueeze(1) + self.W_q(query).unsqueeze(2)).tanh_()  # (Bc, G, S, H)
        return self.v(hidden).squeeze(-1)  # (Bc, G, S)


@register_attention("luong_location")
class LuongLocationAttention(Attention):
    """score = W_a h_t over positions 1..max_source_len, cut to the sentence and renormalised
    over its real positions. The source content is used only for the weighted sum.

    Args:
        query_dim: size H of the decoder state.
        memory_dim: size D of the encoder states.
        max_source_len: longest source the score layer covers; a longer source raises.
        bias: give W_a a bias (a learned prior over positions that no decoder state moves).
            Luong's eq. 8 has none; versions up to 0.1.0 had one, so their checkpoints load with
            ``attention_kwargs={"bias": True}``.
    """

    def __init__(
        self,
        query_dim: int,
        memory_dim: int,
        max_source_len: Annotated[int, Ge(1)] = 256,
        bias: bool = False,
    ) -> None:
        super().__init__(query_dim, memory_dim)
        check_ranges(LuongLocationAttention.__init__, locals(), owner="luong_location attention")
        self.max_source_len = max_source_len
        self.W_a = nn.Linear(query_dim, max_source_len, bias=bias)

    @property
    def longest_source(self) -> int:
        """``max_source_len``: the score layer has one output per position."""
        return self.max_source_len

    def precompute(self, memory: torch.Tensor, mask: torch.Tensor):
        check_positions(mask, self.max_source_len, "luong_location scores at most")
        return {"memory": memory, "mask": mask}

    shares_cache = True

    def step(self, query, cache, state, need_weights=False):
        Bc, S = cache["mask"].shape
        G = beam_groups(query, Bc)
        scores = self.W_a(query)[:, :S]
        if S > self.max_source_len:  # padding past the layer's positions: masked out
            scores = nn.functional.pad(scores, (0, S - self.max_source_len))
        scores = scores.reshape(Bc, G, S)  # (Bc, G, S)
        ctx, weights = _attend(query, scores, cache, need_weights)
        return ctx, state, weights
