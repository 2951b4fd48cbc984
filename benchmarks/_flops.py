"""How much arithmetic a training step is, and how fast this machine does matrix products: the
floor under any implementation of the same model at the same precision.

:func:`step_flops` counts the floating-point operations of one call (a training step: forward,
backward, optimiser) with PyTorch's ``FlopCounterMode``, which sees the matrix products (``mm``,
``addmm``, ``bmm``, ...) that reach the dispatcher. A fused LSTM kernel (oneDNN's on CPU, cuDNN's
on a GPU) is one opaque call it cannot count; for every ``nn.LSTM`` call during which the counter
saw nothing, the LSTM's products are added from its sizes: per layer and direction
``2 * rows * (in + H) * 4H`` forward, three times that with the backward pass (the gradients of
the inputs and of the weights are each a product of the forward's size). Element-wise work
(sigmoid, tanh, softmax, Adam) is not counted: it is small beside the products but not free.

:func:`gemm_rate` times single-precision matrix products of the step's own shapes on this
process's threads and returns the best rate: what the step's products could at most run at.
``flops / rate`` is then a lower bound on the step's time at this precision.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any


def _lstm_forward_flops(lstm: Any, inputs: tuple[Any, ...]) -> float:
    """The products of one ``nn.LSTM`` forward call, from its sizes and the rows it read."""
    import torch
    from torch.nn.utils.rnn import PackedSequence

    x = inputs[0]
    if isinstance(x, PackedSequence):
        rows = int(x.data.shape[0])
    elif isinstance(x, torch.Tensor):
        rows = int(x.numel() // x.shape[-1])
    else:
        return 0.0
    H = lstm.hidden_size
    dirs = 2 if lstm.bidirectional else 1
    total = 0.0
    for layer in range(lstm.num_layers):
        width = lstm.input_size if layer == 0 else H * dirs
        total += 2.0 * rows * (width + H) * 4 * H * dirs
    return total


def step_flops(model: Any, fn: Callable[[], Any]) -> dict[str, float]:
    """Run ``fn`` once under a FLOP counter; returns ``counted`` (what the counter saw),
    ``lstm_added`` (fused LSTM calls added from their sizes, forward and backward) and
    ``total``. ``model``: the module whose ``nn.LSTM`` submodules are watched."""
    from torch import nn
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    added = [0.0]
    before: dict[int, int] = {}
    handles = []

    def pre(module: Any, inputs: tuple[Any, ...]) -> None:
        before[id(module)] = counter.get_total_flops()

    def post(module: Any, inputs: tuple[Any, ...], output: Any) -> None:
        if counter.get_total_flops() == before.pop(id(module), None):  # a fused kernel
            added[0] += 3 * _lstm_forward_flops(module, inputs)

    for module in model.modules():
        if isinstance(module, nn.LSTM):
            handles.append(module.register_forward_pre_hook(pre))
            handles.append(module.register_forward_hook(post))
    try:
        with counter:
            fn()
    finally:
        for handle in handles:
            handle.remove()
    counted = float(counter.get_total_flops())
    return {"counted": counted, "lstm_added": added[0], "total": counted + added[0]}


def gemm_rate(
    shapes: Iterable[tuple[int, int, int]], device: Any, seconds: float = 0.3
) -> dict[str, Any]:
    """The best single-precision rate (FLOP/s) of ``(M, K) @ (K, N)`` products over ``shapes``
    on ``device``, each timed for about ``seconds`` after a warm-up; returns ``best`` and
    ``per_shape`` ("MxKxN" -> GFLOP/s)."""
    import torch

    cuda = device.type == "cuda"
    sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)
    per_shape: dict[str, float] = {}
    matmul = torch.backends.cuda.matmul
    allow_tf32 = matmul.allow_tf32 if cuda else None
    if cuda:  # full fp32, as the model trains
        matmul.allow_tf32 = False
    try:
        for m, k, n in shapes:
            a = torch.randn(m, k, device=device)
            b = torch.randn(k, n, device=device)
            for _ in range(3):
                a @ b
            sync()
            reps, start = 0, time.perf_counter()
            while True:
                a @ b
                reps += 1
                if reps % 4 == 0:
                    sync()
                    if time.perf_counter() - start >= seconds:
                        break
            elapsed = time.perf_counter() - start
            per_shape[f"{m}x{k}x{n}"] = round(2.0 * m * k * n * reps / elapsed / 1e9, 2)
    finally:
        if cuda:
            matmul.allow_tf32 = allow_tf32
    return {"best": max(per_shape.values()) * 1e9, "per_shape": per_shape}
