"""Monotonic attention (Raffel et al. 2017, "Online and Linear-Time Attention by Enforcing
Monotonic Alignments").

Energy:  e_ij = g * (v / ||v||)^T tanh(W_s s_j + W_h q_i + b) + r,   p_ij = sigmoid(e_ij + noise)

with g a learned scalar initialised to 1/sqrt(A) (Raffel et al.'s weight-normalised energy), r a
learned scalar initialised to ``score_bias_init`` and Gaussian pre-sigmoid noise of std
``sigmoid_noise`` in training mode only.

Modes (option ``mode``; None means "parallel" in training and "hard" in eval):

- "parallel": the expected alignment in closed form, in log space
  (:func:`~.functional.monotonic_alignment`), with the exact log p = -softplus(-e) and
  log(1 - p) = -softplus(e). State: {"alignment": (B, S)}, starting one-hot at position 0.
- "recursive": the same expectation by the slow loop over j (a reference, for tests).
- "hard": test-time decoding. State: {"pos": (B,) long, "done": (B,) bool}. Each step scans
  forward from the previous position, evaluating the energy of one candidate position per
  still-scanning row at a time, and attends to the first j with p_ij > 0.5; a row that finds
  none attends nowhere (zero context, zero weights) and keeps doing so. The scan never moves
  back, so a whole decode evaluates at most S + T energies per row. Without noise (eval) the
  result is deterministic.

A state built in one mode is converted if a step runs in the other (e.g. ``.eval()`` mid-way):
a hard state becomes its one-hot row, a soft alignment its argmax (or "done" if it is all zero).
"""
from __future__ import annotations

import math
from typing import Annotated, Optional

import torch
from annotated_types import Ge
from torch import nn
from torch.nn import functional as F

from .base import Attention, register_attention
from .functional import MONOTONIC_MODES, monotonic_alignment


@register_attention("monotonic")
class MonotonicAttention(Attention):
    """Hard monotonic attention with a soft, parallel expected alignment for training.

    Args:
        query_dim: size H of the decoder state.
        memory_dim: size D of the encoder states.
        attention_dim: width A of the energy's hidden layer (default: H).
        score_bias_init: initial value of the energy bias r (negative: start by moving on).
        sigmoid_noise: std of the pre-sigmoid Gaussian noise in training mode (0 disables it).
        mode: None (soft "parallel" in training, "hard" in eval), or force "parallel",
            "recursive" or "hard".
    """

    recurrent = True

    def __init__(
        self,
        query_dim: int,
        memory_dim: int,
        attention_dim: Optional[Annotated[int, Ge(1)]] = None,
        score_bias_init: float = -4.0,
        sigmoid_noise: Annotated[float, Ge(0)] = 1.0,
        mode: Optional[str] = None,
    ) -> None:
        super().__init__(query_dim, memory_dim)
        if mode is not None and mode not in MONOTONIC_MODES:
            raise ValueError(f"monotonic: mode={mode!r} is not None or one of {', '.join(MONOTONIC_MODES)}")
        if sigmoid_noise < 0:
            raise ValueError(f"monotonic: sigmoid_noise is a standard deviation, got {sigmoid_noise}")
        A = attention_dim or query_dim
        self.attention_dim = A
        self.mode = mode
        self.sigmoid_noise = sigmoid_noise
        self.W_s = nn.Linear(memory_dim, A, bias=False)
        self.W_h = nn.Linear(query_dim, A, bias=True)  # its bias is the b of the energy
        self.v = nn.Parameter(torch.empty(A).uniform_(-1 / math.sqrt(A), 1 / math.sqrt(A)))
        self.g = nn.Parameter(torch.tensor(1 / math.sqrt(A)))
        self.r = nn.Parameter(torch.tensor(float(score_bias_init)))

    # ---- maths -------------------------------------------------------------------------
    def _current_mode(self) -> str:
        return self.mode or ("parallel" if self.training else "hard")

    def _energy(self, keys: torch.Tensor, query_proj: torch.Tensor) -> torch.Tensor:
        """e = g * v_hat^T tanh(keys + query_proj) + r (+ noise in training).

        Args:
            keys: W_s s_j, (..., A): (B, S, A) for all positions, (n, A) for scan candidates.
            query_proj: W_h q + b, broadcastable to ``keys``.
        Returns:
            energies of shape ``keys.shape[:-1]``.
        """
        v_hat = self.v / self.v.norm()  # (A,)
        energy = self.g * (torch.tanh(keys + query_proj) @ v_hat) + self.r  # (...)
        if self.training and self.sigmoid_noise > 0:
            energy = energy + self.sigmoid_noise * torch.randn_like(energy)
        return energy

    # ---- interface ---------------------------------------------------------------------
    def precompute(self, memory: torch.Tensor, mask: torch.Tensor):
        S = mask.shape[1]
        # one past the last real position (the hard scan's end), 0 for an empty row
        last = S - mask.flip(1).to(torch.uint8).argmax(dim=1)  # (B,)
        end = torch.where(mask.any(dim=1), last, torch.zeros_like(last))  # (B,)
        return {"memory": memory, "mask": mask, "keys": self.W_s(memory), "end": end}  # keys (B, S, A)

    def initial_state(self, cache):
        mask = cache["mask"]
        if self._current_mode() == "hard":
            return {
                "pos": torch.zeros(mask.shape[0], dtype=torch.long, device=mask.device),  # (B,)
                "done": ~mask[:, 0],  # (B,) an empty sentence attends nowhere from the start
            }
        alignment = torch.zeros(mask.shape, dtype=cache["memory"].dtype, device=mask.device)  # (B, S)
        alignment[:, 0] = mask[:, 0].to(alignment.dtype)  # one-hot at position 0, masked
        return {"alignment": alignment}

    def step(self, query, cache, state, need_weights=False):
        mode = self._current_mode()
        if mode == "hard":
            return self._hard_step(query, cache, self._as_hard_state(state), need_weights)
        previous = self._as_soft_state(state, cache)  # (B, S)
        mask = cache["mask"]
        energy = self._energy(cache["keys"], self.W_h(query)[:, None, :])  # (B, S)
        # Padded positions: p = 0 (log p = -inf) and 1 - p = 1, so mass passes but never stops there.
        log_p = (-F.softplus(-energy)).masked_fill(~mask, float("-inf"))  # (B, S)
        log_1mp = (-F.softplus(energy)).masked_fill(~mask, 0.0)  # (B, S)
        p = torch.sigmoid(energy) * mask.to(energy.dtype)  # (B, S)
        alignment = monotonic_alignment(p, previous, mode, log_p=log_p, log_1mp=log_1mp)  # (B, S)
        alignment = alignment * mask.to(alignment.dtype)  # (B, S)
        ctx = torch.einsum("bs,bsd->bd", alignment, cache["memory"])  # (B, D)
        return ctx, {"alignment": alignment}, alignment if need_weights else None

    def _hard_step(self, query, cache, state, need_weights):
        keys, end, memory = cache["keys"], cache["end"], cache["memory"]
        B, S = cache["mask"].shape
        done = state["done"]  # (B,)
        pos = state["pos"].clone()  # (B,) scan position, never decreases
        # the still-scanning rows, kept compact: each pass evaluates one candidate per active row
        # and drops the rows that stopped or ran off, so nothing of size B or S is touched per pass
        rows = ((~done) & (pos < end)).nonzero().squeeze(1)  # (n,)
        if rows.numel():
            cand = pos.index_select(0, rows)  # (n,) one candidate position per active row
            query_proj = self.W_h(query.index_select(0, rows))  # (n, A)
            row_end = end.index_select(0, rows)  # (n,)
            while True:
                energy = self._energy(keys[rows, cand], query_proj)  # (n,) O(n * A)
                move = (energy <= 0).long()  # (n,) p <= 0.5: look further; cand < end is a real token
                cand = cand + move  # (n,)
                pos.index_copy_(0, rows, cand)
                going = (move == 1) & (cand < row_end)  # (n,)
                rows, cand = rows[going], cand[going]  # (n',)
                if rows.numel() == 0:  # the one sync per pass
                    break
                query_proj, row_end = query_proj[going], row_end[going]
        # a row stopped inside its sentence iff pos < end; rows that ran off attend nowhere from now on
        attended = ~done & (pos < end)  # (B,)
        index = pos.clamp(max=S - 1)  # (B,)
        keep = attended.to(memory.dtype)[:, None]  # (B, 1)
        ctx = memory[torch.arange(B, device=memory.device), index] * keep  # (B, D)
        new_state = {"pos": pos, "done": ~attended}
        weights = F.one_hot(index, S).to(memory.dtype) * keep if need_weights else None  # (B, S)
        return ctx, new_state, weights

    # ---- state conversion between soft and hard modes ----------------------------------
    @staticmethod
    def _as_hard_state(state):
        if "pos" in state:
            return state
        alignment = state["alignment"]  # (B, S)
        return {"pos": alignment.argmax(dim=1), "done": ~(alignment > 0).any(dim=1)}

    @staticmethod
    def _as_soft_state(state, cache):
        if "alignment" in state:
            return state["alignment"]
        S = cache["mask"].shape[1]
        one_hot = F.one_hot(state["pos"].clamp(max=S - 1), S).to(cache["memory"].dtype)  # (B, S)
        return one_hot * (~state["done"]).to(one_hot.dtype)[:, None]  # (B, S)
