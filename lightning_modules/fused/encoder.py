"""The fused encoder: :class:`lightning_modules.seq2seq.Encoder` for M members, both LSTM
directions in one recurrence over packed steps.

Every product is one ``bmm``/``baddbmm`` over M * directions stacked rows; the cell's pointwise
part is :func:`lightning_modules.packed_lstm.lstm_pointwise`, what the unfused encoder runs.

Packed as the unfused model's sequences are: the backward direction reads each sentence reversed
within its own length (its step j reads position n-1-j of a sentence of length n), so both
directions run from step 0 and a sentence takes part in steps 0..n-1 only. Step t works on the
first ``sizes[t]`` rows, enough for every member's sentences still running (fewest when each
member's batch is sorted by length, longest first, as the fused model sorts it), the way
``nn.LSTM`` narrows its batch over a packed sequence. A row whose sentence has ended in one
member while another member's row of the same index runs on is computed and never read. The
outputs of all steps are kept packed, (M * dirs, N, H); each direction's final state is the row
of its sentence's last step; the memory is read back from them per position, zero at padding.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from ..packed_lstm import lstm_pointwise
from ..seq2seq import Encoder, LSTMState
from .layers import DropoutRates, FusedLinear, member_dropout, member_embedding
from .layout import Leaf, identity, linear_leaves


class Packing(NamedTuple):
    """Where each row of the packed steps reads and writes (module docstring); indices into
    flattened tensors."""

    sizes: list[int]  # rows of each step, (steps,)
    rows: int  # N = sum(sizes)
    inputs: torch.Tensor  # (M, dirs, N): the padded position (m*B*S + b*S + s) a packed row reads
    outputs: torch.Tensor  # (M, B, S, dirs): the packed row (of M*dirs*N) of each position
    finals: torch.Tensor  # (M, dirs, B): the packed row of each sentence's last step
    mask: torch.Tensor  # (M, B, S) True at real tokens


def packing(lengths: torch.Tensor, S: int, dirs: int) -> Packing:
    """The packed layout of M batches of sentence ``lengths`` (M, B) (each >= 1), padded to S."""
    M, B = lengths.shape
    device = lengths.device
    steps = int(lengths.max())
    ts = torch.arange(steps, device=device)
    running = lengths.unsqueeze(-1) > ts  # (M, B, steps)
    highest = (running * torch.arange(1, B + 1, device=device).view(1, B, 1)).amax(dim=(0, 1))
    sizes = highest.tolist()  # rows up to the last running sentence of any member, per step
    count = highest  # (steps,)
    offset = torch.cumsum(count, 0) - count  # (steps,) first row of each step
    N = int(count.sum())
    t_row = torch.repeat_interleave(ts, count)  # (N,) each packed row's step
    b_row = torch.arange(N, device=device) - offset[t_row]  # (N,) and its sentence
    n_row = lengths[:, b_row]  # (M, N) that sentence's length, per member
    reversed_pos = torch.where(t_row < n_row, n_row - 1 - t_row, t_row)  # (M, N)
    positions = [t_row.expand(M, N), reversed_pos][:dirs]
    member_start = torch.arange(M, device=device).view(M, 1) * (B * S)
    inputs = torch.stack([member_start + b_row * S + s for s in positions], 1)  # (M, dirs, N)
    pos = torch.arange(S, device=device)
    mask = pos < lengths.unsqueeze(-1)  # (M, B, S)
    n = lengths.unsqueeze(-1)  # (M, B, 1)
    step_of = [pos.expand(M, B, S), n - 1 - pos][:dirs]  # the step that wrote each position
    rows_base = (
        torch.arange(M, device=device).view(M, 1, 1, 1) * dirs + torch.arange(dirs, device=device)
    ) * N  # (M, 1, 1, dirs) first packed row of each member and direction
    written = torch.stack([offset[t.clamp(0, steps - 1)] for t in step_of], -1)  # (M, B, S, dirs)
    b_pos = torch.arange(B, device=device).view(1, B, 1, 1)
    outputs = rows_base + torch.where(mask.unsqueeze(-1), written + b_pos, 0)  # (M, B, S, dirs)
    finals = rows_base.view(M, dirs, 1) + (
        offset[lengths - 1] + torch.arange(B, device=device)
    ).unsqueeze(1)
    return Packing(sizes, N, inputs, outputs, finals, mask)


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
        """The embedding; per layer W_ih^T and W_hh^T of both directions side by side,
        (dirs, X, 4H), and the biases (dirs, 1, 4H); the bridge's linear maps."""
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
            src: (M, B, S) source ids, right-padded; lengths: (M, B), each >= 1 (sorted longest
                first within each member for the fewest products; any order is right).
        Returns:
            memory (M, B, S, D) (zeros at padding), mask (M, B, S), and the decoder's initial
            state: per decoder layer h (M, B, H) and c (M, B, H).
        """
        M, B, S = src.shape
        dirs, H = self.directions, self.hidden_size
        pack = packing(lengths, S, dirs)
        N = pack.rows
        emb = member_dropout(member_embedding(self.embedding, src), self.rates, self.training)
        rows = emb.reshape(M * B * S, -1).index_select(0, pack.inputs.view(-1))  # (M*dirs*N, E)
        # later layers read both directions' outputs at the position their row reads
        follow = pack.outputs.view(M * B * S, dirs).index_select(0, pack.inputs.view(-1)).view(-1)
        finals_h, finals_c = [], []
        for layer, size in enumerate(self.input_sizes):
            w_ih = getattr(self, f"weight_ih_{layer}").reshape(M * dirs, size, 4 * H)
            w_hh = getattr(self, f"weight_hh_{layer}").reshape(M * dirs, H, 4 * H)
            bias = getattr(self, f"bias_ih_{layer}") + getattr(self, f"bias_hh_{layer}")
            projected = torch.baddbmm(
                bias.view(M * dirs, 1, 4 * H), rows.view(M * dirs, N, size), w_ih
            )  # (M*dirs, N, 4H) the input part of the gates, biases in
            h = c = projected.new_zeros(M * dirs, pack.sizes[0], H)
            hs, cs = [], []
            for step, n in zip(projected.split(pack.sizes, dim=1), pack.sizes):
                if n < h.shape[1]:  # every member's sentences past the first n have ended
                    h, c = h[:, :n], c[:, :n]
                h, c = lstm_pointwise(torch.baddbmm(step, h, w_hh), c)  # (M*dirs, n, H)
                hs.append(h)
                cs.append(c)
            out = torch.cat(hs, 1).view(M * dirs * N, H)  # packed outputs of this layer
            last = pack.finals.view(-1)
            finals_h.append(out.index_select(0, last).view(M, dirs, B, H))
            finals_c.append(
                torch.cat(cs, 1).view(M * dirs * N, H).index_select(0, last).view(M, dirs, B, H)
            )
            if layer < self.num_layers - 1:
                out = member_dropout(out.view(M, dirs * N, H), self.rates, self.training)
                rows = out.reshape(M * dirs * N, H).index_select(0, follow)  # (M*dirs*N*dirs, H)
        memory = out.view(M * dirs * N, H).index_select(0, pack.outputs.view(-1))
        memory = memory.view(M, B, S, dirs * H) * pack.mask.unsqueeze(-1).to(memory.dtype)
        return memory, pack.mask, self._bridge(finals_h, finals_c)

    def masked(
        self, src: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, LSTMState]:
        """:meth:`forward` without packing: every sentence runs all S steps of both directions,
        each step masked on the device (going forward a sentence past its end holds its last
        state; going backward it starts from zeros at its last token), as
        :func:`lightning_modules.cuda_graphs.masked_lstm` runs ``nn.LSTM``. Nothing is read on
        the host and every shape is fixed by ``src``'s, so a CUDA graph can capture it; the same
        memory, mask and decoder state as :meth:`forward` to float rounding (more work: padded
        positions are computed and masked).

        Args:
            src: (M, B, S) source ids, right-padded; lengths: (M, B), each >= 1, any order.
        Returns:
            as :meth:`forward`.
        """
        M, B, S = src.shape
        dirs, H = self.directions, self.hidden_size
        mask = torch.arange(S, device=src.device) < lengths.unsqueeze(-1)  # (M, B, S)
        # step t of the backward direction reads position S - 1 - t: its inputs and its mask
        # flipped along S, so that both directions run from step 0 in one recurrence
        real = mask.unsqueeze(1) if dirs == 1 else torch.stack([mask, mask.flip(-1)], 1)
        real = real.reshape(M * dirs, B, S, 1).unbind(2)  # S x (M*dirs, B, 1)
        x = member_dropout(member_embedding(self.embedding, src), self.rates, self.training)
        finals_h, finals_c = [], []
        for layer, size in enumerate(self.input_sizes):
            w_ih = getattr(self, f"weight_ih_{layer}").reshape(M * dirs, size, 4 * H)
            w_hh = getattr(self, f"weight_hh_{layer}").reshape(M * dirs, H, 4 * H)
            bias = getattr(self, f"bias_ih_{layer}") + getattr(self, f"bias_hh_{layer}")
            # (M, dirs, B, S, X): each direction's inputs in its step order
            inputs = x.unsqueeze(1) if dirs == 1 else torch.stack([x, x.flip(2)], 1)
            projected = torch.baddbmm(
                bias.view(M * dirs, 1, 4 * H), inputs.reshape(M * dirs, B * S, size), w_ih
            ).view(M * dirs, B, S, 4 * H)  # the input part of the gates, biases in
            zeros = projected.new_zeros(M * dirs, B, H)
            h = c = zeros
            outputs = []
            for t, step in enumerate(projected.unbind(2)):
                h_new, c_new = lstm_pointwise(torch.baddbmm(step, h, w_hh), c)  # (M*dirs, B, H)
                outputs.append(torch.where(real[t], h_new, zeros))
                # a padded step keeps the state: going forward it comes after the sentence (its
                # last state is held), going backward before it (the state is still zeros)
                h = torch.where(real[t], h_new, h)
                c = torch.where(real[t], c_new, c)
            steps = torch.stack(outputs, 2).view(M, dirs, B, S, H)  # (M, dirs, B, S, H)
            # back to positions, both directions side by side: (M, B, S, dirs * H)
            x = steps[:, 0] if dirs == 1 else torch.cat([steps[:, 0], steps[:, 1].flip(2)], -1)
            finals_h.append(h.view(M, dirs, B, H))
            finals_c.append(c.view(M, dirs, B, H))
            if layer < self.num_layers - 1:
                x = member_dropout(x, self.rates, self.training)
        return x, mask, self._bridge(finals_h, finals_c)

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
