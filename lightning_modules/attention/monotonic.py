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
- "hard": test-time decoding. State: {"pos": (B,) long, "done": (B,) bool}. Each step attends to
  the first j at or after the previous position with p_ij > 0.5; a row that finds none attends
  nowhere (zero context, zero weights) and keeps doing so; it never moves back. Without noise
  (eval) the result is deterministic. The scan is batched: each step evaluates the energies of a
  window of ``scan_chunk`` positions ahead of every row's position in one tensor op; only rows
  whose window held no hit and did not reach the sentence end (a jump of more than
  ``scan_chunk`` positions, or running off the end) evaluate their whole remaining sentence, in
  one more op. So a step costs a fixed handful of tensor ops and one host sync (deciding whether
  that second op is needed), on CPU and GPU alike. Energy evaluations per row: ``scan_chunk``
  per step, plus at most S for each jump past a window, which moves the row on by at least
  ``scan_chunk`` positions or ends it.

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

from .base import Attention, beam_groups, map_batch, register_attention
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
        scan_chunk: positions whose energies a hard step evaluates at once ahead of the previous
            position (see the module docstring; results do not depend on it).
    """

    recurrent = True
    shares_cache = True

    def __init__(
        self,
        query_dim: int,
        memory_dim: int,
        attention_dim: Optional[Annotated[int, Ge(1)]] = None,
        score_bias_init: float = -4.0,
        sigmoid_noise: Annotated[float, Ge(0)] = 1.0,
        mode: Optional[str] = None,
        scan_chunk: Annotated[int, Ge(1)] = 8,
    ) -> None:
        super().__init__(query_dim, memory_dim)
        if mode is not None and mode not in MONOTONIC_MODES:
            raise ValueError(f"monotonic: mode={mode!r} is not None or one of {', '.join(MONOTONIC_MODES)}")
        if sigmoid_noise < 0:
            raise ValueError(f"monotonic: sigmoid_noise is a standard deviation, got {sigmoid_noise}")
        if scan_chunk < 1:
            raise ValueError(f"monotonic: scan_chunk must be >= 1, got {scan_chunk}")
        self.scan_chunk = scan_chunk
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
        # the keys padded with scan_chunk zero rows, so a hard step's window never needs clamping
        keys_ahead = F.pad(self.W_s(memory), (0, 0, 0, self.scan_chunk))  # (B, S + C, A)
        keys = keys_ahead[:, :S]  # (B, S, A)
        return {"memory": memory, "mask": mask, "keys": keys, "keys_ahead": keys_ahead, "end": end}

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
        G = beam_groups(query, cache["mask"].shape[0])
        if G > 1:  # the soft modes are not a decode hot path: give every query row its cache row
            rows = torch.arange(query.shape[0], device=query.device) // G  # (N,)
            cache = map_batch(lambda x: x.index_select(0, rows), cache)
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
        keys, memory = cache["keys_ahead"], cache["memory"]  # (Bc, S + C, A), (Bc, S, D)
        Bc, S = cache["mask"].shape
        N, C = query.shape[0], self.scan_chunk  # query rows: Bc sentences x G beams each
        G = beam_groups(query, Bc)
        srow = torch.arange(N, device=query.device)  # (N,) each query row's sentence (cache row)
        srow = srow // G if G > 1 else srow
        end = cache["end"].index_select(0, srow) if G > 1 else cache["end"]  # (N,)
        limit = end.masked_fill(state["done"], 0)  # (N,) rows that stopped for good scan nothing
        pos = state["pos"]  # (N,)
        query_proj = self.W_h(query)  # (N, A)
        # 1) one batched window of C candidates ahead of every row's position
        window = pos[:, None] + torch.arange(C, device=pos.device)  # (N, C)
        flat = (srow * (S + C))[:, None] + window  # (N, C) rows of keys_ahead viewed as (Bc*(S+C), A)
        cand = keys.reshape(Bc * (S + C), -1).index_select(0, flat.view(-1)).view(N, C, -1)  # (N, C, A)
        hit = (self._energy(cand, query_proj[:, None, :]) > 0) & (window < limit[:, None])  # (N, C) p > 0.5
        first = (hit.cumsum(dim=1) == 0).sum(dim=1)  # (N,) leading misses: the first hit's offset, C where none
        new_pos = pos + first  # (N,) the first hit at or after pos: never moves back
        # 2) the rows whose window held no hit but did not reach the sentence end: their whole
        #    remaining sentence at once. The nonzero() is the step's one host sync.
        rows = ((first == C) & (new_pos < limit)).nonzero().squeeze(1)  # (n,)
        if rows.numel():
            positions = torch.arange(S, device=pos.device)  # (S,)
            row_limit = limit.index_select(0, rows)  # (n,)
            rest = (positions >= new_pos.index_select(0, rows)[:, None]) & (positions < row_limit[:, None])  # (n, S)
            energy = self._energy(cache["keys"].index_select(0, srow.index_select(0, rows)), query_proj[rows, None, :])
            hit_rest = (energy > 0) & rest  # (n, S)
            found = torch.where(hit_rest.any(dim=1), hit_rest.to(torch.uint8).argmax(dim=1), row_limit)  # (n,)
            new_pos = new_pos.index_copy(0, rows, found)  # (N,)
        # a row attends iff it stopped inside its sentence; one that ran off attends nowhere from now on
        attended = new_pos < limit  # (N,)
        index = new_pos.clamp(max=S - 1)  # (N,)
        keep = attended.to(memory.dtype)[:, None]  # (N, 1)
        ctx = memory.reshape(Bc * S, -1).index_select(0, srow * S + index) * keep  # (N, D)
        # rows that ran off keep their last position, so every later window stays inside keys_ahead
        new_state = {"pos": torch.where(attended, new_pos, pos), "done": ~attended}
        weights = F.one_hot(index, S).to(memory.dtype) * keep if need_weights else None  # (N, S)
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
