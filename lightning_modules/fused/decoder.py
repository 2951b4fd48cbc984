"""The fused decoder: :class:`lightning_modules.seq2seq.Decoder`'s teacher forcing for M members.

As the unfused decoder, with the gate products grouped: layer 0's embedding part of the gates
for all steps in one product before the loop, the fed-back context and the state in one product
per step (the weight rows are stored stacked for that, :meth:`FusedDecoder.leaves`). The LSTM
cell's pointwise part is :func:`lightning_modules.packed_lstm.lstm_pointwise`, the attention the
mechanism's own class (:mod:`lightning_modules.fused.attention`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from ..attention import Attention
from ..packed_lstm import lstm_pointwise
from ..seq2seq import Decoder, LSTMState
from .attention import fold, fuse_attention
from .layers import DropoutRates, FusedLinear, member_dropout, member_embedding
from .layout import Leaf, first_row, identity, linear_leaves


class FusedDecoder(nn.Module):
    """:class:`~lightning_modules.seq2seq.Decoder`'s teacher forcing over M members.

    Args:
        decoder: any member's decoder (for the sizes).
        attentions: each member's own attention mechanism (its options; the weights come from
            the leaves).
        rates: each member's dropout probability.
        prefix: the decoder's name in the unfused module's state dict (``"model.decoder."``).
    """

    def __init__(
        self,
        decoder: Decoder,
        attentions: Sequence[Attention],
        rates: DropoutRates,
        prefix: str,
    ) -> None:
        super().__init__()
        self.rates = rates
        self.hidden_size = decoder.hidden_size
        self.num_layers = decoder.num_layers
        self.context_dim = decoder.context_dim
        self._vocab, self._emb = decoder.embedding.weight.shape
        self.input_sizes = [cell.input_size for cell in decoder.cells]
        self.out = FusedLinear.like(decoder.out)
        self._prefix = prefix
        self.set_attention(attentions)

    def set_attention(self, attentions: Sequence[Attention]) -> None:
        """The fused mechanism of these members' own mechanisms (new members: after
        :meth:`FusedSeq2Seq.keep`); its leaves are then unbound until the layout binds them."""
        self.attention, self._attention_leaves = fuse_attention(
            attentions, self._prefix + "attention."
        )

    def leaves(self, prefix: str) -> list[Leaf]:
        H = self.hidden_size
        out = [
            Leaf(
                self, "embedding", (self._vocab, self._emb), {prefix + "embedding.weight": identity}
            )
        ]
        for layer, size in enumerate(self.input_sizes):
            name = f"{prefix}cells.{layer}."
            # the rows [input; state] of [W_ih | W_hh]^T: one product of [x; h] per step
            weights = {
                name + "weight_ih": lambda t, size=size: t[:size].t(),
                name + "weight_hh": lambda t, size=size: t[size:].t(),
            }
            out.append(Leaf(self, f"weight_{layer}", (size + H, 4 * H), weights))
            out.append(Leaf(self, f"bias_ih_{layer}", (1, 4 * H), {name + "bias_ih": first_row}))
            out.append(Leaf(self, f"bias_hh_{layer}", (1, 4 * H), {name + "bias_hh": first_row}))
        out += linear_leaves(
            self.out, prefix + "out", self.out.in_features, self.out.out_features, True
        )
        return out + self._attention_leaves

    def forward(
        self, tgt_in: torch.Tensor, state: LSTMState, memory: torch.Tensor, mask: torch.Tensor
    ) -> tuple[torch.Tensor, Any]:
        """Teacher forcing over M members' targets.

        Args:
            tgt_in: (M, B, T) decoder inputs; state: the bridge's per-layer (M, B, H) h and c;
            memory (M, B, S, D) and mask (M, B, S) from the encoder.
        Returns:
            logits (M, B, T, V), and the mechanism's cache on the M * B member-major rows
            (memory attention's ``C``: (M * B, K, D), what a student's §3.1 term reads).
        """
        M, B, T = tgt_in.shape
        E = self._emb
        emb = member_embedding(self.embedding, tgt_in.transpose(1, 2))  # (M, T, B, E)
        emb = member_dropout(emb, self.rates, self.training)
        w0 = self.weight_0
        gates_in = (
            torch.baddbmm(self.bias_ih_0 + self.bias_hh_0, emb.reshape(M, T * B, E), w0[:, :E])
            .view(M, T, B, -1)
            .unbind(1)
        )  # T x (M, B, 4H): layer 0's embedding part, biases in
        weights = [w0[:, E:]] + [
            getattr(self, f"weight_{layer}") for layer in range(1, self.num_layers)
        ]
        biases = [None] + [
            getattr(self, f"bias_ih_{layer}") + getattr(self, f"bias_hh_{layer}")
            for layer in range(1, self.num_layers)
        ]
        cache = self.attention.precompute(fold(memory), fold(mask))
        attn_state = self.attention.initial_state(cache)
        hs, cs = state
        ctx = memory.new_zeros(M, B, self.context_dim)  # (M, B, C)
        tops, contexts = [], []
        for t in range(T):
            x = member_dropout(ctx, self.rates, self.training)  # the fed-back context
            new_h, new_c = [], []
            for layer in range(self.num_layers):
                inp = torch.cat([x, hs[layer]], dim=-1)  # (M, B, X + H)
                base = gates_in[t] if layer == 0 else biases[layer]
                h, c = lstm_pointwise(torch.baddbmm(base, inp, weights[layer]), cs[layer])
                new_h.append(h)
                new_c.append(c)
                x = (
                    member_dropout(h, self.rates, self.training)
                    if layer < self.num_layers - 1
                    else h
                )
            hs, cs = new_h, new_c
            ctx, attn_state, _ = self.attention.step(fold(h), cache, attn_state, False)  # (M*B, C)
            ctx = ctx.view(M, B, -1)
            tops.append(h)
            contexts.append(ctx)
        features = torch.cat(
            [torch.stack(tops, 2), torch.stack(contexts, 2)], dim=-1
        )  # (M, B, T, H+C)
        return self.out(fold(features)).view(M, B, T, -1), cache  # (M, B, T, V)
