"""``KEY=VALUE`` command-line items, read one way: ``launch.py --set``, ``python -m sweeps.timing
--data`` and the decode benchmark's mechanism options. Standard library only (YAML is imported
when a value is read as YAML), so ``benchmarks/`` can use it without the sweep extras.

    parse_assignments(["trainer.max_steps=100", "model.K=[4, 8]"])   # {"trainer.max_steps": 100, "model.K": [4, 8]}
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from sweeps.errors import AssignmentError  # noqa: F401 (raised here; importable from here too)


def yaml_value(text: str) -> Any:
    """A value as YAML: ``100``, ``0.5``, ``[1, 2]``, ``true``, ``'text'`` (``""`` reads as None)."""
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(yaml_problem(exc, lines=False)) from None


def yaml_problem(exc: Exception, lines: bool = True) -> str:
    """A PyYAML error in one line: its problem and where (``line 3, column 1``; the column alone
    for one-line text, ``lines=False``), and the construct it was reading when that started
    elsewhere, rather than PyYAML's several lines quoting the text under a caret."""

    def at(mark: Any) -> str:
        column = f"column {mark.column + 1}"
        return f"line {mark.line + 1}, {column}" if lines else column

    problem, mark = getattr(exc, "problem", None), getattr(exc, "problem_mark", None)
    if not problem or mark is None:
        return " ".join(str(exc).split())
    said = f"{problem} at {at(mark)}"
    context, start = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    if context and start is not None and (start.line, start.column) != (mark.line, mark.column):
        said += f" ({context} that starts at {at(start)})"
    elif context:
        said += f" ({context})"
    return said


def parse_assignments(
    items: Iterable[str], value: Callable[[str], Any] = yaml_value
) -> dict[str, Any]:
    """``KEY=VALUE`` items -> ``{KEY: value(VALUE)}``, keys and values stripped of spaces. Raises
    :class:`AssignmentError` for an item with no ``=`` or no key, or whose value ``value`` rejects
    (a ValueError)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise AssignmentError(item, key, text if sep else None, "expected KEY=VALUE")
        try:
            out[key] = value(text.strip())
        except ValueError as exc:
            raise AssignmentError(
                item,
                key,
                text,
                f"cannot parse the value {text.strip()!r} ({exc})",
                problem=str(exc),
            ) from None
    return out
