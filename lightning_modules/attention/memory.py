"""Memory attention (Britz, Guan & Luong 2017, "Efficient Attention using a Fixed-Size Memory
Representation"): the source is summarised once into K vectors, so a decoder step is O(K*D)
whatever the source length.

    precompute:  alpha = score_enc(W_alpha s_t)            (B, S, K), 0 at padded t
                 C_k   = sum_t alpha_tk s_t                 (B, K, D)
    step:        beta  = score_dec(W_beta h)                (B, K)
                 c     = sum_k beta_k C_k                   (B, D)

The alignment over source positions, sum_k alpha_tk beta_k, is only formed when asked for
(``need_weights=True`` or ``extra_weights``); the step itself never reads anything of size S.

Reading of the paper's position encodings (eq. 10-11 and the sentence after eq. 10): L is a
(K x S) matrix with L_ks = (1 - k/K)(1 - s/S) + (k/K)(s/S), 1-based, S = ``max_source_len`` (the
longest source the model supports). "The elements of the matrix that fall beyond the sequence
lengths are then masked out and the remaining elements are renormalized across the timestep
dimension": so each sentence of length n gets its own jagged l_ks = L_ks / sum_{s'<=n} L_ks'
for s <= n and 0 beyond (every row sums to 1 over the sentence's real positions). For source
position s the K encoder scores *before* the scoring function are multiplied elementwise by the
column l_s, alpha^PE_s = score_enc(W_alpha h_s o l_s).

Options and defaults:

- ``position_encoding_normalization="sentence"`` (default) is the reading above;
  ``"none"`` multiplies in the un-renormalised columns of L (this project's earlier behaviour,
  kept to compare against: for a 3-token sentence with K=4, S=10 its rows sum to 1.95 / 1.50 /
  1.05 / 0.60 over the real positions).
- ``bias=False`` (default): W_alpha and W_beta are bias-free as in eqs. 5, 7 and 9; ``True``
  adds biases (the earlier behaviour; with position encodings the encoder bias is then scaled by
  l_s too).

Why ``encoder_normalization`` exists: eq. 5 normalises the encoder softmax over K for each
source position ("K", the default), so every source state hands out a unit of mass over the K
slots; C_k is then a *sum* whose scale grows with the sentence length. Normalising over the
source positions for each k instead ("S") makes each C_k a convex combination of encoder
states, a length-independent summary. The paper's text admits both readings, so the sweep can
compare them. It has no effect with sigmoid encoder scoring (which normalises over nothing).

With K=1 and the softmax over K, every source position gives its one slot weight 1 whatever its
score, so position encodings (which scale the scores) change nothing: such a model is the same
with and without them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Annotated, Any

import torch
from annotated_types import Ge
from torch import nn

from datamodules.ranges import check_ranges

from .base import Attention, beam_groups, register_attention
from .functional import check_positions, masked_softmax, sentence_position_encoding
from .functional import position_encoding as position_encoding_matrix  # the option shadows the name

SCORINGS = ("softmax", "sigmoid")
NORMALIZATIONS = ("K", "S")
PE_NORMALIZATIONS = ("sentence", "none")


def _softmax_over_k(pre: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.softmax(pre, dim=-1) * mask[..., None].to(pre.dtype)  # (B, S, K)


def _softmax_over_s(pre: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return masked_softmax(pre, mask[..., None], dim=1)  # (B, S, K)


def _sigmoid_masked(pre: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(pre) * mask[..., None].to(pre.dtype)  # (B, S, K)


def _softmax_over_last(pre: torch.Tensor) -> torch.Tensor:
    return torch.softmax(pre, dim=-1)


#: (encoder_scoring, encoder_normalization) -> alpha from pre-activations (B, S, K) and mask (B, S)
_ENCODER_SCORES: dict[tuple[str, str], Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    ("softmax", "K"): _softmax_over_k,
    ("softmax", "S"): _softmax_over_s,
    ("sigmoid", "K"): _sigmoid_masked,
    ("sigmoid", "S"): _sigmoid_masked,
}
#: decoder_scoring -> beta from pre-activations (B, K); named functions, never lambdas: a module
#: holding one would not pickle (Lightning's ddp_spawn, multiprocessing, ``copy.deepcopy`` alike)
_DECODER_SCORES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "softmax": _softmax_over_last,
    "sigmoid": torch.sigmoid,
}


def _check_choice(option: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(
            f"memory attention: {option}={value!r} is not one of {', '.join(map(repr, allowed))}"
        )


@register_attention("memory")
class MemoryAttention(Attention):
    """Fixed-size memory attention.

    Args:
        query_dim: size H of the decoder state.
        memory_dim: size D of the encoder states.
        K: number of memory vectors.
        encoder_scoring: "softmax" or "sigmoid", the function turning W_alpha s_t into alpha_t.
        decoder_scoring: "softmax" or "sigmoid", the function turning W_beta h into beta.
        position_encoding: multiply the encoder scores by the eq. 10 position encodings.
        max_source_len: S of eq. 10 (only used with position encodings; a longer source raises).
        encoder_normalization: axis of the encoder softmax: "K" (eq. 5) or "S" (see module doc).
        position_encoding_normalization: "sentence" (renormalised per sentence, the paper) or
            "none" (see module doc).
        bias: give W_alpha and W_beta bias terms (the paper's eqs. have none).
    """

    def __init__(
        self,
        query_dim: int,
        memory_dim: int,
        K: Annotated[int, Ge(1)] = 32,
        encoder_scoring: str = "softmax",
        decoder_scoring: str = "softmax",
        position_encoding: bool = False,
        max_source_len: Annotated[int, Ge(1)] = 256,
        encoder_normalization: str = "K",
        position_encoding_normalization: str = "sentence",
        bias: bool = False,
    ) -> None:
        super().__init__(query_dim, memory_dim)
        check_ranges(MemoryAttention.__init__, locals(), owner="memory attention")
        _check_choice("encoder_scoring", encoder_scoring, SCORINGS)
        _check_choice("decoder_scoring", decoder_scoring, SCORINGS)
        _check_choice("encoder_normalization", encoder_normalization, NORMALIZATIONS)
        _check_choice(
            "position_encoding_normalization", position_encoding_normalization, PE_NORMALIZATIONS
        )
        self.K = K
        self.encoder_scoring = encoder_scoring
        self.decoder_scoring = decoder_scoring
        self.encoder_normalization = encoder_normalization
        self.use_position_encoding = position_encoding
        self.max_source_len = max_source_len
        self.position_encoding_normalization = position_encoding_normalization
        self._encoder_score = _ENCODER_SCORES[(encoder_scoring, encoder_normalization)]
        self._decoder_score = _DECODER_SCORES[decoder_scoring]
        self.W_alpha = nn.Linear(memory_dim, K, bias=bias)
        self.W_beta = nn.Linear(query_dim, K, bias=bias)
        if position_encoding:
            self.register_buffer(
                "pe", position_encoding_matrix(K, max_source_len), persistent=False
            )

    shares_cache = True
    headline = "K"
    headline_meaning = "memory vectors"
    step_cost = 1.0  # O(K*D) per step, independent of the source length

    @classmethod
    def relative_step_cost(cls, options: dict[str, Any]) -> float:
        """Grows slowly with K: K=32 costs 10 % more per step than K=1."""
        return cls.step_cost + 0.02 * math.log2(max(1, int(options.get("K") or 32)))

    @property
    def longest_source(self) -> int | None:
        """``max_source_len`` with position encodings (their matrix covers that many positions);
        without them, any length."""
        return self.max_source_len if self.use_position_encoding else None

    def precompute(self, memory: torch.Tensor, mask: torch.Tensor):
        S = memory.shape[1]
        pre = self.W_alpha(memory)  # (B, S, K)
        if self.use_position_encoding:
            pe = self.pe[:, :S].to(pre.dtype)  # (K, S)
            check_positions(mask, self.max_source_len, "memory attention: the encodings cover")
            if S > self.max_source_len:  # padded wider than L covers: masked columns
                pe = nn.functional.pad(pe, (0, S - self.max_source_len))
            if self.position_encoding_normalization == "sentence":
                pre = pre * sentence_position_encoding(
                    pe, mask
                )  # (B, S, K) o l_s, jagged per sentence
            else:
                pre = pre * pe.T  # (B, S, K) o l_s, the columns of L as they are
        alpha = self._encoder_score(pre, mask)  # (B, S, K), 0 at padded positions
        C = torch.einsum("bsk,bsd->bkd", alpha, memory)  # (B, K, D)
        return {"C": C, "alpha": alpha}

    def _beta(self, query: torch.Tensor) -> torch.Tensor:
        return self._decoder_score(self.W_beta(query))  # (B, K)

    def step(self, query, cache, state, need_weights=False):
        C = cache["C"]  # (Bc, K, D), one per sentence, shared by its G beams
        G = beam_groups(query, C.shape[0])
        beta = self._beta(query).view(C.shape[0], G, self.K)  # (Bc, G, K)
        ctx = torch.bmm(beta, C).view(query.shape[0], -1)  # (N, D); bmm: half einsum's overhead
        weights = None
        if need_weights:
            weights = torch.einsum("bsk,bgk->bgs", cache["alpha"], beta).reshape(
                query.shape[0], -1
            )  # (N, S)
        return ctx, state, weights

    def extra_weights(self, query, cache, state):
        return {"alpha": cache["alpha"], "beta": self._beta(query)}  # (B, S, K), (B, K)
