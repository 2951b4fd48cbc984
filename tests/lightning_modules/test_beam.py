"""Greedy and beam decoding: per-sentence length limits, and beam search against brute force (fast)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from test_model import MECHANISMS, VOCAB, TableDecoder, make_model

from datamodules.copy_task import collate_copy
from lightning_modules import Seq2Seq
from lightning_modules.seq2seq import EOS_ID

A, B, C = 4, 5, 6  # ordinary target tokens


def sentences(lengths: list[int], seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(4, VOCAB, size=n) for n in lengths]


def decode(model: Seq2Seq, batch: dict[str, torch.Tensor], mode: str) -> tuple[torch.Tensor, ...]:
    """Default settings (max_len=None, default length penalty): tokens, lengths and, for beam, scores."""
    if mode == "greedy":
        return model.greedy_decode(batch["src"], batch["src_lengths"])
    return model.beam_search(batch["src"], batch["src_lengths"], beam_size=4, return_scores=True)


@pytest.mark.parametrize("eos_boost", [-1.0, 0.0, 0.1])
@pytest.mark.parametrize("mode", ["greedy", "beam"])
@pytest.mark.parametrize("attention", MECHANISMS)
def test_sentence_decodes_the_same_alone_and_in_any_batch(attention, mode, eos_boost):
    """The default length limit is each sentence's own (2 * source length + 10), not the batch's
    longest source's, so a sentence's output (tokens, length, score) does not depend on its batch;
    a sentence that never emits EOS is closed at its own limit. The random models rarely emit EOS
    (most sentences run to their limit, all of them with EOS's logit lowered by 1); raising it by
    0.1 makes many finish early."""
    model = make_model(attention, seed=7)
    with torch.no_grad():
        model.decoder.out.bias[EOS_ID] += eos_boost
    lengths = [1, 12, 4, 0, 7]
    sents = sentences(lengths, seed=7)
    alone = [decode(model, collate_copy([s]), mode) for s in sents]
    for order in ([0, 1, 2, 3, 4], [3, 4, 1], [2, 0, 4, 1, 3]):
        together = decode(model, collate_copy([sents[i] for i in order]), mode)
        for row, i in enumerate(order):
            length = int(alone[i][1][0])
            assert int(together[1][row]) == length, (
                f"sentence {i} (source length {lengths[i]}) in batch {order}"
            )
            assert torch.equal(together[0][row, :length], alone[i][0][0, :length])
            if mode == "beam":
                torch.testing.assert_close(together[2][row], alone[i][2][0], rtol=0, atol=1e-5)
    for i, (tokens, out_lengths, *_) in enumerate(alone):
        if not (tokens == EOS_ID).any():
            assert int(out_lengths[0]) == 2 * (lengths[i] + 1) + 10  # source length counts its EOS


def restrict_outputs(model: Seq2Seq, allowed: tuple[int, ...], eos_shift: float) -> Seq2Seq:
    """Give every target token but ``allowed`` probability 0 (output bias -inf), so beam search over
    a large nominal vocabulary sees only ``allowed`` and a beam of at most VOCAB can hold every
    hypothesis a short search produces; shift EOS's bias by ``eos_shift``."""
    with torch.no_grad():
        blocked = torch.ones(VOCAB, dtype=torch.bool)
        blocked[list(allowed)] = False
        model.decoder.out.bias[blocked] = float("-inf")
        model.decoder.out.bias[EOS_ID] += eos_shift
    return model


def brute_force(
    model: Seq2Seq, src: torch.Tensor, tokens: tuple[int, ...], max_len: int, alpha: float
):
    """Best of every finished sequence (tokens^n EOS, n < max_len) for one sentence, each scored by
    teacher forcing: sum log p (incl. EOS) / len ** alpha. Returns (sequence, score)."""
    seqs = [p + (EOS_ID,) for n in range(max_len) for p in itertools.product(tokens, repeat=n)]
    lengths = torch.tensor([len(s) for s in seqs])  # (N,)
    tgt = torch.zeros(len(seqs), max_len, dtype=torch.long)  # (N, T) padded with PAD_ID = 0
    for i, s in enumerate(seqs):
        tgt[i, : len(s)] = torch.tensor(s)
    n = len(seqs)
    with torch.no_grad():
        logits = model(
            src.expand(n, -1), torch.full((n,), src.shape[1]), model.shift_target(tgt)
        )  # (N, T, V)
    logp = torch.log_softmax(logits, -1).gather(2, tgt.unsqueeze(-1)).squeeze(-1)  # (N, T)
    real = torch.arange(max_len).unsqueeze(0) < lengths.unsqueeze(1)  # (N, T)
    scores = torch.where(real, logp, 0.0).sum(1) / lengths.float() ** alpha  # (N,)
    best = int(scores.argmax())
    return seqs[best], float(scores[best])


@pytest.mark.parametrize(
    "tokens,beam_size,max_len",
    [
        (
            (A, B),
            VOCAB,
            4,
        ),  # 15 sequences; every one stays in the beam (at most 8 live x 3 = 24 candidates)
        (
            (A,),
            2,
            8,
        ),  # A^n EOS: a beam of 2 holds everything, and the early stop may fire from step 1
    ],
)
@pytest.mark.parametrize("alpha,eos_shift", [(0.0, -1.0), (0.6, -1.0), (1.0, 0.0)])
@pytest.mark.parametrize("attention", MECHANISMS)
def test_beam_search_equals_brute_force(attention, alpha, eos_shift, tokens, beam_size, max_len):
    """With a beam that prunes nothing, beam search returns the best finished sequence under its
    scoring rule: the early stop may end the search, never change its answer. (With these EOS
    shifts the best is [EOS] at alpha 0, and of lengths 1 to max_len at alpha 0.6 and 1.)"""
    model = restrict_outputs(make_model(attention, seed=11), (EOS_ID,) + tokens, eos_shift)
    sents = sentences([3, 0, 6], seed=11)
    batch = collate_copy(sents)
    out, out_lengths, scores = model.beam_search(
        batch["src"],
        batch["src_lengths"],
        beam_size=beam_size,
        max_len=max_len,
        length_penalty=alpha,
        return_scores=True,
        check_every=1,
    )
    for row, sent in enumerate(sents):
        src = collate_copy([sent])["src"]  # (1, S) without the batch's padding
        best, best_score = brute_force(model, src, tokens, max_len, alpha)
        length = int(out_lengths[row])
        assert tuple(out[row, :length].tolist()) == best, (
            f"sentence {row}: brute force {best} at {best_score:.4f}"
        )
        assert abs(float(scores[row]) - best_score) < 1e-4


def table_model(probs: torch.Tensor) -> Seq2Seq:
    """A model whose next-token distribution is ``probs[step]`` (whatever the previous token)."""
    steps, vocab = probs.shape
    log_probs = (
        torch.log_softmax(probs.log(), dim=-1).unsqueeze(1).expand(steps, vocab, vocab)
    )  # (T, V, V)
    model = Seq2Seq(vocab, vocab, attention="none", embedding_dim=4, hidden_size=4).eval()
    with torch.no_grad():  # the bridge gives h = tanh(0) = 0: the step counter starts at 0
        for bridge in (model.encoder.bridge_h, model.encoder.bridge_c):
            bridge.weight.zero_()
            bridge.bias.zero_()
    model.decoder = TableDecoder(log_probs.contiguous(), model.decoder)
    return model


def test_early_stop_with_length_penalty_keeps_searching_for_a_better_long_hypothesis():
    """The reported case: beam 2, max_len 4, alpha 1. After step 1 the pool holds [EOS] (-0.511)
    and [a EOS]; the live [a b] is at -1.033 raw, -0.516 normalised at its current length, which
    the old rule took for its best, and stopped. But a completion may keep almost all of its raw
    score while its length (the divisor) grows: [a b c EOS] reaches -1.272 / 4 = -0.318."""
    V, p_stay = 8, 0.8874
    probs = torch.full((4, V), 1e-9)  # (step, next token)
    probs[0, EOS_ID], probs[0, A] = 0.6, 0.4
    probs[1, B], probs[1, EOS_ID] = 0.89, 0.11
    probs[2, C], probs[2, EOS_ID] = p_stay, 1 - p_stay
    probs[3, EOS_ID], probs[3, C] = p_stay, 1 - p_stay
    model = table_model(probs)
    log_probs = torch.log_softmax(probs.log(), dim=-1)  # (step, next token)
    # brute force over every finished sequence of A, B, C up to 4 tokens
    scored = {
        p + (EOS_ID,): float(sum(log_probs[t, tok] for t, tok in enumerate(p + (EOS_ID,))))
        / (len(p) + 1)
        for n in range(4)
        for p in itertools.product((A, B, C), repeat=n)
    }
    best = max(scored, key=scored.get)
    assert best == (A, B, C, EOS_ID) and abs(scored[best] + 0.318) < 1e-3
    assert abs(scored[(EOS_ID,)] + 0.511) < 1e-3  # what the old rule returned
    src, src_lengths = torch.tensor([[4, 5, EOS_ID]]), torch.tensor([3])
    tokens, lengths, scores = model.beam_search(
        src,
        src_lengths,
        beam_size=2,
        max_len=4,
        length_penalty=1.0,
        return_scores=True,
        check_every=1,
    )
    assert tokens.tolist() == [list(best)] and lengths.tolist() == [4]
    assert abs(float(scores[0]) - scored[best]) < 1e-4


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_early_stop_still_stops_when_nothing_live_can_win(alpha):
    """[EOS] at step 0 scores log 0.9; at step 1 [a EOS] makes 2 finished, and the live [a a]
    (raw log 0.1 + log 0.5 = -3.0) cannot beat -0.105 even spread over max_len 20 tokens
    (-3.0 / 20 = -0.15): the search ends after 2 of its 20 steps."""
    V = 8
    probs = torch.full((20, V), 1e-9)
    probs[0, EOS_ID], probs[0, A] = 0.9, 0.1
    probs[1:, EOS_ID], probs[1:, A] = 0.5, 0.5
    model = table_model(probs)
    calls = []
    table_step = model.decoder.step
    model.decoder.step = lambda *args: calls.append(1) or table_step(*args)
    src, src_lengths = torch.tensor([[4, 5, EOS_ID]]), torch.tensor([3])
    tokens = model.beam_search(
        src, src_lengths, beam_size=2, max_len=20, length_penalty=alpha, check_every=1
    )
    assert tokens.tolist() == [[EOS_ID]]
    assert len(calls) == 2


def test_a_float64_model_keeps_float64_beam_scores():
    """The beam's log-prob sums and its finished pool follow the model's precision (fp32 at least):
    a float64 model's log-probs and scores were rounded to fp32, so CPU and CUDA disagreed in the 8th digit."""
    model = make_model("bahdanau").double().eval()
    batch = collate_copy(sentences([5, 3], seed=0))
    with torch.no_grad():
        _, _, scores = model.beam_search(
            batch["src"], batch["src_lengths"], beam_size=3, return_scores=True
        )
        _, _, scores32 = model.float().beam_search(
            batch["src"], batch["src_lengths"], 3, return_scores=True
        )
    assert scores.dtype == torch.float64 and scores32.dtype == torch.float32
