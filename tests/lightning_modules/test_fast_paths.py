"""The decoder's faster forms compute what the plain ones compute: the teacher-forced forward bit for
bit (same logits, loss and gradients, dropout draws included), the fused decoding step to rounding
with the same greedy and beam outputs; and every mechanism runs under CPU bf16 autocast."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from datamodules.copy_task import collate_copy
from lightning_modules import ATTENTION_REGISTRY, Seq2Seq

MECHANISMS = sorted(ATTENTION_REGISTRY)
VOCAB = 24


def make_model(attention: str, seed: int = 0, dropout: float = 0.0, layers: int = 2) -> Seq2Seq:
    torch.manual_seed(seed)
    sizes = {"bidirectional": False} if ATTENTION_REGISTRY[attention].equal_sizes else {}
    return Seq2Seq.from_preset(
        "tiny",
        VOCAB,
        VOCAB,
        attention=attention,
        max_source_len=16,
        dropout=dropout,
        decoder_layers=layers,
        encoder_layers=layers,
        **sizes,
    )


def make_batch(lengths: list[int], seed: int = 0) -> dict[str, torch.Tensor]:
    rng = np.random.default_rng(seed)
    return collate_copy([rng.integers(4, VOCAB, size=n) for n in lengths])


def reference_teacher_forcing(model: Seq2Seq, src, src_lengths, tgt_in) -> torch.Tensor:
    """The decoder's teacher-forced loop as it was written before (emb[:, t] per step)."""
    dec = model.decoder
    state, cache, attn_state = model._start(src, src_lengths)
    batch, steps = tgt_in.shape
    emb = dec.embedding(tgt_in)  # (B, T, E)
    hs, cs = state
    ctx = emb.new_zeros(batch, dec.context_dim)
    outputs = []
    for t in range(steps):
        x = dec._drop(torch.cat([emb[:, t], ctx], dim=-1))
        hs, cs = dec._cells(x, hs, cs)
        ctx, attn_state, _ = dec.attention.step(hs[-1], cache, attn_state, False)
        outputs.append(torch.cat([hs[-1], ctx], dim=-1))
    return dec.out(torch.stack(outputs, dim=1))


@pytest.mark.parametrize("attention", MECHANISMS)
def test_teacher_forcing_is_bit_identical_to_the_plain_loop(attention):
    """Training mode with dropout (monotonic: with its noise): the same random draws, the same
    logits, loss and gradients to the last bit."""
    batch = make_batch([9, 3, 12, 6])
    src, lengths, tgt = batch["src"], batch["src_lengths"], batch["tgt"]
    results = []
    for forward in ("model", "reference"):
        model = make_model(attention, dropout=0.3).train()
        torch.manual_seed(11)
        tgt_in = model.shift_target(tgt)
        if forward == "model":
            logits = model(src, lengths, tgt_in)
        else:
            logits = reference_teacher_forcing(model, src, lengths, tgt_in)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), tgt.reshape(-1), ignore_index=0)
        loss.backward()
        grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
        results.append((logits.detach(), loss.detach(), grads))
    (la, lossa, ga), (lb, lossb, gb) = results
    assert torch.equal(la, lb) and torch.equal(lossa, lossb)
    assert ga.keys() == gb.keys() and all(torch.equal(ga[n], gb[n]) for n in ga)


@pytest.mark.parametrize("attention", MECHANISMS)
@pytest.mark.parametrize("layers", [1, 2])
def test_fused_decode_step_matches_the_cells(attention, layers):
    """One step with the decode tables (embedding gates by token, one product per layer) gives the
    cells' logits, state and context to rounding."""
    model = make_model(attention, seed=3, layers=layers).eval()
    batch = make_batch([7, 4, 11], seed=3)
    with torch.inference_mode():
        state, cache, attn_state = model._start(batch["src"], batch["src_lengths"])
        ctx = torch.randn(3, model.decoder.context_dim)
        y = torch.tensor([1, 5, 17])
        tables = model.decoder.decode_tables()
        plain = model.decoder.step(y, state, ctx, cache, attn_state, True)
        fused = model.decoder.step(y, state, ctx, cache, attn_state, True, tables=tables)
    torch.testing.assert_close(fused[0], plain[0], rtol=1e-5, atol=1e-5)  # logits
    for a, b in zip(fused[1][0] + fused[1][1], plain[1][0] + plain[1][1]):  # h and c per layer
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(fused[2], plain[2], rtol=1e-5, atol=1e-5)  # context


@pytest.mark.parametrize("attention", MECHANISMS)
def test_greedy_and_beam_outputs_are_those_of_the_cells(attention):
    """Decoding through the fused step gives the tokens the plain step gives, and the beam scores
    to rounding; greedy's mask through the output bias gives what a mask set each step gives."""
    model = make_model(attention, seed=5).eval()
    batch = make_batch([9, 2, 5, 12, 1], seed=5)
    src, lengths = batch["src"], batch["src_lengths"]
    fused_greedy = model.greedy_decode(src, lengths)
    fused_beam = model.beam_search(src, lengths, beam_size=4, return_scores=True)
    never = torch.tensor(model.never_emitted)

    def plain_step(masked=False):  # the plain step, no tables: padding and BOS masked each step
        def step(*args):
            logits, *rest = model.decoder.step(*args)
            return (logits.index_fill_(1, never, float("-inf")) if masked else logits, *rest)

        return step

    model._decode_step = plain_step
    plain_greedy = model.greedy_decode(src, lengths)
    plain_beam = model.beam_search(src, lengths, beam_size=4, return_scores=True)
    assert torch.equal(fused_greedy[0], plain_greedy[0])
    assert torch.equal(fused_greedy[1], plain_greedy[1])
    assert torch.equal(fused_beam[0], plain_beam[0]) and torch.equal(fused_beam[1], plain_beam[1])
    torch.testing.assert_close(fused_beam[2], plain_beam[2], rtol=0, atol=1e-5)


def test_dropout_in_training_mode_keeps_the_plain_step():
    """The tables are for decoding: a step in training mode with dropout draws its masks as before
    (the same logits as without tables)."""
    model = make_model("bahdanau", dropout=0.5).train()
    batch = make_batch([4, 6])
    state, cache, attn_state = model._start(batch["src"], batch["src_lengths"])
    ctx, y = torch.randn(2, model.decoder.context_dim), torch.tensor([5, 9])
    with torch.no_grad():
        tables = model.decoder.decode_tables()
    torch.manual_seed(1)
    with_tables = model.decoder.step(y, state, ctx, cache, attn_state, tables=tables)[0]
    torch.manual_seed(1)
    without = model.decoder.step(y, state, ctx, cache, attn_state)[0]
    assert torch.equal(with_tables, without)


@pytest.mark.parametrize("attention", MECHANISMS)
def test_every_mechanism_runs_under_cpu_bf16_autocast(attention):
    """What ``Trainer(precision="bf16-mixed")`` does on CPU: training step, greedy, beam and the
    attention trace under ``torch.autocast("cpu", bfloat16)``, with finite results."""
    model = make_model(attention, dropout=0.2)
    batch = make_batch([8, 5, 3])
    src, lengths, tgt = batch["src"], batch["src_lengths"], batch["tgt"]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model.train()(src, lengths, model.shift_target(tgt))
        loss = F.cross_entropy(logits.reshape(-1, VOCAB).float(), tgt.reshape(-1), ignore_index=0)
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    model.eval()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        tokens, out_lengths = model.greedy_decode(src, lengths)
        beam, _, scores = model.beam_search(src, lengths, beam_size=3, return_scores=True)
        trace = model.attention_trace(src, lengths)
    assert tokens.shape[0] == beam.shape[0] == 3 and torch.isfinite(scores).all()
    assert trace["weights"].shape[:2] == trace["tokens"].shape


def test_lightning_bf16_mixed_trains_and_validates_on_cpu(quiet_trainer):
    """The opt-in: ``Trainer(precision="bf16-mixed")`` runs the module's training and validation
    (loss, decoding, BLEU) on CPU."""
    from datamodules import CopyTaskDataModule
    from lightning_modules import Seq2SeqModule

    dm = CopyTaskDataModule(
        vocab_size=20, max_length=6, train_size=64, val_size=16, test_size=16, batch_size=16
    )
    module = Seq2SeqModule(
        dm.src_vocab_size, dm.tgt_vocab_size, attention="bahdanau", max_source_len=dm.max_source_len
    )
    trainer = quiet_trainer(max_steps=3, precision="bf16-mixed", limit_val_batches=1)
    trainer.fit(module, datamodule=dm)
    metrics = trainer.validate(module, datamodule=dm, verbose=False)[0]
    assert np.isfinite(metrics["val/loss"]) and "val/bleu" in metrics


def test_fastest_precision_is_bf16_only_where_it_is_native(monkeypatch):
    from lightning_modules import precision

    monkeypatch.setattr(precision, "cpu_flags", lambda: {"avx2", "avx512f"})
    assert precision.fastest_precision("cpu") == "32-true"
    monkeypatch.setattr(precision, "cpu_flags", lambda: {"avx512f", "avx512_bf16"})
    assert precision.fastest_precision("cpu") == "bf16-mixed"
    monkeypatch.setattr(precision, "cpu_flags", lambda: {"amx_bf16"})
    assert precision.native_bf16(torch.device("cpu"))
    # a GPU before Ampere (a V100, a T4): torch's check counts its bf16 emulation by default, and
    # such a GPU was given bf16-mixed
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(
        torch.cuda, "is_bf16_supported", lambda including_emulation=True: including_emulation
    )
    assert not precision.native_bf16("cuda") and precision.fastest_precision("cuda") == "32-true"
