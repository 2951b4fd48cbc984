"""Luong et al. (2015) local attention: content attention inside a window [p_t - D, p_t + D],
shaped by a Gaussian centred at p_t. local-m puts p_t at the step index (monotonic alignment),
local-p predicts it from the decoder state.

Conventions: source positions are 0-based (s = 0..S-1); the window half-width D is the
``window`` option, sigma = D / 2. The content score is Luong's "general" q^T W s_j, softmaxed over
the real positions inside the window. As in Luong et al. (eq. 10), the Gaussian-weighted
weights are *not* renormalised: they sum to at most 1, and the context is the correspondingly
shrunken weighted sum. Positions outside the sentence or the window get exactly 0.
"""

from __future__ import annotations

from typing import Annotated

import torch
from annotated_types import Ge
from torch import nn

from datamodules.ranges import check_ranges

from .base import Attention, beam_groups, register_attention
from .functional import masked_softmax


def position_dtype(query: torch.Tensor) -> torch.dtype:
    """The dtype of window centres and source positions: the query's, at least float32 (bf16, which
    a decoder hands over under bf16 autocast, holds whole numbers exactly only up to 256: a window
    past there would be off by one or more, its Gaussian centred wrongly)."""
    return torch.promote_types(query.dtype, torch.float32)


class _LocalAttention(Attention):
    """Shared window, score and Gaussian; subclasses say where the window is centred."""

    def __init__(self, query_dim: int, memory_dim: int, window: Annotated[int, Ge(1)] = 10) -> None:
        super().__init__(query_dim, memory_dim)
        check_ranges(_LocalAttention.__init__, locals(), owner=self.name)  # sigma = window / 2
        self.window = window
        self.sigma = window / 2
        self.W = nn.Linear(memory_dim, query_dim, bias=False)  # Luong "general" score

    shares_cache = True
    headline = "window"
    headline_meaning = "half-width D of [p_t - D, p_t + D]"

    def center(self, query: torch.Tensor, cache, state) -> torch.Tensor:
        """The window centre p_t, (N,), in 0-based source positions (one per query row), in
        :func:`position_dtype` (float32 for a bf16 query), as are the positions it is compared
        with."""
        raise NotImplementedError

    def _next_state(self, state):
        return state

    def precompute(self, memory: torch.Tensor, mask: torch.Tensor):
        return {"memory": memory, "mask": mask, "keys": self.W(memory)}  # keys (B, S, H)

    def step(self, query, cache, state, need_weights=False):
        mask = cache["mask"]  # (Bc, S), shared by the G beams of each sentence
        Bc, S = mask.shape
        G = beam_groups(query, Bc)
        p_t = self.center(query, cache, state)  # (N,)
        positions = torch.arange(S, device=query.device, dtype=p_t.dtype)  # (S,)
        offset = (positions[None, :] - p_t[:, None]).view(Bc, G, S)  # (Bc, G, S) s - p_t
        in_window = offset.abs() <= self.window  # (Bc, G, S)
        scores = torch.einsum("bsh,bgh->bgs", cache["keys"], query.view(Bc, G, -1))  # (Bc, G, S)
        align = masked_softmax(
            scores, mask.unsqueeze(1) & in_window
        )  # (Bc, G, S), 0 outside sentence/window
        gaussian = torch.exp(-offset.square() / (2 * self.sigma**2))  # (Bc, G, S)
        weights = align * gaussian.to(align.dtype)  # (Bc, G, S) not renormalised (Luong eq. 10)
        ctx = torch.bmm(weights, cache["memory"]).view(query.shape[0], -1)  # (N, D)
        return (
            ctx,
            self._next_state(state),
            weights.view(query.shape[0], S) if need_weights else None,
        )


@register_attention("local_m")
class LocalMonotonicAttention(_LocalAttention):
    """local-m: p_t = t, the decoder step index (0 at the first step), carried in the state.

    Args:
        query_dim: size H of the decoder state.
        memory_dim: size D of the encoder states.
        window: half-width D of the window [p_t - D, p_t + D].
    """

    recurrent = True

    def initial_state(self, cache):
        mask = cache["mask"]
        return {"t": torch.zeros(mask.shape[0], dtype=torch.long, device=mask.device)}  # (B,)

    def center(self, query, cache, state):
        return state["t"].to(position_dtype(query))  # (B,)

    def _next_state(self, state):
        return {"t": state["t"] + 1}  # (B,)


@register_attention("local_p")
class LocalPredictiveAttention(_LocalAttention):
    """local-p: p_t = S_real * sigmoid(v_p^T tanh(W_p h_t)), S_real the sentence's real length.

    The Gaussian keeps p_t differentiable, so the position predictor trains through it. As in
    Luong's eq. 9, p_t lies in [0, S_real]; positions here are 0-based, so its top, S_real, is one
    past the last real token (whose weight is then at most exp(-1 / (2 sigma^2)) of its peak).

    Args:
        query_dim: size H of the decoder state.
        memory_dim: size D of the encoder states.
        window: half-width D of the window [p_t - D, p_t + D].
    """

    def __init__(self, query_dim: int, memory_dim: int, window: Annotated[int, Ge(1)] = 10) -> None:
        super().__init__(query_dim, memory_dim, window)
        self.W_p = nn.Linear(query_dim, query_dim, bias=False)
        self.v_p = nn.Linear(query_dim, 1, bias=False)

    def center(self, query, cache, state):
        dtype = position_dtype(query)
        length = cache["mask"].sum(dim=1).to(dtype)  # (Bc,)
        length = length.repeat_interleave(beam_groups(query, length.shape[0]))  # (N,) per query row
        gate = torch.sigmoid(self.v_p(torch.tanh(self.W_p(query))).to(dtype)).squeeze(-1)  # (B,)
        return length * gate  # (B,)
