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
        raise ValueError(str(exc).splitlines()[0]) from None


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
                item, key, text, f"cannot parse the value {text.strip()!r} ({exc})"
            ) from None
    return out
