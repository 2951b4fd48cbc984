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
- "hard": test-time decoding. State: {"pos": (B,) long, "end": (B,) long}, the position attended
  and one past the sentence's last real position; ``pos >= end`` means the row attends nowhere.
  Each step attends to the first j at or after the previous position with p_ij > 0.5; a row that
  finds none attends nowhere (zero context, zero weights) and keeps doing so; it never moves back.
  Padded positions never stop the scan (p = 0 there, as in the soft modes). Without noise (eval)
  the result is deterministic. The scan is batched: each step evaluates the energies of a window
  of ``scan_chunk`` positions ahead of every row's position in one tensor op; only rows whose
  window held no hit and did not reach the sentence end (a jump of more than ``scan_chunk``
  positions) evaluate their whole sentence, in one more op. So a step costs a fixed handful of
  tensor ops (about twenty) and one host sync (deciding whether that second op is needed), on CPU
  and GPU alike. Energy evaluations per row: ``scan_chunk`` per step, plus at most S for each jump
  past a window, which moves the row on by at least ``scan_chunk`` positions or ends it. So a
  sentence costs at most T * scan_chunk + S * S / scan_chunk evaluations: linear in S while the
  hits fall within the windows, up to S * S / scan_chunk where every step jumps past one (the
  second op scores a row's whole sentence, its positions before the row's one included, to keep
  one rectangular tensor op).

  What keeps the step short: ``precompute`` (in hard mode only) pads keys, memory and a stop bias
  (r at real positions, -inf at padded ones) with ``scan_chunk`` rows past the end, so no window
  needs clamping or masking; every row's window is one gather from the flattened keys; a row that
  ran off moves to ``pos = S``, the first padding row: its windows are padding and its memory row
  is zero, so its context needs no masking either. The state carries each row's ``end`` (derivable
  from the cache) so that a step needs no gather to find it.

A state built in one mode is converted if a step runs in the other (e.g. ``.eval()`` mid-way):
a hard state becomes its one-hot row, a soft alignment its argmax (or pos = S, attending nowhere,
if it is all zero).
"""

from __future__ import annotations

import math
from typing import Annotated

import torch
from annotated_types import Ge
from torch import nn
from torch.nn import functional as F

from datamodules.ranges import check_ranges

from .base import Attention, Shared, beam_groups, map_batch, register_attention
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
        attention_dim: Annotated[int, Ge(1)] | None = None,
        score_bias_init: float = -4.0,
        sigmoid_noise: Annotated[float, Ge(0)] = 1.0,
        mode: str | None = None,
        scan_chunk: Annotated[int, Ge(1)] = 8,
    ) -> None:
        super().__init__(query_dim, memory_dim)
        if mode is not None and mode not in MONOTONIC_MODES:
            raise ValueError(
                f"monotonic: mode={mode!r} is not None or one of {', '.join(MONOTONIC_MODES)}"
            )
        check_ranges(
            MonotonicAttention.__init__, locals(), owner="monotonic"
        )  # sigmoid_noise: a std
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
        self._layout_memo: tuple | None = None  # see _layout

    # ---- maths -------------------------------------------------------------------------
    def _current_mode(self) -> str:
        return self.mode or ("parallel" if self.training else "hard")

    def _energy(self, keys: torch.Tensor, query_proj: torch.Tensor) -> torch.Tensor:
        """e = g * v_hat^T tanh(keys + query_proj) + r (+ noise in training).

        Args:
            keys: W_s s_j, (B, S, A).
            query_proj: W_h q + b, broadcastable to ``keys``.
        Returns:
            energies of shape ``keys.shape[:-1]``.
        """
        v_hat = self.v / self.v.norm()  # (A,)
        return self._noisy(self.g * (torch.tanh(keys + query_proj) @ v_hat) + self.r)  # (...)

    def _noisy(self, energy: torch.Tensor) -> torch.Tensor:
        """The pre-sigmoid noise, in training mode only."""
        if self.training and self.sigmoid_noise > 0:
            return energy + self.sigmoid_noise * torch.randn_like(energy)
        return energy

    # ---- interface ---------------------------------------------------------------------
    def precompute(self, memory: torch.Tensor, mask: torch.Tensor):
        S = mask.shape[1]
        # one past the last real position (the hard scan's end), 0 for an empty row
        last = S - mask.flip(1).to(torch.uint8).argmax(dim=1)  # (B,)
        end = torch.where(mask.any(dim=1), last, torch.zeros_like(last))  # (B,)
        cache = {"memory": memory, "mask": mask, "end": end}
        if self._current_mode() == "hard":
            return self._with_scan_inputs(cache)
        return {**cache, "keys": self.W_s(memory)}  # keys (B, S, A)

    def _with_scan_inputs(self, cache):
        """``cache`` with the hard scan's inputs, built once per decode (not in training, where the
        soft modes need none of them). A cache built in a soft mode gets them here when a hard step
        reads it (``.eval()`` mid-decode), then on every such step: not a hot path."""
        if "keys_ahead" in cache:
            return cache
        memory, mask, C = cache["memory"], cache["mask"], self.scan_chunk
        S = mask.shape[1]
        # padded with C rows past the end so that no window needs clamping: memory with C zero
        # rows (the context of a row parked at S, attending nowhere, is 0) ...
        memory_ahead = F.pad(memory, (0, 0, 0, C))  # (B, S + C, D)
        keys_ahead = self.W_s(memory_ahead)  # (B, S + C, A) ... its keys ...
        # ... r where a position can stop the scan, -inf where it cannot (padding) ...
        stop_bias = torch.where(
            mask, self.r, torch.tensor(float("-inf"), dtype=keys_ahead.dtype, device=mask.device)
        )
        bias_ahead = F.pad(stop_bias, (0, C), value=float("-inf"))  # (B, S + C)
        # ... and the step's weights, rearranged once: W_h transposed (a row-major (H, A) matrix
        # makes the step's projection a third faster on CPU) and g * v_hat
        shared = Shared(
            query_weight=self.W_h.weight.t().contiguous(),  # (H, A)
            query_bias=self.W_h.bias,  # (A,)
            scan_weight=self.v * (self.g / self.v.norm()),  # (A,)
        )
        return {
            **cache,
            "keys": keys_ahead[:, :S],  # (B, S, A)
            "keys_ahead": keys_ahead,
            "bias_ahead": bias_ahead,
            "memory_ahead": memory_ahead,
            "shared": shared,
        }

    def initial_state(self, cache):
        mask = cache["mask"]
        if self._current_mode() == "hard":
            # an empty sentence (end 0) attends nowhere from the start
            return {
                "pos": torch.zeros(mask.shape[0], dtype=torch.long, device=mask.device),
                "end": cache["end"],
            }
        alignment = torch.zeros(
            mask.shape, dtype=cache["memory"].dtype, device=mask.device
        )  # (B, S)
        alignment[:, 0] = mask[:, 0].to(alignment.dtype)  # one-hot at position 0, masked
        return {"alignment": alignment}

    def step(self, query, cache, state, need_weights=False):
        mode = self._current_mode()
        G = beam_groups(query, cache["mask"].shape[0])
        if mode == "hard":
            cache = self._with_scan_inputs(cache)
            return self._hard_step(
                query, cache, self._as_hard_state(state, cache, G), G, need_weights
            )
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

    def _scan_energy(
        self, cand: torch.Tensor, query_proj: torch.Tensor, bias: torch.Tensor, weight: torch.Tensor
    ) -> torch.Tensor:
        """The hard scan's energies g * v_hat^T tanh(cand + query_proj) + bias, computed in place.

        Args:
            cand: W_s s_j of the positions to score, (n, W, A); a fresh tensor, overwritten.
            query_proj: W_h q + b, (n, A).
            bias: (n, W): r where position j may stop the scan, -inf where it may not.
            weight: g * v_hat, (A,).
        Returns:
            energies (n, W); > 0 is p > 0.5.
        """
        n, W, A = cand.shape
        hidden = cand.add_(query_proj.unsqueeze(1)).tanh_()  # (n, W, A)
        dtype = (
            hidden.dtype
        )  # bf16 under CPU autocast (the keys' projection); addmv is not autocast
        return self._noisy(
            torch.addmv(
                bias.reshape(n * W).to(dtype), hidden.view(n * W, A), weight.to(dtype)
            ).view(n, W)
        )  # (n, W)

    def _layout(
        self, Bc: int, SC: int, G: int, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Each query row's first row in the flattened (Bc * (S + C), ...) cache, (N,), and its
        first window, (N, C). They depend on the shapes only, so the last pair is kept."""
        key = (Bc, SC, G, self.scan_chunk, device)
        if self._layout_memo is None or self._layout_memo[0] != key:
            base = torch.arange(0, Bc * SC, SC, device=device).repeat_interleave(G)  # (N,)
            window = base.unsqueeze(1) + torch.arange(self.scan_chunk, device=device)  # (N, C)
            self._layout_memo = (key, (base, window))
        return self._layout_memo[1]

    def _hard_step(self, query, cache, state, G, need_weights):
        keys, bias = cache["keys_ahead"], cache["bias_ahead"]  # (Bc, S + C, A), (Bc, S + C)
        Bc, SC, A = keys.shape
        N, C = query.shape[0], self.scan_chunk  # query rows: Bc sentences x G beams each
        pos, end = state["pos"], state["end"]  # (N,), (N,)
        base, first_window = self._layout(Bc, SC, G, pos.device)  # (N,), (N, C)
        shared = cache["shared"]
        weight = shared.scan_weight  # (A,)
        query_proj = torch.addmm(shared.query_bias, query, shared.query_weight)  # (N, A) W_h q + b
        # 1) one batched window of C candidates ahead of every row's position; padding never hits
        window = (first_window + pos.unsqueeze(1)).view(N * C)  # (N*C,) rows of the flattened cache
        cand = keys.reshape(Bc * SC, A).index_select(0, window).view(N, C, A)  # (N, C, A)
        energy = self._scan_energy(
            cand, query_proj, bias.reshape(Bc * SC).index_select(0, window), weight
        )  # (N, C)
        found, first = (energy > 0).max(
            dim=1
        )  # (N,), (N,) whether the window held a hit, and the first
        new_pos = pos + first  # (N,) the first hit at or after pos: never moves back
        # 2) rows whose window held no hit but did not reach the sentence end: their whole
        #    sentence at once. The nonzero() is the step's one host sync.
        lost = ~found  # (N,)
        beyond = pos + C  # (N,) the first position past each window
        rows = (lost & (beyond < end)).nonzero().squeeze(1)  # (n,)
        # a row whose window held no hit and reached the sentence end is parked at S: it attends
        # nowhere from now on, and its context is the zero padding row there
        new_pos = new_pos.masked_fill_(lost, SC - C)  # (N,)
        if rows.numel():
            found_rest = self._scan_rest(query_proj, cache, weight, rows, beyond, G)  # (n,)
            new_pos = new_pos.index_copy(0, rows, found_rest)
        memory = cache["memory_ahead"]  # (Bc, S + C, D)
        ctx = memory.reshape(Bc * SC, memory.shape[-1]).index_select(0, base + new_pos)  # (N, D)
        weights = None
        if need_weights:
            S = SC - C
            attended = (new_pos < end).to(ctx.dtype).unsqueeze(1)  # (N, 1)
            weights = F.one_hot(new_pos.clamp(max=S - 1), S).to(ctx.dtype) * attended  # (N, S)
        return ctx, {"pos": new_pos, "end": end}, weights

    def _scan_rest(self, query_proj, cache, weight, rows, start, G) -> torch.Tensor:
        """The first hit at or after ``start`` in the whole sentence of each of ``rows`` (or S: none)."""
        keys = cache["keys"]  # (Bc, S, A)
        S = keys.shape[1]
        sentence = rows // G if G > 1 else rows  # (n,)
        start = start.index_select(0, rows)  # (n,)
        bias = cache["bias_ahead"][:, :S].index_select(0, sentence)  # (n, S)
        energy = self._scan_energy(
            keys.index_select(0, sentence), query_proj.index_select(0, rows), bias, weight
        )
        hit = (energy > 0) & (torch.arange(S, device=rows.device) >= start.unsqueeze(1))  # (n, S)
        return torch.where(hit.any(dim=1), hit.to(torch.uint8).argmax(dim=1), S)  # (n,)

    # ---- state conversion between soft and hard modes ----------------------------------
    @staticmethod
    def _as_hard_state(state, cache, G):
        if "pos" in state:
            return state
        alignment = state["alignment"]  # (N, S)
        end = cache["end"].repeat_interleave(G) if G > 1 else cache["end"]  # (N,)
        pos = torch.where(
            (alignment > 0).any(dim=1), alignment.argmax(dim=1), alignment.shape[1]
        )  # (N,) S: nowhere
        return {"pos": pos, "end": end}

    @staticmethod
    def _as_soft_state(state, cache):
        if "alignment" in state:
            return state["alignment"]
        S = cache["mask"].shape[1]
        pos = state["pos"]  # (B,)
        one_hot = F.one_hot(pos.clamp(max=S - 1), S).to(cache["memory"].dtype)  # (B, S)
        return one_hot * (pos < state["end"]).to(one_hot.dtype)[:, None]  # (B, S)
