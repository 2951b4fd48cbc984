"""The fused model's parameters as one flat (M, P) tensor, member i in row i.

Every parameter of the fused model (a *leaf*: its own ``nn.Parameter``, shape (M, *shape)) is a
view of one row-per-member buffer, its gradient a view of a second one, so that clipping and
Adam run as a handful of operations on whole (M, P) tensors whatever the number of weights, with
each member's settings broadcast over its row. A leaf may hold one or several of the unfused
model's parameters in whatever arrangement its products want (a weight stored transposed for
``bmm``, an LSTM's input and recurrent weights stacked, both directions side by side); ``parts``
names them and gives each as a view of one member's slice, so the same functions read and write
the weights, the gradients and Adam's moments of member i under their unfused names.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

#: a view of one member's slice of a leaf (shape ``Leaf.shape``) as one unfused parameter
Part = Callable[[torch.Tensor], torch.Tensor]


@dataclass
class Leaf:
    """One fused parameter: set as ``owner.<attr>``, (M, *shape), holding the unfused parameters
    ``parts`` (name -> view of a member's slice)."""

    owner: nn.Module
    attr: str
    shape: tuple[int, ...]
    parts: dict[str, Part] = field(default_factory=dict)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


def identity(t: torch.Tensor) -> torch.Tensor:
    return t


def transposed(t: torch.Tensor) -> torch.Tensor:
    return t.t()


def first_row(t: torch.Tensor) -> torch.Tensor:
    return t[0]


def scalar(t: torch.Tensor) -> torch.Tensor:
    return t.view(())


def linear_leaves(
    owner: nn.Module, name: str, in_features: int, out_features: int, bias: bool
) -> list[Leaf]:
    """A linear map's weight stored transposed, (in, out), and its bias as (1, out): the operands
    ``torch.baddbmm`` takes as they are."""
    leaves = [Leaf(owner, "weight_t", (in_features, out_features), {f"{name}.weight": transposed})]
    if bias:
        leaves.append(Leaf(owner, "bias", (1, out_features), {f"{name}.bias": first_row}))
    return leaves


class FlatParameters:
    """The flat buffers of a list of leaves: values, gradients and Adam's two moments, each
    (M, P); :meth:`bind` sets every leaf on its owner as a view of them."""

    def __init__(self, leaves: Sequence[Leaf], members: int, device: torch.device) -> None:
        self.leaves = list(leaves)
        self.offsets = []
        total = 0
        for leaf in self.leaves:
            self.offsets.append(total)
            total += leaf.numel
        self.size = total
        zeros = lambda: torch.zeros(members, total, device=device)  # noqa: E731
        self.data, self.grad = zeros(), zeros()
        self.exp_avg, self.exp_avg_sq = zeros(), zeros()

    @property
    def members(self) -> int:
        return self.data.shape[0]

    def buffers(self) -> dict[str, torch.Tensor]:
        return {
            "data": self.data,
            "grad": self.grad,
            "exp_avg": self.exp_avg,
            "exp_avg_sq": self.exp_avg_sq,
        }

    def leaf_view(self, buffer: torch.Tensor, index: int) -> torch.Tensor:
        """Leaf ``index`` of ``buffer``, (M, *shape): a view, writable."""
        leaf, start = self.leaves[index], self.offsets[index]
        return buffer[:, start : start + leaf.numel].view(buffer.shape[0], *leaf.shape)

    def bind(self) -> None:
        """Set every leaf on its owner as a Parameter viewing ``data``, its ``.grad`` viewing
        ``grad`` (autograd then accumulates into the flat gradient in place)."""
        for index, leaf in enumerate(self.leaves):
            param = nn.Parameter(self.leaf_view(self.data, index))
            param.grad = self.leaf_view(self.grad, index)
            setattr(leaf.owner, leaf.attr, param)

    def named_parts(self, buffer: torch.Tensor, member: int) -> Iterator[tuple[str, torch.Tensor]]:
        """Member ``member``'s unfused parameters in ``buffer`` (values, gradients or a moment),
        as views under their unfused names."""
        for index, leaf in enumerate(self.leaves):
            row = self.leaf_view(buffer, index)[member]
            for name, part in leaf.parts.items():
                yield name, part(row)

    def apply(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        """Replace every buffer by ``fn(buffer)`` (moving, selecting rows) and bind again."""
        self.data, self.grad = fn(self.data), fn(self.grad)
        self.exp_avg, self.exp_avg_sq = fn(self.exp_avg), fn(self.exp_avg_sq)
        self.bind()
