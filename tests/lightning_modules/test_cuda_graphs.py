"""Graphed training steps (lightning_modules/cuda_graphs.py).

On the CPU: the capturable step computes what the eager step computes (the masked LSTM against
the packed one, the padded bucket's loss and gradients against the batch's own, for every
mechanism), the eager path of :class:`GraphedSteps` trains as Lightning's automatic optimisation
does, the warm-up's snapshot is put back exactly, and a Lightning fit of an adopted module counts
its steps, clips and saves a plain checkpoint. Marked ``gpu`` (skipped without CUDA): captured and
replayed steps give the same losses and weights as eager steps on the same batches, for every
mechanism: ``python -m pytest -m gpu tests/lightning_modules/test_cuda_graphs.py`` on a GPU.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from test_model import MECHANISMS, VOCAB, make_batch, make_model, size_overrides
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from lightning_modules import Seq2SeqModule
from lightning_modules.cuda_graphs import (
    CudaGraphSeq2SeqModule,
    GraphedSteps,
    bucket_shape,
    enable_cuda_graphs,
    encode_static,
    masked_lstm,
    static_loss,
)

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture
def full_fp32():
    """cuDNN's LSTM (the eager encoder) in float32, not TF32 (cuDNN's default on Ampere and
    later): the comparison is with float32 rounding, as the graphed steps' products are."""
    before = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32 = before


LENGTHS = [
    [5, 3, 2],
    [9, 6, 3, 7],
    [4, 12, 1, 8, 2, 6, 3, 5, 7],
]  # three buckets: (8, 8, 8), (8, 16, 16), (16, 16, 16)


def quiet(model: torch.nn.Module) -> torch.nn.Module:
    """Nothing random in a training step: monotonic attention's pre-sigmoid noise off."""
    if hasattr(model.decoder.attention, "sigmoid_noise"):
        model.decoder.attention.sigmoid_noise = 0.0
    return model.train()


def eager_loss(model, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Seq2SeqModule's training loss, as its training_step computes it."""
    logits = model(batch["src"], batch["src_lengths"], model.shift_target(batch["tgt"]))
    return F.cross_entropy(logits.reshape(-1, VOCAB), batch["tgt"].reshape(-1), ignore_index=0)


def test_bucket_shapes_round_up_and_respect_the_source_cap():
    assert bucket_shape(4, 13, 13) == (8, 16, 16)
    assert bucket_shape(64, 41, 41) == (64, 48, 48)
    assert bucket_shape(64, 41, 41, src_cap=41) == (64, 41, 48)  # memory with PE: max_source_len
    assert bucket_shape(5, 3, 9, multiple=1) == (5, 3, 9)
    assert bucket_shape(3, 20, 2, src_cap=16) == (8, 20, 8)  # never below the batch's own length


@pytest.mark.parametrize("layers, bidirectional", [(1, True), (2, True), (2, False)])
def test_the_masked_lstm_is_the_packed_lstm(layers, bidirectional):
    torch.manual_seed(0)
    rnn = torch.nn.LSTM(5, 7, num_layers=layers, bidirectional=bidirectional, batch_first=True)
    x = torch.randn(4, 9, 5, requires_grad=True)
    lengths = torch.tensor([9, 4, 1, 6])
    mask = torch.arange(9)[None, :] < lengths[:, None]
    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    out, (h, c) = rnn(packed)
    out, _ = pad_packed_sequence(out, batch_first=True, total_length=9)
    m_out, m_h, m_c = masked_lstm(rnn, x, mask)
    torch.testing.assert_close(m_out, out, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(m_h, h, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(m_c, c, rtol=1e-5, atol=1e-6)
    (g_masked,) = torch.autograd.grad((m_out.sum() + m_h.sum() + m_c.sum()), x)
    (g_packed,) = torch.autograd.grad((out.sum() + h.sum() + c.sum()), x)
    torch.testing.assert_close(g_masked, g_packed, rtol=1e-5, atol=1e-6)


def test_the_static_encoder_is_the_encoder():
    model = quiet(make_model("memory"))
    batch = make_batch([9, 6, 3, 7])
    memory, mask, (hs, cs) = model.encoder(batch["src"], batch["src_lengths"])
    s_memory, s_mask, (s_hs, s_cs) = encode_static(
        model.encoder, batch["src"], batch["src_lengths"]
    )
    assert torch.equal(s_mask, mask)
    torch.testing.assert_close(s_memory, memory, rtol=1e-5, atol=1e-6)
    for a, b in zip(s_hs + s_cs, hs + cs):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def padded(batch: dict[str, torch.Tensor], shape: tuple[int, int, int]) -> dict[str, torch.Tensor]:
    """``batch`` copied into a bucket of ``shape``, as GraphedSteps stages it."""
    b, s, t = shape
    out = {
        "src": torch.zeros(b, s, dtype=torch.long),
        "src_lengths": torch.ones(b, dtype=torch.long),
        "tgt": torch.zeros(b, t, dtype=torch.long),
    }
    n, width = batch["src"].shape
    out["src"][:n, :width] = batch["src"]
    out["src_lengths"][:n] = batch["src_lengths"]
    out["tgt"][:n, : batch["tgt"].shape[1]] = batch["tgt"]
    return out


@pytest.mark.parametrize("attention", MECHANISMS)
def test_a_padded_bucket_gives_the_batch_s_loss_and_gradients(attention):
    """The capturable step (masked encoder, batch padded to its bucket) against the module's own
    loss on the batch as it is: the same loss and gradients to float32 rounding."""
    model = quiet(make_model(attention))
    batch = make_batch([9, 6, 3, 7])
    shape = bucket_shape(4, batch["src"].shape[1], batch["tgt"].shape[1], src_cap=16)
    assert shape != (4, batch["src"].shape[1], batch["tgt"].shape[1])  # padding is exercised
    loss = eager_loss(model, batch)
    grads = torch.autograd.grad(loss, list(model.parameters()), allow_unused=True)
    bucket = padded(batch, shape)
    s_loss = static_loss(model, bucket["src"], bucket["src_lengths"], bucket["tgt"], pad_id=0)
    s_grads = torch.autograd.grad(s_loss, list(model.parameters()), allow_unused=True)
    torch.testing.assert_close(s_loss, loss, rtol=1e-5, atol=1e-6)
    for (name, _), g, s in zip(model.named_parameters(), grads, s_grads):
        assert (g is None) == (s is None), name
        if g is not None:
            torch.testing.assert_close(s, g, rtol=1e-4, atol=1e-6, msg=name)


def eager_steps(module: Seq2SeqModule, batches, clip: float | None) -> list[float]:
    """What Lightning's automatic optimisation does per batch: zero, loss, backward, clip, Adam."""
    optimizer = torch.optim.Adam(module.parameters(), lr=module.hparams.lr)
    losses = []
    for batch in batches:
        optimizer.zero_grad(set_to_none=True)
        loss = eager_loss(module.model, batch)
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_(module.parameters(), clip)
        optimizer.step()
        losses.append(loss.item())
    return losses


def graphed_module(attention: str = "memory", device: str = "cpu", lr: float = 3e-3):
    torch.manual_seed(0)
    module = Seq2SeqModule(
        VOCAB, VOCAB, attention=attention, max_source_len=16, lr=lr, **size_overrides(attention)
    )
    quiet(module.model)
    return module.to(device)


def test_the_eager_path_of_graphed_steps_trains_as_lightning_does():
    """Without capture (a CPU model, or a shape past MAX_GRAPHS) the same step runs eagerly."""
    batches = [make_batch(lengths, seed=i) for i, lengths in enumerate(LENGTHS * 2)]
    reference, module = graphed_module(), graphed_module()
    expected = eager_steps(reference, batches, clip=0.05)
    assert expected != eager_steps(graphed_module(), batches, clip=None)  # the clipping clips
    optimizer = torch.optim.Adam(module.parameters(), lr=module.hparams.lr)
    steps = GraphedSteps(module.model, optimizer, pad_id=0, clip_val=0.05, capture=False)
    losses = [steps.step(b).item() for b in batches]
    assert len(steps.buckets) == 3 and steps.eager_steps == 6 and steps.graphs == 0
    assert losses == pytest.approx(expected, rel=1e-5)
    # float32 rounding, which Adam's normalisation lifts to ~1e-3 of a step (lr 3e-3) where a
    # gradient is near zero
    for (name, p), q in zip(module.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=name)


def test_the_warm_up_snapshot_is_put_back_into_the_same_tensors():
    module = graphed_module()
    optimizer = torch.optim.Adam(module.parameters(), lr=module.hparams.lr)
    steps = GraphedSteps(module.model, optimizer, pad_id=0, capture=False)
    fresh = steps.snapshot()  # no Adam state yet
    before = {n: p.detach().clone() for n, p in module.named_parameters()}
    pointers = [p.data_ptr() for p in module.parameters()]
    steps.step(make_batch([5, 3]))
    steps.restore(fresh)  # as after the first warm-up: Adam's new state zeroed (a fresh Adam's)
    assert [p.data_ptr() for p in module.parameters()] == pointers
    for name, p in module.named_parameters():
        assert torch.equal(p, before[name]), name
    assert all(torch.count_nonzero(v) == 0 for s in optimizer.state.values() for v in s.values())
    steps.step(make_batch([5, 3]))
    saved = steps.snapshot()
    after_one = {n: p.detach().clone() for n, p in module.named_parameters()}
    state = {id(p): {k: v.clone() for k, v in s.items()} for p, s in optimizer.state.items()}
    steps.step(make_batch([7, 2], seed=1))
    steps.restore(saved)
    for name, p in module.named_parameters():
        assert torch.equal(p, after_one[name]), name
    for p, s in optimizer.state.items():
        for key, value in s.items():
            assert torch.equal(value, state[id(p)][key]), key


def copy_dm(seed: int = 0):
    from datamodules import CopyTaskDataModule

    return CopyTaskDataModule(
        vocab_size=20, max_length=8, train_size=96, val_size=16, test_size=16, batch_size=16,
        seed=seed,
    )  # fmt: skip


def test_a_lightning_fit_of_an_adopted_module_counts_clips_and_saves_a_plain_checkpoint(
    quiet_trainer, tmp_path
):
    """On the CPU the adopted module takes its steps eagerly through the same hooks: global_step
    counts them, gradient_clip_val reaches them, the weights are the plain module's, and the
    checkpoint loads as a Seq2SeqModule."""
    import lightning.pytorch as pl

    runs = {}
    for graphed in (False, True):
        pl.seed_everything(0, verbose=False)
        module = graphed_module(lr=1e-2)
        if graphed:
            assert CudaGraphSeq2SeqModule.adopt(module) is module
        trainer = quiet_trainer(max_steps=6, gradient_clip_val=0.05, limit_val_batches=0)
        trainer.fit(module, datamodule=copy_dm())
        assert trainer.global_step == 6
        runs[graphed] = module
    plain, graphed = runs[False], runs[True]
    assert type(graphed) is CudaGraphSeq2SeqModule and graphed.graphed_steps().clip_val == 0.05
    for (name, p), q in zip(graphed.named_parameters(), plain.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5, msg=name)
    unclipped = graphed_module(lr=1e-2)  # the clipping made a difference worth checking
    pl.seed_everything(0, verbose=False)
    quiet_trainer(max_steps=6, limit_val_batches=0).fit(unclipped, datamodule=copy_dm())
    assert not torch.allclose(unclipped.model.decoder.out.weight, plain.model.decoder.out.weight)
    path = tmp_path / "graphed.ckpt"
    trainer.save_checkpoint(path)
    loaded = Seq2SeqModule.load_from_checkpoint(path)
    assert type(loaded) is Seq2SeqModule
    for p, q in zip(loaded.parameters(), graphed.parameters()):
        assert torch.equal(p, q)


def test_cuda_graphs_are_ignored_where_the_trial_trains_on_the_cpu(quiet_trainer):
    module = graphed_module()
    line = enable_cuda_graphs(module, quiet_trainer(max_steps=1))
    assert line.startswith("trainer.cuda_graphs ignored: this trial trains on the CPU")
    assert type(module) is Seq2SeqModule


def test_a_distilling_student_is_refused():
    module = graphed_module()
    module.hparams.distill_weight = 1.0  # as a student's hyperparameters say
    with pytest.raises(ValueError, match="distill_weight > 0"):
        CudaGraphSeq2SeqModule.adopt(module)


# ---------------------------------------------------------------- on a GPU


@pytest.mark.gpu
@needs_cuda
@pytest.mark.usefixtures("full_fp32")
@pytest.mark.parametrize("attention", MECHANISMS)
def test_graphed_steps_give_the_eager_losses_and_weights_on_cuda(attention):
    """Captured and replayed steps (three shapes, each seen twice, so graphs are replayed after
    other graphs ran) against eager steps of the module on the same batches: the same losses and
    weights to float32 rounding."""
    batches = [
        {k: v.cuda() for k, v in make_batch(lengths, seed=i).items()}
        for i, lengths in enumerate(LENGTHS * 2)
    ]
    reference, module = graphed_module(attention, "cuda"), graphed_module(attention, "cuda")
    expected = eager_steps(reference, batches, clip=1.0)
    optimizer = torch.optim.Adam(module.parameters(), lr=module.hparams.lr, capturable=True)
    steps = GraphedSteps(module.model, optimizer, pad_id=0, clip_val=1.0, capture=True)
    losses = [steps.step(b).item() for b in batches]
    assert steps.graphs == 3 and steps.eager_steps == 0
    assert losses == pytest.approx(expected, rel=1e-4)
    # float32 rounding (cuDNN's LSTM against plain products), lifted by Adam where a gradient is
    # near zero: on the CPU up to 1.3e-5 after these 6 steps at lr 3e-3. A stale input, a step
    # taken twice or a warm-up left in would be off by the order of lr.
    for (name, p), q in zip(module.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-3, atol=5e-5, msg=name)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.usefixtures("full_fp32")
def test_a_lightning_fit_with_cuda_graphs_trains_as_eager_on_cuda(tmp_path):
    import lightning.pytorch as pl

    weights, graphs = {}, 0
    for graphed in (False, True):
        pl.seed_everything(0, verbose=False)
        module = graphed_module(lr=1e-2)
        trainer = pl.Trainer(
            accelerator="gpu", devices=1, max_steps=12, gradient_clip_val=1.0,
            limit_val_batches=0, logger=False, enable_checkpointing=False,
            enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
        )  # fmt: skip
        if graphed:
            assert enable_cuda_graphs(module, trainer).startswith("CUDA graphs:")
        trainer.fit(module, datamodule=copy_dm())
        assert trainer.global_step == 12
        weights[graphed] = {n: p.detach().cpu() for n, p in module.named_parameters()}
        graphs = module.graphed_steps().graphs if graphed else graphs
    assert graphs >= 1
    for name, p in weights[True].items():
        torch.testing.assert_close(p, weights[False][name], rtol=1e-3, atol=5e-5, msg=name)


def test_a_capture_out_of_gpu_memory_says_what_frees_memory():
    """Running out of memory while capturing said "train without graphs" alone, as for any other
    failure; the message names what frees memory (each bucket's graph keeps its own pool)."""
    from lightning_modules.cuda_graphs import capture_failed

    oom = capture_failed(
        "the fused training step", torch.cuda.OutOfMemoryError("CUDA out of memory")
    )
    assert "ran out of GPU memory" in str(oom)
    assert all(key in str(oom) for key in ("resources.gpu", "fusion.max_members", "cuda_graphs"))
    other = capture_failed("the training step", RuntimeError("operation not permitted"))
    assert str(other) == (
        "capturing the training step as a CUDA graph failed (operation not permitted); train "
        "without graphs (trainer.cuda_graphs: false)"
    )
