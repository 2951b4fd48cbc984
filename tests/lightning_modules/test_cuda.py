"""The model on a CUDA GPU: every registered mechanism computes there what it computes on the CPU
(float64, same weights: teacher-forced logits, loss and gradients to rounding, the same greedy and
beam outputs), and Lightning's reduced precisions train on it.

Marked ``gpu`` and skipped where torch sees no CUDA device (CI, the 2-core machines): run them on a
GPU machine with ``python -m pytest -m gpu tests/lightning_modules/test_cuda.py``."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from test_model import MECHANISMS, VOCAB, make_batch, make_model

from lightning_modules import Seq2Seq

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def batch_on(device: str) -> dict[str, torch.Tensor]:
    return {k: v.to(device) for k, v in make_batch([9, 6, 3, 7]).items()}


def step(model: Seq2Seq, batch: dict[str, torch.Tensor]):
    src, lengths, tgt = batch["src"], batch["src_lengths"], batch["tgt"]
    logits = model(src, lengths, model.shift_target(tgt))
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), tgt.reshape(-1), ignore_index=0)
    model.zero_grad()
    loss.backward()
    grads = {n: p.grad.detach().cpu() for n, p in model.named_parameters() if p.grad is not None}
    return logits.detach().cpu(), loss.item(), grads


@pytest.mark.parametrize("attention", MECHANISMS)
def test_cuda_computes_what_the_cpu_computes(attention):
    cpu = make_model(attention, dropout=0.0).double()
    if hasattr(cpu.decoder.attention, "sigmoid_noise"):
        cpu.decoder.attention.sigmoid_noise = 0.0  # monotonic: no random draws to differ
    gpu = copy.deepcopy(cpu).cuda()
    b_cpu, b_gpu = batch_on("cpu"), batch_on("cuda")
    # training mode (cuDNN's LSTM backward runs only there), dropout 0: nothing random
    logits_c, loss_c, grads_c = step(cpu.train(), b_cpu)
    logits_g, loss_g, grads_g = step(gpu.train(), b_gpu)
    cpu.eval(), gpu.eval()
    torch.testing.assert_close(logits_g, logits_c, rtol=1e-9, atol=1e-10)
    assert loss_g == pytest.approx(loss_c, rel=1e-10)
    assert grads_g.keys() == grads_c.keys()
    for name in grads_c:
        torch.testing.assert_close(grads_g[name], grads_c[name], rtol=1e-7, atol=1e-9, msg=name)
    with torch.no_grad():
        for _ in range(2):  # twice: the decode tables are built once and reused
            tok_c, len_c = cpu.greedy_decode(b_cpu["src"], b_cpu["src_lengths"])
            tok_g, len_g = gpu.greedy_decode(b_gpu["src"], b_gpu["src_lengths"])
            assert torch.equal(tok_g.cpu(), tok_c) and torch.equal(len_g.cpu(), len_c)
        beam_c, _, score_c = cpu.beam_search(
            b_cpu["src"], b_cpu["src_lengths"], beam_size=4, return_scores=True
        )
        beam_g, _, score_g = gpu.beam_search(
            b_gpu["src"], b_gpu["src_lengths"], beam_size=4, return_scores=True
        )
    assert torch.equal(beam_g.cpu(), beam_c)
    torch.testing.assert_close(score_g.cpu(), score_c, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("precision", ["bf16-mixed", "16-mixed"])
def test_reduced_precision_trains_on_cuda(precision, tmp_path):
    import lightning.pytorch as pl

    from datamodules import CopyTaskDataModule
    from lightning_modules import Seq2SeqModule

    dm = CopyTaskDataModule(
        vocab_size=20, max_length=8, train_size=256, val_size=32, test_size=32, batch_size=32
    )
    module = Seq2SeqModule(
        dm.src_vocab_size, dm.tgt_vocab_size, attention="memory", max_source_len=dm.max_source_len
    )
    trainer = pl.Trainer(
        accelerator="gpu",
        devices=1,
        precision=precision,
        max_steps=20,
        limit_val_batches=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(module, datamodule=dm)
    metrics = trainer.validate(module, datamodule=dm, verbose=False)[0]
    assert np.isfinite(metrics["val/loss"]) and "val/bleu" in metrics
    assert next(module.parameters()).dtype == torch.float32  # mixed: the weights stay fp32


def test_bf16_counts_as_native_on_this_gpu():
    from lightning_modules.precision import fastest_precision

    major, _ = torch.cuda.get_device_capability()
    assert fastest_precision("cuda") == ("bf16-mixed" if major >= 8 else "32-true")
