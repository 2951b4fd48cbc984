"""Dotted keys (``task.max_length``, ``model.K``): the one helper that reads and writes them in
nested mappings, used by overrides, grid expansion, trial resolution and results."""

from __future__ import annotations

from typing import Any


def set_dotted(node: dict, dotted: str, value: Any) -> None:
    """``node[a][b][c] = value`` for ``a.b.c``, creating mappings on the way. Raises ValueError
    naming the part that is not a mapping."""
    parts = dotted.split(".")
    if not all(parts):
        raise ValueError("empty part in dotted key")
    for p in parts[:-1]:
        if node.get(p) is None:
            node[p] = {}
        if not isinstance(node[p], dict):
            raise ValueError(f"{p!r} is not a mapping, cannot set {dotted}")
        node = node[p]
    node[parts[-1]] = value


def get_dotted(node: Any, dotted: str, default: Any = None) -> Any:
    """``node[a][b][c]`` for ``a.b.c``, or ``default`` where a part is missing."""
    for p in dotted.split("."):
        if not isinstance(node, dict) or p not in node:
            return default
        node = node[p]
    return node
