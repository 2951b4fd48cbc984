"""Check constructor arguments against the ``Annotated[..., annotated_types.Ge(1)]`` ranges declared
in the signature, so a range is written once: in the signature, where the sweep spec reads it too.

    def __init__(self, batch_size: Annotated[int, Ge(1)] = 64) -> None:
        check_ranges(type(self).__init__, locals())   # ValueError: batch_size must be >= 1, got 0
"""
from __future__ import annotations

import functools
import operator
import typing
from typing import Any, Callable

import annotated_types as at

_TESTS: dict[type, tuple[str, str, Callable[[Any, Any], bool]]] = {
    at.Gt: ("gt", ">", operator.gt), at.Ge: ("ge", ">=", operator.ge),
    at.Lt: ("lt", "<", operator.lt), at.Le: ("le", "<=", operator.le),
}


@functools.lru_cache(maxsize=None)
def declared_ranges(fn: Callable) -> dict[str, tuple[tuple[str, Any], ...]]:
    """``{argument: ((">=", 1), ...)}`` for every argument whose annotation carries range markers."""
    out = {}
    for name, hint in typing.get_type_hints(fn, include_extras=True).items():
        bounds = []
        for candidate in (hint, *typing.get_args(hint)):  # Optional[Annotated[...]] too
            if typing.get_origin(candidate) is typing.Annotated:
                for marker in candidate.__metadata__:
                    parts = list(marker) if isinstance(marker, at.Interval) else [marker]
                    for part in parts:
                        if type(part) in _TESTS:
                            attr, symbol, _ = _TESTS[type(part)]
                            bounds.append((symbol, getattr(part, attr)))
        if bounds:
            out[name] = tuple(bounds)
    return out


def check_ranges(fn: Callable, values: dict[str, Any]) -> None:
    """Raise ValueError naming the first argument of ``fn`` in ``values`` outside its range."""
    owner = getattr(fn, "__qualname__", "").split(".")[0]
    for name, bounds in declared_ranges(fn).items():
        value = values.get(name)
        if value is None or isinstance(value, bool):
            continue
        for symbol, limit in bounds:
            test = next(t for _, s, t in _TESTS.values() if s == symbol)
            if not test(value, limit):
                raise ValueError(f"{owner}: {name} must be {symbol} {limit}, got {value!r}")
