"""Building blocks with a leading member dimension M: a linear map applied per member, dropout
with a probability per member, an embedding lookup per member."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn


class FusedLinear(nn.Module):
    """M linear maps, one per member, in the place of one ``nn.Linear``: the input's rows are
    member-major (first dimension M * N), so a mechanism written for a batch of N rows runs
    unchanged on all M members' rows at once and each member's rows meet its own weights in one
    ``bmm``.

    The leaves ``weight_t`` (M, in, out) and ``bias`` (M, 1, out) are set by
    :class:`~lightning_modules.fused.layout.FlatParameters`.
    """

    weight_t: torch.Tensor

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.bias: torch.Tensor | None = None

    @classmethod
    def like(cls, linear: nn.Linear) -> FusedLinear:
        return cls(linear.in_features, linear.out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(M * N, ..., in) -> (M * N, ..., out)."""
        members = self.weight_t.shape[0]
        rows = x.reshape(members, -1, self.in_features)  # (M, N*..., in)
        if self.bias is None:
            out = torch.bmm(rows, self.weight_t)  # (M, N*..., out)
        else:
            out = torch.baddbmm(self.bias, rows, self.weight_t)  # (M, N*..., out)
        return out.view(*x.shape[:-1], self.out_features)


class DropoutRates:
    """Each member's dropout probability, and the keep probabilities as a tensor (M,) per device."""

    def __init__(self, rates: Sequence[float]) -> None:
        self.values = [float(p) for p in rates]
        self._keep: dict[torch.device, torch.Tensor] = {}

    @property
    def off(self) -> bool:
        return all(p == 0 for p in self.values)

    def keep(self, device: torch.device) -> torch.Tensor:
        if device not in self._keep:
            self._keep[device] = torch.tensor([1 - p for p in self.values], device=device)
        return self._keep[device]

    def select(self, indices: Sequence[int]) -> DropoutRates:
        return DropoutRates([self.values[i] for i in indices])


def member_dropout(x: torch.Tensor, rates: DropoutRates, training: bool) -> torch.Tensor:
    """Dropout of ``x`` (M, ...) with member m's probability on row m; identity in eval mode or
    when every probability is 0. One random draw over the stacked tensor: independent masks per
    member (not the masks an unfused run of the member would draw)."""
    if not training or rates.off:
        return x
    if len(set(rates.values)) == 1:
        return F.dropout(x, rates.values[0], True)
    with torch.no_grad():
        keep = rates.keep(x.device).view(-1, *([1] * (x.dim() - 1)))  # (M, 1, ...)
        mask = torch.bernoulli(keep.expand(x.shape)).div_(keep).to(x.dtype)  # (M, ...)
    return x * mask


def member_embedding(weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Member m's rows of its own table: weight (M, V, E), ids (M, ...) -> (M, ..., E).

    One ``gather`` along the vocabulary (its backward one ``scatter_add``): no advanced indexing,
    whose backward (``index_put_`` accumulating) cannot be captured in a CUDA graph.

    The padding id's row gets no gradient, as ``nn.Embedding(padding_idx=...)`` gives it, because
    nothing the loss reads depends on a padded position (the encoder's padded outputs are masked,
    the decoder's padded steps are ignored by the loss): their gradients are exact zeros.
    """
    M, _, E = weight.shape
    flat = ids.reshape(M, -1, 1).expand(-1, -1, E)  # (M, N, E) each id along its row
    return weight.gather(1, flat).view(*ids.shape, E)  # (M, ..., E)
