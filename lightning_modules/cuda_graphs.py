"""CUDA graphs for the training step: the forward pass, backward, gradient clipping and Adam of one
batch, captured once per batch shape and replayed, so a step costs one graph launch instead of
thousands of kernel launches (these models' steps on a GPU are launch-bound).

    from lightning_modules.cuda_graphs import CudaGraphSeq2SeqModule
    module = CudaGraphSeq2SeqModule.adopt(Seq2SeqModule(...))    # the same object, graphed steps
    pl.Trainer(accelerator="gpu", devices=1, gradient_clip_val=1.0).fit(module, datamodule=dm)

(the sweeps turn it on with the sweep-file key ``trainer.cuda_graphs: true``.)

What a capture needs, and how it is met:

- Static shapes. A batch is padded up to its *bucket* (batch size, source and target length
  rounded up to a multiple of :data:`PAD_MULTIPLE`; the source never past a position-dependent
  mechanism's ``max_source_len``) and copied into that bucket's input tensors; one graph per
  bucket, at most :data:`MAX_GRAPHS` (a batch of a further shape takes the same step eagerly).
  Padding changes nothing: the loss ignores padded targets, padded source positions are masked
  as in any batch, and padded rows have no target.
- No host syncs, no value-dependent shapes. The eager encoder packs its batch by lengths it reads
  on the host; :func:`masked_lstm` runs the same LSTM over the padded batch, each step masked on
  the device, giving the packed LSTM's outputs and final states to float rounding.
- Memory that stays put. Adam runs with ``capturable=True``; parameters, gradients and Adam's
  state are the same tensors in every graph.
- Warm-up before a capture, on a side stream: parameters, Adam's state and the CUDA random state
  are saved before and put back after, so the first replayed step is the first step.

The same maths as eager steps to float32 rounding (``tests/lightning_modules/test_cuda_graphs.py``);
dropout draws other masks (from the same distribution). A graphed module's checkpoint is a plain
:class:`Seq2SeqModule` checkpoint. Precision 32-true only; no gradient accumulation, no
distillation (the teacher runs eagerly).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch import nn

from .metric_names import TRAIN_LOSS
from .module import Seq2SeqModule
from .seq2seq import Encoder, LSTMState, Seq2Seq, source_mask

#: batch size, source and target length are rounded up to a multiple of this (fewer shapes)
PAD_MULTIPLE = 8
#: graphs kept per module (each holds its own activations); later shapes run eagerly
MAX_GRAPHS = 16
#: eager steps on a side stream before a capture (undone afterwards)
WARMUP_STEPS = 2


def capture_failed(step: str, exc: BaseException) -> RuntimeError:
    """The error a failed capture of ``step`` raises: out of GPU memory, what frees some (each
    captured length bucket holds a memory pool of its own); else the fallback, eager training."""
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return RuntimeError(
            f"capturing {step} as a CUDA graph ran out of GPU memory (each length bucket's graph "
            f"keeps a memory pool of its own, up to {MAX_GRAPHS}): give each trial more of the GPU "
            "(resources.gpu), put fewer trials in a fused group (fusion.max_members) or train "
            "without graphs (trainer.cuda_graphs: false)"
        )
    return RuntimeError(
        f"capturing {step} as a CUDA graph failed ({exc}); train without graphs "
        "(trainer.cuda_graphs: false)"
    )


def bucket_shape(
    batch: int, src_len: int, tgt_len: int, multiple: int = PAD_MULTIPLE, src_cap: int | None = None
) -> tuple[int, int, int]:
    """The padded (batch, source length, target length) a batch is captured at: each rounded up
    to ``multiple``, the source length not past ``src_cap`` (but never below its own length)."""

    def up(n: int) -> int:
        return -(-n // multiple) * multiple

    src = up(src_len)
    if src_cap is not None:
        src = max(src_len, min(src, src_cap))
    return up(batch), src, up(tgt_len)


def masked_lstm(
    rnn: nn.LSTM, x: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``rnn`` (batch_first) over a right-padded batch without packing, as it runs on the packed one.

    Args:
        x: (B, S, E) inputs.
        mask: (B, S) bool, True at each row's real steps (a prefix of at least one step).
    Returns:
        output (B, S, dirs * H), zero at padding; h_n and c_n (layers * dirs, B, H), each row's
        state at its own last step (forward) and first step (backward).
    """
    B, S, _ = x.shape
    dirs = 2 if rnn.bidirectional else 1
    zeros = x.new_zeros(B, rnn.hidden_size)  # (B, H)
    real = mask.unsqueeze(-1).unbind(1)  # S x (B, 1)
    layer_input = x
    finals_h, finals_c = [], []
    for layer in range(rnn.num_layers):
        outputs = []
        for direction in range(dirs):
            suffix = f"_l{layer}" + ("_reverse" if direction else "")
            w_ih, w_hh = getattr(rnn, "weight_ih" + suffix), getattr(rnn, "weight_hh" + suffix)
            b_ih, b_hh = getattr(rnn, "bias_ih" + suffix), getattr(rnn, "bias_hh" + suffix)
            projected = F.linear(layer_input, w_ih, b_ih).unbind(1)  # S x (B, 4H)
            h, c = zeros, zeros
            out: list[torch.Tensor] = [zeros] * S
            for t in range(S - 1, -1, -1) if direction else range(S):
                gates = F.linear(h, w_hh, b_hh) + projected[t]  # (B, 4H)
                i, f, g, o = gates.chunk(4, 1)
                c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)  # (B, H)
                h_new = torch.sigmoid(o) * torch.tanh(c_new)  # (B, H)
                out[t] = torch.where(real[t], h_new, zeros)  # (B, H)
                # past a row's end: forward holds its last state, backward has not started yet
                keep_h, keep_c = (zeros, zeros) if direction else (h, c)
                h = torch.where(real[t], h_new, keep_h)
                c = torch.where(real[t], c_new, keep_c)
            outputs.append(torch.stack(out, 1))  # (B, S, H)
            finals_h.append(h)
            finals_c.append(c)
        layer_input = torch.cat(outputs, -1) if dirs > 1 else outputs[0]  # (B, S, dirs * H)
        if layer < rnn.num_layers - 1 and rnn.dropout and rnn.training:
            layer_input = F.dropout(layer_input, rnn.dropout, True)
    return layer_input, torch.stack(finals_h), torch.stack(finals_c)


def encode_static(
    encoder: Encoder, src: torch.Tensor, src_lengths: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, LSTMState]:
    """:meth:`Encoder.forward` with :func:`masked_lstm` in place of the packed LSTM: the same
    memory (B, S, D), mask (B, S) and decoder start state, read nothing on the host."""
    batch, seq_len = src.shape
    emb = encoder.dropout(encoder.embedding(src))  # (B, S, E)
    mask = source_mask(src_lengths, seq_len)  # (B, S)
    memory, h_n, c_n = masked_lstm(encoder.rnn, emb, mask)  # (B, S, D), (L * dirs, B, H)
    h0 = torch.tanh(encoder.bridge_h(h_n.transpose(0, 1).reshape(batch, -1)))  # (B, L_dec * H)
    c0 = torch.tanh(encoder.bridge_c(c_n.transpose(0, 1).reshape(batch, -1)))  # (B, L_dec * H)
    h0 = h0.view(batch, encoder.decoder_layers, encoder.decoder_hidden_size)  # (B, L_dec, H)
    c0 = c0.view(batch, encoder.decoder_layers, encoder.decoder_hidden_size)  # (B, L_dec, H)
    hs = [h0[:, layer].contiguous() for layer in range(encoder.decoder_layers)]
    cs = [c0[:, layer].contiguous() for layer in range(encoder.decoder_layers)]
    return memory, mask, (hs, cs)


def static_loss(
    model: Seq2Seq, src: torch.Tensor, src_lengths: torch.Tensor, tgt: torch.Tensor, pad_id: int
) -> torch.Tensor:
    """The training loss of :class:`Seq2SeqModule` (teacher-forced cross-entropy over the real
    target tokens) through :func:`encode_static`: capturable in a CUDA graph."""
    memory, mask, state = encode_static(model.encoder, src, src_lengths)
    cache = model.attention.precompute(memory, mask)
    tgt_in = model.shift_target(tgt)  # (B, T)
    logits = model.decoder(tgt_in, state, cache, model.attention.initial_state(cache))  # (B, T, V)
    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), ignore_index=pad_id
    )


@dataclass
class _Bucket:
    """One batch shape's input tensors and, once captured, its graph and its loss output."""

    src: torch.Tensor  # (B', S') long
    lengths: torch.Tensor  # (B',) long
    tgt: torch.Tensor  # (B', T') long
    graph: Any = None  # torch.cuda.CUDAGraph
    loss: torch.Tensor | None = None

    def stage(self, batch: dict[str, torch.Tensor], pad_id: int) -> None:
        """Copy a batch in; the rest is padding (rows of one pad token, no target)."""
        src, lengths, tgt = batch["src"], batch["src_lengths"], batch["tgt"]
        b, s = src.shape
        self.src.fill_(pad_id)
        self.src[:b, :s].copy_(src)
        self.lengths.fill_(1)
        self.lengths[:b].copy_(lengths)
        self.tgt.fill_(pad_id)
        self.tgt[:b, : tgt.shape[1]].copy_(tgt)


class GraphedSteps:
    """Training steps of ``model`` with ``optimizer`` over static, bucketed batches: replayed CUDA
    graphs where ``capture`` (a CUDA model), else the same step run eagerly.

    Args:
        model: the module's :class:`Seq2Seq` (in training mode).
        optimizer: Adam or AdamW (``capturable=True`` on CUDA).
        pad_id: the padding id (inputs are padded with it; the loss ignores it).
        clip_val: gradient clipping (None or 0: none), as Lightning's ``gradient_clip_val``.
        clip_algorithm: ``"norm"`` or ``"value"``, as Lightning's ``gradient_clip_algorithm``.
        capture: capture graphs (needs CUDA); False runs every step eagerly.
        multiple, max_graphs, warmup: :data:`PAD_MULTIPLE`, :data:`MAX_GRAPHS`, :data:`WARMUP_STEPS`.
    """

    def __init__(
        self,
        model: Seq2Seq,
        optimizer: torch.optim.Optimizer,
        pad_id: int,
        clip_val: float | None = None,
        clip_algorithm: str = "norm",
        capture: bool = True,
        multiple: int = PAD_MULTIPLE,
        max_graphs: int = MAX_GRAPHS,
        warmup: int = WARMUP_STEPS,
    ) -> None:
        if not isinstance(optimizer, torch.optim.Adam | torch.optim.AdamW):
            raise TypeError(f"graphed steps restore Adam's state; got {type(optimizer).__name__}")
        if capture and not all(g.get("capturable") for g in optimizer.param_groups):
            raise ValueError("capturing Adam's step needs torch.optim.Adam(..., capturable=True)")
        self.model, self.optimizer, self.pad_id = model, optimizer, pad_id
        self.clip_val, self.clip_algorithm = (clip_val or None), clip_algorithm
        self.capture, self.multiple = capture, multiple
        self.max_graphs, self.warmup = max_graphs, warmup
        self.src_cap = getattr(model.attention, "max_source_len", None)
        self.params = [p for g in optimizer.param_groups for p in g["params"]]
        self.buckets: dict[tuple[int, int, int], _Bucket] = {}
        self.eager_steps = 0  # steps of shapes beyond max_graphs (or all, without capture)

    @property
    def graphs(self) -> int:
        return sum(b.graph is not None for b in self.buckets.values())

    def step(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """One training step on ``batch`` (src, src_lengths, tgt on the model's device); returns
        its loss (a 0-dim tensor on the device, read nothing back)."""
        src, tgt = batch["src"], batch["tgt"]
        key = bucket_shape(src.shape[0], src.shape[1], tgt.shape[1], self.multiple, self.src_cap)
        bucket = self.buckets.get(key)
        if bucket is None:
            bucket = self.buckets[key] = _Bucket(
                src.new_empty(key[:2]), src.new_empty(key[:1]), tgt.new_empty((key[0], key[2]))
            )
        bucket.stage(batch, self.pad_id)
        if bucket.graph is None and self.capture and self.graphs < self.max_graphs:
            self._capture(bucket)
        if bucket.graph is not None:
            bucket.graph.replay()
            return bucket.loss.detach().clone()  # the graph writes over its output next time
        self.eager_steps += 1
        self.optimizer.zero_grad(set_to_none=True)
        return self._work(bucket).detach()

    def _work(self, bucket: _Bucket) -> torch.Tensor:
        """What a step does, and what a graph holds: loss, backward, clipping, optimiser step."""
        loss = static_loss(self.model, bucket.src, bucket.lengths, bucket.tgt, self.pad_id)
        loss.backward()
        if self.clip_val:
            grads = [p for p in self.params if p.grad is not None]
            if self.clip_algorithm == "value":
                torch.nn.utils.clip_grad_value_(grads, self.clip_val)
            else:
                torch.nn.utils.clip_grad_norm_(grads, self.clip_val)
        self.optimizer.step()
        return loss

    def _capture(self, bucket: _Bucket) -> None:
        saved = self.snapshot()
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(self.warmup):
                self.optimizer.zero_grad(set_to_none=True)
                self._work(bucket)
        torch.cuda.current_stream().wait_stream(side)
        self.restore(saved)
        self.optimizer.zero_grad(set_to_none=True)  # gradients live in the graph's memory
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                bucket.loss = self._work(bucket)
        except RuntimeError as exc:
            raise capture_failed("the training step", exc) from exc
        bucket.graph = graph

    def snapshot(self) -> dict[str, Any]:
        """The parameters, Adam's state (None where it has none yet) and the random state."""
        state = self.optimizer.state
        return {
            "params": [p.detach().clone() for p in self.params],
            "state": [
                {k: v.clone() for k, v in state[p].items() if torch.is_tensor(v)}
                if state.get(p)
                else None
                for p in self.params
            ],
            "rng": _rng_state(self.params[0].device),
        }

    def restore(self, saved: dict[str, Any]) -> None:
        """Put :meth:`snapshot` back into the same tensors (their memory stays where it is). Adam
        state made since is zeroed: a fresh Adam's state is zeros with step 0."""
        with torch.no_grad():
            for p, value, before in zip(self.params, saved["params"], saved["state"]):
                p.copy_(value)
                for key, tensor in self.optimizer.state.get(p, {}).items():
                    if torch.is_tensor(tensor):
                        tensor.copy_(before[key]) if before else tensor.zero_()
        _set_rng_state(self.params[0].device, saved["rng"])


def _rng_state(device: torch.device) -> torch.Tensor:
    return torch.cuda.get_rng_state(device) if device.type == "cuda" else torch.get_rng_state()


def _set_rng_state(device: torch.device, state: torch.Tensor) -> None:
    if device.type == "cuda":
        torch.cuda.set_rng_state(state, device)
    else:
        torch.set_rng_state(state)


class CudaGraphSeq2SeqModule(Seq2SeqModule):
    """:class:`Seq2SeqModule` whose training steps are :class:`GraphedSteps`: captured CUDA graphs
    on a GPU (the same steps, eagerly, elsewhere). Lightning's automatic optimisation still counts
    the steps, calls the callbacks and reads ``gradient_clip_val``/``gradient_clip_algorithm``;
    the step itself (backward, clipping, Adam) runs inside ``training_step``, so the hooks that
    would do them again are empty here. Same hyperparameters and checkpoints as the module."""

    @classmethod
    def adopt(cls, module: Seq2SeqModule) -> CudaGraphSeq2SeqModule:
        """Turn a built :class:`Seq2SeqModule` (not yet fitted) into this class, in place: the same
        object, weights and hyperparameters; only its training hooks change.

        Raises:
            ValueError: the module distils (its teacher runs outside any graph), or sets an
                argument the graphed step does not implement (:func:`graph_gap`).
        """
        if type(module) is not Seq2SeqModule:
            raise TypeError(f"adopt takes a Seq2SeqModule, got {type(module).__name__}")
        gap = graph_gap(module)
        if gap:
            raise ValueError(gap)
        if module.hparams.distill_weight > 0:
            raise ValueError(
                "CUDA graphs do not capture a distilling student's teacher (distill_weight > 0); "
                "train it without graphs"
            )
        module.__class__ = cls
        return module  # type: ignore[return-value]

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(
            self.parameters(),
            lr=self.hparams.lr,
            weight_decay=self.hparams.weight_decay,
            capturable=self.device.type == "cuda",
        )

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        loss = self.graphed_steps().step(batch)
        self.log(
            TRAIN_LOSS,
            loss,
            on_step=True,
            on_epoch=True,
            prog_bar=True,
            batch_size=len(batch["src"]),
        )
        return loss

    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """Done inside :meth:`training_step`."""

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: Any) -> None:
        """Nothing: each step's backward writes the gradients afresh."""

    def optimizer_step(
        self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None
    ) -> None:
        """The closure runs :meth:`training_step`, which is the whole step."""
        optimizer_closure()

    def graphed_steps(self) -> GraphedSteps:
        """The module's :class:`GraphedSteps`, made at the first training step (after a resumed
        fit has restored Adam's state, which the graphs then hold)."""
        steps = getattr(self, "_graphed_steps", None)
        if steps is None:
            trainer = self.trainer
            if trainer.accumulate_grad_batches != 1:
                raise ValueError(
                    "CUDA graphs take one whole step per batch: accumulate_grad_batches 1"
                )
            steps = self._graphed_steps = GraphedSteps(
                self.model,
                self.optimizers(use_pl_optimizer=False),
                self.hparams.pad_id,
                clip_val=trainer.gradient_clip_val,
                clip_algorithm=_algorithm(trainer.gradient_clip_algorithm),
                capture=self.device.type == "cuda",
            )
        return steps


def _algorithm(value: Any) -> str:
    """Lightning's ``gradient_clip_algorithm`` (an enum, a string or None) as "norm" or "value"."""
    return str(getattr(value, "value", value) or "norm")


def graph_gap(module: Seq2SeqModule) -> str | None:
    """Why the graphed step would train ``module`` otherwise than its own step does: an argument
    set away from its default that the graphed step does not implement; else None."""
    from .fused.key import step_gaps  # the fused and the graphed steps implement one list

    gaps = step_gaps(dict(module.hparams))
    if not gaps:
        return None
    return (
        f"Seq2SeqModule's {', '.join(gaps)} set away from the default has no graphed form "
        "(lightning_modules/cuda_graphs.py does not implement it): it takes eager steps"
    )


def enable_cuda_graphs(module: pl.LightningModule, trainer: pl.Trainer) -> str:
    """What ``trainer.cuda_graphs: true`` does to a trial's module before it is fitted: graphed
    steps where the trainer trains on a CUDA GPU; elsewhere nothing. Returns a line saying which."""
    if not isinstance(trainer.accelerator, pl.accelerators.CUDAAccelerator):
        return "trainer.cuda_graphs ignored: this trial trains on the CPU (eager steps)"
    if type(module) is not Seq2SeqModule:
        return f"trainer.cuda_graphs ignored: a {type(module).__name__} takes eager steps"
    gap = graph_gap(module)
    if gap:
        return f"trainer.cuda_graphs ignored: {gap}"
    CudaGraphSeq2SeqModule.adopt(module)
    return (
        f"CUDA graphs: training steps captured per batch shape (multiples of {PAD_MULTIPLE}, "
        f"up to {MAX_GRAPHS} graphs) and replayed"
    )
