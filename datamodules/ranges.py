"""The one range checker: ranges are declared once, as ``Annotated[..., annotated_types.Ge(1)]``
markers in a constructor's signature, and read here, by the constructors themselves (the
datamodules, ``Seq2SeqModule``, the attention mechanisms) and by the sweep spec's messages.
The same call checks the constructor's ``bool`` options (True or False only: the string "false"
is truthy) and refuses None and True/False for a ranged number that is not Optional.
Plain Python (annotated-types only), no torch.

    def __init__(self, batch_size: Annotated[int, Ge(1)] = 64) -> None:
        check_ranges(type(self).__init__, locals())   # ValueError: <Class>: batch_size must be >= 1, got 0
"""

from __future__ import annotations

import functools
import inspect
import numbers
import operator
import types
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


def _members(annotation: Any) -> tuple[Any, ...]:
    """The types an annotation admits, through ``Annotated`` and ``Optional``/``Union``."""
    if typing.get_origin(annotation) is typing.Annotated:
        return _members(typing.get_args(annotation)[0])
    args = typing.get_args(annotation)
    if args and typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return tuple(t for arg in args for t in _members(arg))
    return (annotation,)


@functools.cache
def _takes_none(fn: Callable) -> dict[str, bool]:
    """``{argument: whether None is a value it takes}``: an Optional annotation, or a None default."""
    hints = typing.get_type_hints(fn, include_extras=True)
    defaults = {n: p.default for n, p in inspect.signature(fn).parameters.items()}
    return {
        name: type(None) in _members(hint) or defaults.get(name, inspect.Parameter.empty) is None
        for name, hint in hints.items()
    }


@functools.cache
def _declared_flags(fn: Callable) -> tuple[str, ...]:
    """The arguments of ``fn`` annotated ``bool`` (or ``bool | None``): they take True or False."""
    hints = typing.get_type_hints(fn, include_extras=True)
    return tuple(
        name
        for name, hint in hints.items()
        if name != "return" and set(_members(hint)) - {type(None)} == {bool}
    )


def _default_hint(fn: Callable, name: str) -> str:
    default = inspect.signature(fn).parameters[name].default
    return (
        ""
        if default is inspect.Parameter.empty
        else f"; leave it out for the default ({default!r})"
    )


def check_ranges(fn: Callable, values: dict[str, Any], owner: str | None = None) -> None:
    """Raise ValueError naming the first argument of ``fn`` in ``values`` outside its range
    (``"<owner>: K must be >= 1, got 0"``; ``owner`` defaults to the class that defines ``fn``),
    or not a number of the declared kind (``K must be a whole number, got 2.5``; None only where
    the argument is Optional, never True/False), or a ``bool`` argument given anything but True
    or False (``position_encoding must be True or False, got 'false' (str); ...``)."""
    owner = owner or getattr(fn, "__qualname__", "").split(".")[0]
    kinds = _declared_kinds(fn)
    takes_none = _takes_none(fn)
    for name, limits in declared_ranges(fn).items():
        if name not in values:
            continue
        value = values[name]
        if value is None and takes_none[name]:
            continue
        kind = {int: "a whole number", float: "a number"}.get(kinds[name])
        if value is None or isinstance(value, bool):
            if kind is None:
                continue
            # None or True would reach torch (nn.Linear's sizes, arithmetic), which does not name it
            allowed = " and ".join(f"{symbol} {limit}" for symbol, limit in limits)
            hint = _default_hint(fn, name) if value is None else ""
            raise ValueError(f"{owner}: {name} must be {kind} {allowed}, got {value!r}{hint}")
        # the range's comparisons need a number; a count (K, a window) a whole one
        if kinds[name] is int and not isinstance(value, numbers.Integral):
            raise ValueError(f"{owner}: {name} must be a whole number, got {value!r}")
        if kinds[name] is float and not isinstance(value, numbers.Real):
            raise ValueError(f"{owner}: {name} must be a number, got {value!r}")
        for symbol, limit in limits:
            if not _BY_SYMBOL[symbol](value, limit):
                raise ValueError(f"{owner}: {name} must be {symbol} {limit}, got {value!r}")
    for name in _declared_flags(fn):
        # any truthy value would switch the option on: "false" (from argparse, an env var, a
        # hand-written config), 0/1 or a numpy bool are refused, not read
        value = values.get(name, False)
        if isinstance(value, bool) or (value is None and takes_none[name]):
            continue
        kind = type(value).__qualname__
        if type(value).__module__ != "builtins":
            kind = f"{type(value).__module__}.{kind}"  # e.g. numpy.bool
        fix = "pass the bool True or False"
        if isinstance(value, str):
            fix += ", not a string (any non-empty string counts as True)"
        raise ValueError(f"{owner}: {name} must be True or False, got {value!r} ({kind}); {fix}")
