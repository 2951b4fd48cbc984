"""The one range checker: ranges are declared once, as ``Annotated[..., annotated_types.Ge(1)]``
markers in a constructor's signature, and read here, by the constructors themselves (the
datamodules, ``Seq2SeqModule``, the attention mechanisms) and by the sweep spec's messages.
Plain Python (annotated-types only), no torch.

    def __init__(self, batch_size: Annotated[int, Ge(1)] = 64) -> None:
        check_ranges(type(self).__init__, locals())   # ValueError: batch_size must be >= 1, got 0
"""

from __future__ import annotations

import functools
import numbers
import operator
import typing
from collections.abc import Callable
from typing import Any

#: marker attribute -> (symbol, test); an ``Interval`` carries several of them
_TESTS: dict[str, tuple[str, Callable[[Any, Any], bool]]] = {
    "gt": (">", operator.gt),
    "ge": (">=", operator.ge),
    "lt": ("<", operator.lt),
    "le": ("<=", operator.le),
    "multiple_of": ("a multiple of", lambda value, m: value % m == 0),
}
_BY_SYMBOL = dict(_TESTS.values())


def range_markers(annotation: Any) -> list[Any]:
    """The metadata markers of ``annotation``, through ``Annotated``, ``Optional``/``Union`` and
    pydantic ``Field`` constraints (a ``FieldInfo`` keeps them in ``.metadata``)."""
    if typing.get_origin(annotation) is typing.Annotated:
        base, *metadata = typing.get_args(annotation)
        found = []
        for m in metadata:
            found += list(getattr(m, "metadata", None) or [m])
        return found + range_markers(base)
    return [m for arg in typing.get_args(annotation) for m in range_markers(arg)]


def bounds(annotation: Any) -> tuple[tuple[str, Any], ...]:
    """``((">=", 0), ("<", 1))`` for ``Annotated[float, Interval(ge=0, lt=1)]``; () for no range."""
    out: list[tuple[str, Any]] = []
    for marker in range_markers(annotation):
        for attr, (symbol, _) in _TESTS.items():
            limit = getattr(marker, attr, None)
            if limit is not None and (symbol, limit) not in out:
                out.append((symbol, limit))
    return tuple(out)


def allowed_range(annotation: Any) -> str:
    """The declared range as text, e.g. ``>= 1`` or ``>= 0 and < 1`` ("" for none)."""
    return " and ".join(f"{symbol} {limit}" for symbol, limit in bounds(annotation))


@functools.cache
def declared_ranges(fn: Callable) -> dict[str, tuple[tuple[str, Any], ...]]:
    """``{argument: ((">=", 1), ...)}`` for every argument whose annotation carries range markers."""
    out = {}
    for name, hint in typing.get_type_hints(fn, include_extras=True).items():
        found = bounds(hint)
        if found:
            out[name] = found
    return out


def number_kind(annotation: Any) -> type | None:
    """``int`` for an annotation that takes whole numbers only (``Annotated[int, Ge(1)]``, also
    optional), ``float`` for one that takes any real number, None otherwise."""
    if typing.get_origin(annotation) is typing.Annotated:
        return number_kind(typing.get_args(annotation)[0])
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if args:  # a Union (Optional[...]): the kind its members share
        kinds = {number_kind(a) for a in args}
        return kinds.pop() if len(kinds) == 1 else (float if kinds == {int, float} else None)
    return annotation if annotation in (int, float) else None


@functools.cache
def _declared_kinds(fn: Callable) -> dict[str, type | None]:
    hints = typing.get_type_hints(fn, include_extras=True)
    return {name: number_kind(hints[name]) for name in declared_ranges(fn)}


def check_ranges(fn: Callable, values: dict[str, Any], owner: str | None = None) -> None:
    """Raise ValueError naming the first argument of ``fn`` in ``values`` outside its range
    (``"<owner>: K must be >= 1, got 0"``; ``owner`` defaults to the class that defines ``fn``),
    or not a number of the declared kind (``K must be a whole number, got 2.5``). None and
    True/False are not checked."""
    owner = owner or getattr(fn, "__qualname__", "").split(".")[0]
    kinds = _declared_kinds(fn)
    for name, limits in declared_ranges(fn).items():
        value = values.get(name)
        if value is None or isinstance(value, bool):
            continue
        # the range's comparisons need a number; a count (K, a window) a whole one
        if kinds[name] is int and not isinstance(value, numbers.Integral):
            raise ValueError(f"{owner}: {name} must be a whole number, got {value!r}")
        if kinds[name] is float and not isinstance(value, numbers.Real):
            raise ValueError(f"{owner}: {name} must be a number, got {value!r}")
        for symbol, limit in limits:
            if not _BY_SYMBOL[symbol](value, limit):
                raise ValueError(f"{owner}: {name} must be {symbol} {limit}, got {value!r}")
