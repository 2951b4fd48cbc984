"""The fused encoder and decoder: :mod:`lightning_modules.seq2seq`'s model for M members at once.

Every tensor has a leading member dimension M and every product is one ``bmm``/``baddbmm`` over
the members. The LSTM maths is :func:`lightning_modules.packed_lstm.lstm_pointwise`, the cell the
unfused encoder runs; the attention is the mechanism's own class (:mod:`.attention`).

Encoder, both directions in one recurrence: the backward direction reads each sentence reversed
within its own length (position j of a sentence of length n reads position n-1-j), so both
directions run from step 0 over right-padded inputs and share one ``bmm`` per step, stacked as
M * directions rows. A sentence's state past its length is never read: the outputs there are
masked to zero and each direction's final state is taken at position n-1, which is what the
unfused model's packed sequences give (the same sums, in another grouping).

Decoder, as :class:`lightning_modules.seq2seq.Decoder` with the gate products grouped: layer 0's
embedding part of the gates for all steps in one product before the loop, the fed-back context
and the state in one product per step (its weight rows are stored stacked for that).
"""

from __future__ import annotations

import torch
from torch import nn

from ..packed_lstm import lstm_pointwise
from ..seq2seq import Decoder, Encoder, LSTMState
from .attention import fold, fuse_attention
from .layers import DropoutRates, FusedLinear, member_dropout, member_embedding
from .layout import Leaf, first_row, identity, linear_leaves


def _direction_part(kind: str, direction: int):
    """An LSTM weight's view for one direction: leaf slice (dirs, X, 4H) -> (4H, X) or (4H,)."""
    if kind == "weight":
        return lambda t: t[direction].t()
    return lambda t: t[direction, 0]


class FusedEncoder(nn.Module):
    """:class:`~lightning_modules.seq2seq.Encoder` over M members (module docstring).

    Args:
        encoder: any member's encoder (for the sizes; the weights come from the leaves).
        rates: each member's dropout probability.
    """

    def __init__(self, encoder: Encoder, rates: DropoutRates) -> None:
        super().__init__()
        rnn = encoder.rnn
        self.rates = rates
        self.directions = encoder.num_directions
        self.hidden_size = encoder.hidden_size
        self.num_layers = encoder.num_layers
        self.decoder_layers = encoder.decoder_layers
        self.decoder_hidden_size = encoder.decoder_hidden_size
        self.input_sizes = [rnn.input_size] + [encoder.output_size] * (rnn.num_layers - 1)
        self.bridge_h = FusedLinear.like(encoder.bridge_h)
        self.bridge_c = FusedLinear.like(encoder.bridge_c)
        self._vocab, self._emb = encoder.embedding.weight.shape

    def leaves(self, prefix: str) -> list[Leaf]:
        dirs, H = self.directions, self.hidden_size
        out = [
            Leaf(
                self, "embedding", (self._vocab, self._emb), {prefix + "embedding.weight": identity}
            )
        ]
        for layer, size in enumerate(self.input_sizes):
            for kind, rows in (
                ("weight_ih", size),
                ("weight_hh", H),
                ("bias_ih", 1),
                ("bias_hh", 1),
            ):
                parts = {
                    f"{prefix}rnn.{kind}_l{layer}{'_reverse' if d else ''}": _direction_part(
                        kind.split("_")[0], d
                    )
                    for d in range(dirs)
                }
                out.append(Leaf(self, f"{kind}_{layer}", (dirs, rows, 4 * H), parts))
        for name in ("bridge_h", "bridge_c"):
            linear = getattr(self, name)
            out += linear_leaves(
                linear, prefix + name, linear.in_features, linear.out_features, True
            )
        return out

    def forward(
        self, src: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, LSTMState]:
        """Encode M padded batches.

        Args:
            src: (M, B, S) source ids, right-padded; lengths: (M, B), each >= 1.
        Returns:
            memory (M, B, S, D) (zeros at padding), mask (M, B, S), and the decoder's initial
            state: per decoder layer h (M, B, H) and c (M, B, H).
        """
        M, B, S = src.shape
        dirs, H = self.directions, self.hidden_size
        reverse, last, mask = _orders(lengths, S, dirs)
        x = member_dropout(member_embedding(self.embedding, src), self.rates, self.training)
        finals_h, finals_c = [], []
        for layer, size in enumerate(self.input_sizes):
            w_ih = getattr(self, f"weight_ih_{layer}").reshape(M * dirs, size, 4 * H)
            w_hh = getattr(self, f"weight_hh_{layer}").reshape(M * dirs, H, 4 * H)
            bias = getattr(self, f"bias_ih_{layer}") + getattr(self, f"bias_hh_{layer}")
            rows = x.reshape(M * B * S, size)
            inputs = (
                x if dirs == 1 else torch.stack([x, rows.index_select(0, reverse).view_as(x)], 1)
            )
            projected = torch.baddbmm(
                bias.reshape(M * dirs, 1, 4 * H), inputs.reshape(M * dirs, B * S, size), w_ih
            ).view(M * dirs, B, S, 4 * H)  # (M*dirs, B, S, 4H) input part of the gates, biases in
            h = c = projected.new_zeros(M * dirs, B, H)
            hs, cs = [], []
            for step in projected.unbind(2):
                h, c = lstm_pointwise(torch.baddbmm(step, h, w_hh), c)  # (M*dirs, B, H)
                hs.append(h)
                cs.append(c)
            out = torch.stack(hs, 2)  # (M*dirs, B, S, H)
            finals_h.append(out.reshape(-1, H).index_select(0, last).view(M, dirs, B, H))
            finals_c.append(
                torch.stack(cs, 2).reshape(-1, H).index_select(0, last).view(M, dirs, B, H)
            )
            out = out.view(M, dirs, B, S, H)
            if dirs == 1:
                x = out[:, 0]  # (M, B, S, H)
            else:
                backward = out[:, 1].reshape(M * B * S, H).index_select(0, reverse)
                x = torch.cat([out[:, 0], backward.view(M, B, S, H)], -1)  # (M, B, S, 2H)
            if layer < self.num_layers - 1:
                x = member_dropout(x, self.rates, self.training)
        memory = x * mask.unsqueeze(-1).to(x.dtype)  # (M, B, S, D)
        return memory, mask, self._bridge(finals_h, finals_c)

    def _bridge(self, finals_h: list[torch.Tensor], finals_c: list[torch.Tensor]) -> LSTMState:
        """Every layer's and direction's final state, in nn.LSTM's h_n order per sentence, through
        the bridge: per decoder layer h and c (M, B, H)."""
        M, _, B, _ = finals_h[0].shape
        states = []
        for finals, bridge in ((finals_h, self.bridge_h), (finals_c, self.bridge_c)):
            stacked = torch.stack(finals, 1).permute(0, 3, 1, 2, 4)  # (M, B, layers, dirs, H)
            out = torch.tanh(bridge(stacked.reshape(M * B, -1)))  # (M*B, L_dec * H)
            out = out.view(M, B, self.decoder_layers, self.decoder_hidden_size)
            states.append([out[:, :, layer] for layer in range(self.decoder_layers)])
        return states[0], states[1]


def _orders(
    lengths: torch.Tensor, S: int, dirs: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Index tensors of a batch: ``reverse`` (M*B*S,) reads each sentence reversed within its
    length (padding stays), ``last`` (M*dirs*B,) each direction's row at position n-1 of the
    flattened (M*dirs*B*S) outputs, and the mask (M, B, S)."""
    M, B = lengths.shape
    positions = torch.arange(S, device=lengths.device)  # (S,)
    n = lengths.unsqueeze(-1)  # (M, B, 1)
    mask = positions < n  # (M, B, S)
    within = torch.where(mask, n - 1 - positions, positions)  # (M, B, S)
    starts = torch.arange(M * B, device=lengths.device).view(M, B, 1) * S
    reverse = (starts + within).view(-1)  # (M*B*S,)
    ends = lengths.unsqueeze(1).expand(M, dirs, B).reshape(-1) - 1  # (M*dirs*B,)
    last = torch.arange(M * dirs * B, device=lengths.device) * S + ends
    return reverse, last, mask


class FusedDecoder(nn.Module):
    """:class:`~lightning_modules.seq2seq.Decoder`'s teacher forcing over M members.

    Args:
        decoder: any member's decoder (sizes and the mechanism's class and options).
        rates: each member's dropout probability.
    """

    def __init__(self, decoder: Decoder, rates: DropoutRates, prefix: str) -> None:
        super().__init__()
        self.rates = rates
        self.hidden_size = decoder.hidden_size
        self.num_layers = decoder.num_layers
        self.context_dim = decoder.context_dim
        self._vocab, self._emb = decoder.embedding.weight.shape
        self.input_sizes = [cell.input_size for cell in decoder.cells]
        self.out = FusedLinear.like(decoder.out)
        self.attention, self._attention_leaves = fuse_attention(
            decoder.attention, prefix + "attention."
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
    ) -> torch.Tensor:
        """Teacher forcing over M members' targets.

        Args:
            tgt_in: (M, B, T) decoder inputs; state: the bridge's per-layer (M, B, H) h and c;
            memory (M, B, S, D) and mask (M, B, S) from the encoder.
        Returns:
            logits (M, B, T, V).
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
        return self.out(fold(features)).view(M, B, T, -1)  # (M, B, T, V)


def network_leaves(
    encoder: FusedEncoder, decoder: FusedDecoder, prefix: str = "model."
) -> list[Leaf]:
    """Every leaf of the fused model, parts named as in ``Seq2SeqModule.state_dict()``."""
    return encoder.leaves(prefix + "encoder.") + decoder.leaves(prefix + "decoder.")
