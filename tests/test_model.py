"""Seq2Seq: shapes, greedy vs beam search, beam reordering, configuration errors (fast)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from datamodules.copy_task import collate_copy
from lightning_modules import ATTENTION_REGISTRY, PRESETS, Seq2Seq
from lightning_modules.attention import attention_options

MECHANISMS = sorted(ATTENTION_REGISTRY)
VOCAB = 24  # 20 symbols + 4 specials
MAX_SOURCE_LEN = 16


def make_model(attention: str, seed: int = 0, **overrides) -> Seq2Seq:
    torch.manual_seed(seed)
    return Seq2Seq.from_preset(
        "tiny", VOCAB, VOCAB, attention=attention, max_source_len=MAX_SOURCE_LEN, **overrides
    ).eval()


def make_batch(lengths: list[int], seed: int = 0) -> dict[str, torch.Tensor]:
    rng = np.random.default_rng(seed)
    return collate_copy([rng.integers(4, VOCAB, size=n) for n in lengths])


def rescore(model: Seq2Seq, batch, tokens: torch.Tensor, lengths: torch.Tensor, alpha: float) -> torch.Tensor:
    """Teacher-forced log-probability of given outputs (up to and incl. EOS) / len ** alpha: (B,)."""
    with torch.no_grad():
        logits = model(batch["src"], batch["src_lengths"], model.shift_target(tokens))  # (B, T, V)
    logp = torch.log_softmax(logits, -1).gather(2, tokens.unsqueeze(-1)).squeeze(-1)  # (B, T)
    real = torch.arange(tokens.shape[1]).unsqueeze(0) < lengths.unsqueeze(1)  # (B, T)
    return (logp * real).sum(1) / lengths.float() ** alpha


@pytest.mark.parametrize("attention", MECHANISMS)
def test_forward_and_decode_shapes(attention):
    model = make_model(attention)
    batch = make_batch([0, 3, 7, 12])
    src, src_lengths = batch["src"], batch["src_lengths"]
    logits = model(src, src_lengths, model.shift_target(batch["tgt"]))
    assert logits.shape == (4, 13, VOCAB)
    assert torch.isfinite(logits).all()
    tokens, lengths = model.greedy_decode(src, src_lengths, max_len=9)
    assert tokens.shape[0] == 4 and tokens.shape[1] <= 9 and tokens.shape[1] == int(lengths.max())
    for row, length in zip(tokens, lengths):
        assert (row[length:] == model.pad_id).all()  # padding after the end
        assert (row[: length - 1] != model.eos_id).all()  # EOS only at the end, if at all


@pytest.mark.parametrize("attention", MECHANISMS)
def test_training_gradients_reach_encoder_and_attention(attention):
    model = make_model(attention).train()
    batch = make_batch([2, 5, 9])
    logits = model(batch["src"], batch["src_lengths"], model.shift_target(batch["tgt"]))
    torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch["tgt"].flatten(), ignore_index=0).backward()
    assert model.encoder.embedding.weight.grad is not None
    assert model.encoder.embedding.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("attention", MECHANISMS)
def test_greedy_equals_beam_of_one(attention):
    model = make_model(attention)
    batch = make_batch([0, 1, 4, 8, 12], seed=1)
    greedy, greedy_lengths = model.greedy_decode(batch["src"], batch["src_lengths"], max_len=15)
    beam, beam_lengths, _ = model.beam_search(
        batch["src"], batch["src_lengths"], beam_size=1, max_len=15, return_scores=True
    )
    assert torch.equal(greedy, beam)
    assert torch.equal(greedy_lengths, beam_lengths)


@pytest.mark.parametrize("attention", MECHANISMS)
def test_beam_score_at_least_greedy(attention):
    """Beam 10 finds outputs at least as likely (length-normalised) as greedy on a random model.

    Beam search is not guaranteed to beat greedy in general; with length normalisation it does
    here for every sentence. The beam's own scores must equal an independent teacher-forced rescoring.
    """
    model = make_model(attention, seed=3)
    batch = make_batch([0, 3, 7, 10, 5, 1], seed=3)
    alpha = 1.0
    greedy, greedy_lengths = model.greedy_decode(batch["src"], batch["src_lengths"], max_len=15)
    beam, beam_lengths, beam_scores = model.beam_search(
        batch["src"], batch["src_lengths"], beam_size=10, max_len=15, length_penalty=alpha, return_scores=True
    )
    greedy_scores = rescore(model, batch, greedy, greedy_lengths, alpha)
    rescored = rescore(model, batch, beam, beam_lengths, alpha)
    torch.testing.assert_close(rescored, beam_scores, atol=1e-4, rtol=1e-4)
    assert (beam_scores >= greedy_scores - 1e-4).all(), (beam_scores, greedy_scores)


@pytest.mark.parametrize("attention", MECHANISMS)
def test_beam_batched_equals_one_sentence_at_a_time(attention):
    """Reordering of LSTM and attention state across beams is right: batching changes nothing."""
    model = make_model(attention, seed=2)
    lengths = [9, 2, 5]
    batch = make_batch(lengths, seed=2)
    together, together_lengths, _ = model.beam_search(
        batch["src"], batch["src_lengths"], beam_size=4, max_len=14, return_scores=True
    )
    for i, n in enumerate(lengths):
        src = batch["src"][i : i + 1, : n + 1]
        alone, alone_lengths, _ = model.beam_search(
            src, batch["src_lengths"][i : i + 1], beam_size=4, max_len=14, return_scores=True
        )
        length = int(alone_lengths[0])
        assert length == int(together_lengths[i])
        assert torch.equal(alone[0, :length], together[i, :length])


@pytest.mark.parametrize("attention", MECHANISMS)
def test_attention_trace(attention):
    model = make_model(attention)
    batch = make_batch([3, 6])
    trace = model.attention_trace(batch["src"], batch["src_lengths"], max_len=8)
    greedy, _ = model.greedy_decode(batch["src"], batch["src_lengths"], max_len=8)
    assert torch.equal(trace["tokens"], greedy)
    steps, source = trace["tokens"].shape[1], batch["src"].shape[1]
    assert trace["weights"].shape == (2, steps, source)
    assert (trace["weights"][0, :, 4:] == 0).all()  # nothing on padding
    if attention == "memory":
        K = model.attention_kwargs.get("K", attention_options("memory")["K"])
        assert trace["alpha"].shape == (2, steps, source, K)
        assert trace["beta"].shape == (2, steps, K)


@pytest.mark.parametrize("attention", [n for n in MECHANISMS if "max_source_len" in attention_options(n)])
def test_max_source_len_comes_from_the_model_unless_given(attention):
    model = Seq2Seq.from_preset("tiny", VOCAB, VOCAB, attention=attention, max_source_len=37)
    assert model.attention_kwargs["max_source_len"] == 37
    model = Seq2Seq.from_preset(
        "tiny", VOCAB, VOCAB, attention=attention, attention_kwargs={"max_source_len": 50}, max_source_len=37
    )
    assert model.attention_kwargs["max_source_len"] == 50


def test_presets_and_overrides():
    assert {"tiny", "paper_copy", "paper_wmt"} <= set(PRESETS)
    model = Seq2Seq.from_preset("tiny", VOCAB, VOCAB, attention="none", hidden_size=48, decoder_layers=2)
    assert model.decoder.hidden_size == 48 and len(model.decoder.cells) == 2
    with pytest.raises(ValueError, match="valid presets: .*paper_copy"):
        Seq2Seq.from_preset("huge", VOCAB, VOCAB, attention="none")
    with pytest.raises(ValueError, match="valid names: .*none"):
        Seq2Seq(VOCAB, VOCAB, attention="no_such_attention")


def test_beam_size_larger_than_vocab_fails():
    model = make_model("none")
    batch = make_batch([2])
    with pytest.raises(ValueError, match="beam_size"):
        model.beam_search(batch["src"], batch["src_lengths"], beam_size=VOCAB + 1, max_len=5)
