"""Memory attention fused over members that differ in K, scoring, position encoding or length.

Members whose memory attention differs only in what
:data:`~lightning_modules.fused.axes.MEMBER_ATTENTION_OPTIONS` lists for it train as one fused
mechanism:

- **K**: W_alpha and W_beta have the group's largest K outputs; a member's slots past its own K
  are padding (zero weights, :mod:`lightning_modules.fused.layout`). Their pre-activations are
  replaced by the dtype's most negative finite value before the scoring function (a fill, not a
  product); alpha's scores are multiplied by the slot mask afterwards, beta's need no product
  (sigmoid and softmax over K of the fill are exactly 0): every padded slot gets weight exactly 0
  and gradient exactly 0 under softmax over K, softmax over S and sigmoid alike, for alpha and
  beta. Each member has at least one real slot, so no softmax runs over a row of fills alone;
  the softmax over S of a padded slot's column is a uniform row over fills (finite, no NaN) that
  the mask then zeroes.
- **scoring functions and the encoder softmax's axis**: every encoder function a member of the
  group uses (softmax over K, softmax over S, sigmoid) and every decoder function is computed, and
  each member's rows pick its own with ``torch.where``; the unselected branches are finite, so no
  NaN reaches a gradient.
- **position encodings**: each member's eq. 10 matrix L with its own K and its own
  ``max_source_len`` as S, zero-padded into one (M, K, S) buffer and renormalised per sentence
  over the member's own real positions (or taken raw, ``position_encoding_normalization="none"``);
  a member without position encodings multiplies by 1.

A group whose members agree on all of these keeps the plain mechanism (``fuse_attention`` only
swaps in this class when they differ), so a group of one shape costs what it cost before.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from ..attention.functional import masked_softmax
from ..attention.functional import position_encoding as position_encoding_matrix
from ..attention.memory import MemoryAttention

#: the encoder scoring functions a member may use: (encoder_scoring, encoder_normalization) ->
#: kind (sigmoid normalises over nothing, so both of its axes are one function)
ENCODER_KINDS = ("softmax_K", "softmax_S", "sigmoid")
PE_OFF, PE_SENTENCE, PE_RAW = 0, 1, 2


def encoder_kind(attention: MemoryAttention) -> str:
    """The encoder scoring function ``attention`` applies (one of :data:`ENCODER_KINDS`)."""
    if attention.encoder_scoring == "sigmoid":
        return "sigmoid"
    return f"softmax_{attention.encoder_normalization}"


def pe_mode(attention: MemoryAttention) -> int:
    """PE_OFF, PE_SENTENCE (renormalised per sentence) or PE_RAW (L's columns as they are)."""
    if not attention.use_position_encoding:
        return PE_OFF
    return PE_SENTENCE if attention.position_encoding_normalization == "sentence" else PE_RAW


def member_signature(attention: MemoryAttention) -> tuple:
    """What the fused mechanism computes for this member: equal for all members, the plain
    mechanism does the same."""
    mode = pe_mode(attention)
    length = attention.max_source_len if mode != PE_OFF else None
    return (attention.K, encoder_kind(attention), attention.decoder_scoring, mode, length)


def _choice(values: Sequence[str | int], present: Sequence[str | int]) -> torch.Tensor | None:
    """Each member's index into ``present``, (M,) long; None when only one is present."""
    if len(present) == 1:
        return None
    return torch.tensor([present.index(v) for v in values], dtype=torch.long)


class FusedMemoryAttention(MemoryAttention):
    """:class:`~lightning_modules.attention.memory.MemoryAttention` over M members with their own
    K, scoring functions, position encodings and ``max_source_len`` (module docstring), on
    member-major rows: memory (M * B, S, D), query (M * B, H).

    Set up by :meth:`configure_members` (after ``fuse_attention`` has swapped the class in and
    made W_alpha and W_beta fused linear maps of the largest K outputs).
    """

    #: W_alpha and W_beta have K outputs: members' different K are padded to the largest
    pads_outputs = True

    slots: torch.Tensor | None  # (M, K) bool, True at a member's real slots; None: all real
    encoder_choice: torch.Tensor | None  # (M,) index into encoder_kinds; None: one kind
    decoder_sigmoid: torch.Tensor | None  # (M,) bool; None: one decoder function
    pe: torch.Tensor | None  # (M, K, S_pe) each member's L, zero-padded; None: no member has PE
    pe_choice: torch.Tensor | None  # (M,) index into pe_modes; None: one mode

    @staticmethod
    def applies(attentions: Sequence[MemoryAttention]) -> bool:
        """Whether the members compute differently (else the plain mechanism runs them)."""
        return len({member_signature(a) for a in attentions}) > 1

    def configure_members(self, attentions: Sequence[MemoryAttention]) -> None:
        """Each member's K, scoring functions and position encodings, as buffers (moved with the
        model by :meth:`FusedSeq2Seq.to`)."""
        self.members = len(attentions)
        ks = [a.K for a in attentions]
        self.K = max(ks)
        slots = torch.arange(self.K) < torch.tensor(ks).unsqueeze(1)  # (M, K)
        self.register_buffer("slots", None if all(k == self.K for k in ks) else slots, False)
        kinds = [encoder_kind(a) for a in attentions]
        self.encoder_kinds = tuple(k for k in ENCODER_KINDS if k in kinds)
        self.register_buffer("encoder_choice", _choice(kinds, self.encoder_kinds), False)
        decoders = [a.decoder_scoring for a in attentions]
        self.decoder_kinds = tuple(sorted(set(decoders)))
        sigmoid = torch.tensor([d == "sigmoid" for d in decoders])
        self.register_buffer(
            "decoder_sigmoid", sigmoid if len(self.decoder_kinds) > 1 else None, False
        )
        modes = [pe_mode(a) for a in attentions]
        self.pe_modes = tuple(sorted(set(modes)))
        self.register_buffer("pe_choice", _choice(modes, self.pe_modes), False)
        if "pe" in self._buffers:
            del self._buffers["pe"]  # the first member's own (K, S) matrix
        pe = None
        if any(m != PE_OFF for m in modes):
            width = max(a.max_source_len for a, m in zip(attentions, modes) if m != PE_OFF)
            pe = torch.zeros(self.members, self.K, width)  # (M, K, S_pe)
            for i, (a, m) in enumerate(zip(attentions, modes)):
                if m != PE_OFF:
                    pe[i, : a.K, : a.max_source_len] = position_encoding_matrix(
                        a.K, a.max_source_len
                    )
        self.register_buffer("pe", pe, False)
        self.use_position_encoding = pe is not None
        self.max_source_len = max(a.max_source_len for a in attentions)

    # ---------------------------------------------------------------- source side
    def precompute(self, memory: torch.Tensor, mask: torch.Tensor):
        """memory (M * B, S, D), mask (M * B, S) -> C (M * B, K, D) and alpha (M * B, S, K)."""
        rows, S, _ = memory.shape
        M, K = self.members, self.K
        pre = self.W_alpha(memory).view(M, -1, S, K)  # (M, B, S, K)
        real = mask.view(M, -1, S, 1)  # (M, B, S, 1)
        if self.pe is not None:
            pre = pre * self._position_factor(real, pre.dtype)  # (M, B, S, K) o l_s
        if self.slots is not None:
            slots = self.slots.view(M, 1, 1, K)
            pre = pre.masked_fill(~slots, torch.finfo(pre.dtype).min)  # padded slots filled
            real = real & slots  # (M, B, S, K)
        alpha = self._encoder_scores(pre, real).reshape(rows, S, K)  # (M*B, S, K)
        C = torch.einsum("bsk,bsd->bkd", alpha, memory)  # (M*B, K, D)
        return {"C": C, "alpha": alpha}

    def _position_factor(self, real: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """Each member's l_s: real (M, B, S, 1) -> (M, B, S, K), or (M, 1, S, K) when no member
        renormalises per sentence."""
        S = real.shape[2]
        pe = self.pe
        if S > pe.shape[2]:  # only positions past every PE member's sentences read the zeros
            pe = F.pad(pe, (0, S - pe.shape[2]))
        columns = pe[:, :, :S].to(dtype).transpose(1, 2).unsqueeze(1)  # (M, 1, S, K)
        factors = {PE_OFF: None, PE_RAW: columns}
        if PE_SENTENCE in self.pe_modes:
            masked = columns * real.to(dtype)  # (M, B, S, K)
            total = masked.sum(dim=2, keepdim=True)  # (M, B, 1, K)
            factors[PE_SENTENCE] = masked / total.clamp(min=torch.finfo(dtype).tiny)
        out = None
        for index, mode in enumerate(self.pe_modes):
            value = factors[mode]
            if out is None:
                out = torch.ones((), dtype=dtype, device=pe.device) if value is None else value
                continue
            pick = (self.pe_choice == index).view(-1, 1, 1, 1)  # (M, 1, 1, 1)
            out = torch.where(pick, 1.0 if value is None else value, out)
        return out

    def _encoder_scores(self, pre: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        """alpha (M, B, S, K) from pre-activations (M, B, S, K) and the real positions (and
        slots) ``real`` (M, B, S, 1 or K): each member's own function."""
        out = None
        for index, kind in enumerate(self.encoder_kinds):
            if kind == "softmax_K":
                alpha = torch.softmax(pre, dim=-1) * real.to(pre.dtype)
            elif kind == "softmax_S":
                alpha = masked_softmax(pre, real, dim=2)
            else:
                alpha = torch.sigmoid(pre) * real.to(pre.dtype)
            if out is None:
                out = alpha
            else:
                pick = (self.encoder_choice == index).view(-1, 1, 1, 1)  # (M, 1, 1, 1)
                out = torch.where(pick, alpha, out)
        return out

    # ---------------------------------------------------------------- decoder side
    def _beta(self, query: torch.Tensor) -> torch.Tensor:
        """beta (M * B, K) for the query (M * B, H): each member's function, 0 at padded slots."""
        M, K = self.members, self.K
        pre = self.W_beta(query).view(M, -1, K)  # (M, B, K)
        if self.slots is not None:
            pre = pre.masked_fill(~self.slots.unsqueeze(1), torch.finfo(pre.dtype).min)
        if self.decoder_sigmoid is None:
            beta = torch.sigmoid(pre) if self.decoder_kinds[0] == "sigmoid" else pre.softmax(-1)
        else:
            beta = torch.where(
                self.decoder_sigmoid.view(M, 1, 1), torch.sigmoid(pre), pre.softmax(-1)
            )  # (M, B, K)
        return beta.view(query.shape[0], K)
