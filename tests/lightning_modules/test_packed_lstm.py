"""The encoder's packed LSTM (lightning_modules/packed_lstm.py) against ``nn.LSTM`` itself: the
same outputs, final states and gradients of every input and weight, bit for bit."""

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from lightning_modules import packed_lstm


def _run(rnn, emb, lengths, mine: bool, seed: int):
    """Forward and backward of one batch; returns the output, h_n, c_n and every gradient."""
    rnn.zero_grad()
    emb = emb.detach().clone().requires_grad_(True)
    torch.manual_seed(seed)  # the dropout between layers draws the same masks
    packed = pack_padded_sequence(emb, lengths, batch_first=True, enforce_sorted=False)
    seq_len = emb.shape[1]
    if mine:
        assert packed_lstm.applies(rnn, packed.data)
        steps, h, c = packed_lstm.packed_lstm(rnn, packed.data, packed.batch_sizes)
        unsort = packed.unsorted_indices
        out = packed_lstm.pad_steps(steps, seq_len).index_select(0, unsort)
        h, c = h.index_select(1, unsort), c.index_select(1, unsort)
    else:
        o, (h, c) = rnn(packed)
        out, _ = pad_packed_sequence(o, batch_first=True, total_length=seq_len)
    # a loss that weighs every output, final state and padding position differently
    g = torch.Generator().manual_seed(1)
    loss = sum((t * torch.randn(t.shape, generator=g)).sum() for t in (out, h, c))
    loss.backward()
    grads = {name: p.grad.clone() for name, p in rnn.named_parameters()}
    return out.detach(), h.detach(), c.detach(), emb.grad, grads


@pytest.mark.parametrize(
    "layers, bidirectional, dropout",
    [(1, True, 0.0), (2, True, 0.3), (2, False, 0.0), (1, False, 0.0)],
)
def test_outputs_states_and_gradients_equal_nn_lstm_bit_for_bit(layers, bidirectional, dropout):
    torch.manual_seed(0)
    rnn = nn.LSTM(12, 16, num_layers=layers, bidirectional=bidirectional, dropout=dropout,
                  batch_first=True)  # fmt: skip
    lengths = torch.tensor([7, 3, 9, 9, 1, 5, 2, 8])  # unsorted, ties, a one-token sentence
    emb = torch.randn(8, 11, 12)  # padded beyond the longest (total_length 11 > 9)
    theirs = _run(rnn, emb, lengths, mine=False, seed=5)
    mine = _run(rnn, emb, lengths, mine=True, seed=5)
    for a, b in zip(theirs[:4], mine[:4]):
        assert a.shape == b.shape and torch.equal(a, b)
    assert theirs[4].keys() == mine[4].keys()
    for name in theirs[4]:
        assert torch.equal(theirs[4][name], mine[4][name]), name


def test_used_only_where_it_pays():
    rnn = nn.LSTM(4, 4, batch_first=True)
    data = torch.randn(5, 4)
    assert packed_lstm.applies(rnn, data)
    with torch.no_grad():
        assert not packed_lstm.applies(rnn, data)  # decoding: nn.LSTM's own kernel
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not packed_lstm.applies(rnn, data)
    assert not packed_lstm.applies(nn.LSTM(4, 4, proj_size=2, batch_first=True), data)
    assert packed_lstm.applies(rnn, data, torch.tensor([3, 2]))  # lengths 2, 2, 1
    assert not packed_lstm.applies(rnn, data, torch.tensor([3, 3]))  # all of one length
