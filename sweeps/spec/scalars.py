"""One value of a sweep file as YAML reads it and as a message says it: a yes/no value where a
number goes (pydantic's lax mode would take ``true`` for 1), text where a yes/no value goes
(``'false'``, which a constructor would read as true), a number YAML read as text (``1e-4``,
``1e5``, ``2.0e4``: no dot before the exponent, or no sign in it), and a type as a user writes
it. Used by the schema's own fields (:class:`sweeps.spec.search_schema._Strict`) and by the
checks of the constructor settings (:mod:`sweeps.spec.validate`), so both say these mistakes in
the same words."""

from __future__ import annotations

import difflib
import math
import types
import typing
from typing import Any

from datamodules.ranges import number_kind


def accepts_bool(annotation: Any) -> bool:
    """Whether ``annotation`` (through Optional, Union, Annotated, Literal) admits True/False."""
    if annotation is bool or annotation is Any:
        return True
    return any(
        arg is True or arg is False or accepts_bool(arg) for arg in typing.get_args(annotation)
    )


def type_name(annotation: Any) -> str:
    """``int``, ``int or null`` (an Optional), ``Literal['a', 'b']``: the type a setting takes."""
    if typing.get_origin(annotation) is typing.Annotated:
        return type_name(typing.get_args(annotation)[0])
    if typing.get_origin(annotation) is typing.Literal:  # "Literal" alone names no choice
        return "one of " + ", ".join(map(repr, typing.get_args(annotation)))
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return " or ".join(
            "null" if a is type(None) else type_name(a) for a in typing.get_args(annotation)
        )
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def is_number_text(text: str) -> bool:
    """Whether ``text`` is a finite number written as text (``'1e5'``, ``'32'``)."""
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


def unquoted(text: str, kind: type | None = float) -> str:
    """How to write ``text`` (a number read as text) as a number of ``kind``: YAML 1.1 reads an
    exponent as a number only with a dot in the mantissa and a sign in the exponent, so ``1e-4``,
    ``1e5`` and ``2.0e4`` are text, ``2.0e+4`` a number."""
    mantissa, e, exponent = text.lower().partition("e")
    if e and ("." not in mantissa or exponent[:1] not in ("+", "-")):
        number = float(text)
        signed = exponent if exponent[:1] in ("+", "-") else f"+{exponent}"
        dotted = "." in mantissa
        as_yaml = f"{mantissa if dotted else mantissa + '.0'}e{signed}"
        if kind is int and number.is_integer():
            also = f" (or {as_yaml})" if dotted else ""
            return f"YAML reads {text} as text: write {int(number)}{also}"
        if dotted:
            return f"YAML reads {text} as text: write {as_yaml} or {number:g}"
        return f"YAML reads {text} as text: write {mantissa}.0e{exponent} or {number:g}"
    return "write it without quotes"


def text_problem(annotation: Any, value: str) -> str:
    """The line for a number written as text where ``annotation`` wants a number."""
    write = unquoted(value, number_kind(annotation))
    return f"{value!r} is text; expected {type_name(annotation)} ({write})"


#: the text pydantic's lax mode reads as a yes/no value (any case)
BOOL_WORDS = {
    **dict.fromkeys(("true", "yes", "y", "on", "t", "1"), True),
    **dict.fromkeys(("false", "no", "n", "off", "f", "0"), False),
}


def accepts_text(annotation: Any) -> bool:
    """Whether ``annotation`` (through Optional, Union, Annotated, Literal) admits some text."""
    if annotation is str or annotation is Any:
        return True
    return any(isinstance(arg, str) or accepts_text(arg) for arg in typing.get_args(annotation))


def bool_text_problem(annotation: Any, value: Any) -> str | None:
    """The line for text where ``annotation`` wants a yes/no value and no text (``'false'`` is
    text, which pydantic's lax mode would read as False but a constructor given it reads as
    true), or None where ``value`` is no such text."""
    if not isinstance(value, str) or not accepts_bool(annotation) or accepts_text(annotation):
        return None
    if number_kind(annotation) is not None and is_number_text(value):
        return None  # '1' where a number or a yes/no value goes: said as a number's text
    word = BOOL_WORDS.get(value.strip().lower())
    write = "true or false" if word is None else str(word).lower()
    return f"{value!r} is text; expected {type_name(annotation)} (write {write} without quotes)"


def yes_no_problem(annotation: Any, value: bool) -> str:
    """The line for True/False where ``annotation`` wants no yes/no value."""
    return f"{value!r} is a yes/no value; expected {type_name(annotation)}"


def _holds_items(annotation: Any) -> bool:
    """Whether ``annotation`` is (or may be) a list or mapping of values, not one value."""
    origin = typing.get_origin(annotation)
    if origin in (list, tuple, set, frozenset, dict):
        return True
    if origin is typing.Annotated:
        return _holds_items(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return any(_holds_items(a) for a in typing.get_args(annotation))
    return False


def schema_value_problem(annotation: Any, value: Any) -> str | None:
    """What pydantic's lax mode would take silently, or refuse in words of its own, for one value
    of a schema field of a number or yes/no type: ``true`` (read as 1), text for a yes/no value
    (``'false'``, read as False) and a number written or read as text (``max_steps: "600"``,
    which pydantic reads as 600; ``max_steps: 1e5``: "unable to parse string as an integer").
    None when none of these."""
    if _holds_items(annotation):
        return None
    problem = bool_text_problem(annotation, value)
    if problem:
        return problem
    kind = number_kind(annotation)
    if kind is None:
        return None
    if isinstance(value, bool) and not accepts_bool(annotation):
        return yes_no_problem(annotation, value)
    if isinstance(value, str) and is_number_text(value) and not accepts_text(annotation):
        # pydantic would read "32" as 32, but the sweep folder's record keeps the text (so that
        # unquoting it later changes the plan --resume compares) and the constructor settings
        # refuse it: refused here too, in the same words
        if kind is float or float(value).is_integer():  # "1.5" for an int: pydantic's own line
            return text_problem(annotation, value)
    return None


def did_you_mean(key: str, known: typing.Iterable[str]) -> str:
    """`` (did you mean max_length?)`` for the closest known name (an old spelling such as WMT's
    ``max_len``, or a typo), or ""."""
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""
