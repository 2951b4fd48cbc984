"""``nn.LSTM`` over a packed batch, as PyTorch's CPU kernel computes it, with a cheaper backward.

PyTorch's CPU implementation of a packed LSTM (``aten/src/ATen/native/RNN.cpp``: ``PackedLayer``,
``ReversedPackedLayer``, ``LSTMCell``) projects the whole packed input once per layer and
direction, then reads each time step's rows with ``narrow``. Autograd's backward of every one of
those ``narrow`` calls writes a zero tensor the size of the *whole* projection and adds it to the
running gradient: for a batch of 64 sentences of up to 40 tokens that is 82 zero-fills and adds of
a (1380, 4H) tensor per layer, most of the tiny model's training step at L=40 (and
``pad_packed_sequence``'s backward does the same once per distinct length).

:func:`packed_lstm` makes the same calls in the same order (``linear`` for the projections, the
cell's in-place ``add_``/``sigmoid_``/``tanh_`` and products, the same slices of the state when
sentences end or start), so every output and every gradient is the same to the last bit
(``tests/lightning_modules/test_packed_lstm.py`` compares them with ``torch.equal``); it only
reads the time steps with one ``split`` (whose backward is one ``cat``) and gives the output
padded from the per-step rows. Used for CPU training at full precision on batches of different
lengths (:func:`applies`); elsewhere (no gradient, CUDA's cuDNN kernel, autocast, one length)
``nn.LSTM`` itself runs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

State = tuple[torch.Tensor, torch.Tensor]  # h, c: (rows, H)


def applies(rnn: nn.LSTM, data: torch.Tensor, batch_sizes: torch.Tensor | None = None) -> bool:
    """Whether :func:`packed_lstm` is the faster way here: CPU, gradients on, full precision, an
    LSTM without projections, sentences of different lengths (``batch_sizes`` falling). Where
    every sentence has the same length PyTorch's own pass is the faster one (encoder forward and
    backward, L=40, all lengths equal: 21.0 against 30.2 ms at the tiny preset, 1,072 against
    1,125 ms at paper_copy; lengths 1 to 41: 904 against 603 ms at paper_copy)."""
    return (
        (batch_sizes is None or int(batch_sizes[0]) > int(batch_sizes[-1]))
        and data.device.type == "cpu"
        and torch.is_grad_enabled()
        and not torch.is_autocast_enabled("cpu")
        and data.dtype == torch.float32
        and rnn.proj_size == 0
        and rnn.batch_first is not None
    )


def _cell(x: torch.Tensor, state: State, w_hh: torch.Tensor, b_hh: torch.Tensor) -> State:
    """One LSTM step on a precomputed input projection ``x`` (rows, 4H): RNN.cpp's ``LSTMCell``."""
    h, c = state
    return lstm_pointwise(F.linear(h, w_hh, b_hh).add_(x), c)


def lstm_pointwise(gates: torch.Tensor, c: torch.Tensor) -> State:
    """The LSTM cell's pointwise part as RNN.cpp's ``LSTMCell`` computes it (in place on
    ``gates``): gates (..., 4H) in the order i, f, g, o and c (..., H) -> h, c (..., H). Any
    leading dimensions (the fused model's member dimension among them)."""
    i, f, g, o = gates.unsafe_chunk(4, -1)
    i, f, g, o = i.sigmoid_(), f.sigmoid_(), g.tanh_(), o.sigmoid_()
    c = (f * c).add_(i * g)
    return o * c.tanh(), c


def _forward(steps: list[torch.Tensor], sizes: list[int], zeros: State, w_hh, b_hh):
    """RNN.cpp's ``PackedLayer``: per-step outputs and the final state of every row."""
    outputs, finished = [], []
    state = zeros
    last = sizes[0]
    for x, size in zip(steps, sizes):
        if size < last:  # sentences ended: keep their final state, go on with the rest
            finished.append(
                (state[0].narrow(0, size, last - size), state[1].narrow(0, size, last - size))
            )
            state = (state[0].narrow(0, 0, size), state[1].narrow(0, 0, size))
        last = size
        state = _cell(x, state, w_hh, b_hh)
        outputs.append(state[0])
    finished.append(state)
    finished.reverse()
    return outputs, (torch.cat([s[0] for s in finished]), torch.cat([s[1] for s in finished]))


def _reverse(steps: list[torch.Tensor], sizes: list[int], zeros: State, w_hh, b_hh):
    """RNN.cpp's ``ReversedPackedLayer``: from the last step back, rows joining as sentences start."""
    outputs = []
    last = sizes[-1]
    state = (zeros[0].narrow(0, 0, last), zeros[1].narrow(0, 0, last))
    for x, size in zip(reversed(steps), reversed(sizes)):
        if size > last:
            state = (
                torch.cat([state[0], zeros[0].narrow(0, last, size - last)]),
                torch.cat([state[1], zeros[1].narrow(0, last, size - last)]),
            )
        last = size
        state = _cell(x, state, w_hh, b_hh)
        outputs.append(state[0])
    outputs.reverse()
    return outputs, state


def packed_lstm(
    rnn: nn.LSTM, data: torch.Tensor, batch_sizes: torch.Tensor
) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
    """Run ``rnn`` over packed ``data`` (N, E) with ``batch_sizes`` (S,) from
    ``pack_padded_sequence``.

    Returns:
        the last layer's output per time step, S tensors of (batch_sizes[t], D) (both directions
        concatenated), and the final h and c, (layers * directions, B, H), rows in the packed
        (sorted) order, as ``nn.LSTM`` returns them before unsorting.
    """
    sizes = batch_sizes.tolist()
    directions = 2 if rnn.bidirectional else 1
    zeros = data.new_zeros(sizes[0], rnn.hidden_size)
    zeros = (zeros, zeros)
    layer_input = data
    finals_h, finals_c = [], []
    for layer in range(rnn.num_layers):
        per_direction = []
        for direction in range(directions):
            suffix = f"_l{layer}" + ("_reverse" if direction else "")
            w_ih, w_hh = getattr(rnn, "weight_ih" + suffix), getattr(rnn, "weight_hh" + suffix)
            b_ih, b_hh = getattr(rnn, "bias_ih" + suffix), getattr(rnn, "bias_hh" + suffix)
            projected = F.linear(layer_input, w_ih, b_ih)  # (N, 4H)
            steps = list(projected.split(sizes))
            run = _reverse if direction else _forward
            outputs, (h, c) = run(steps, sizes, zeros, w_hh, b_hh)
            per_direction.append(outputs)
            finals_h.append(h)
            finals_c.append(c)
        if layer == rnn.num_layers - 1:
            break
        packed = [torch.cat(outputs) for outputs in per_direction]  # (N, H) each
        layer_input = torch.cat(packed, -1) if directions > 1 else packed[0]
        if rnn.dropout and rnn.training:
            layer_input = F.dropout(layer_input, rnn.dropout, True)
    if directions > 1:
        steps = [torch.cat(pair, -1) for pair in zip(*per_direction)]
    else:
        steps = per_direction[0]
    return steps, torch.stack(finals_h), torch.stack(finals_c)


def pad_steps(steps: list[torch.Tensor], total_length: int) -> torch.Tensor:
    """Per-step rows (S x (b_t, D), b_t not increasing) as a zero-padded (B, total_length, D)
    batch in the packed (sorted) row order: ``pad_packed_sequence``'s values, with a backward of
    one slice per step."""
    rows = steps[0].shape[0]
    padded = [F.pad(x, (0, 0, 0, rows - x.shape[0])) if x.shape[0] < rows else x for x in steps]
    out = torch.stack(padded, 1)  # (B, S, D)
    if total_length > out.shape[1]:
        out = F.pad(out, (0, 0, 0, total_length - out.shape[1]))
    return out
