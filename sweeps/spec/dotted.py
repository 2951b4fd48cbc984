"""Dotted keys (``task.max_length``, ``model.K``): the one helper that reads and writes them in
nested mappings, used by overrides, grid expansion, trial resolution and results."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any


def key_path(parts: Iterable[str | int]) -> str:
    """A key's path as the messages write it: ``objectives[0].goal``, ``grid.model[1].K`` (a
    list's item by its number in brackets; ``--set`` takes this form and the dotted one)."""
    out = ""
    for part in parts:
        index = isinstance(part, int) and not isinstance(part, bool)
        out += f"[{part}]" if index else f".{part}" if out else str(part)
    return out


def dotted_key(key: str) -> str:
    """``objectives[1].name`` -> ``objectives.1.name``: the bracket form the messages write, as
    a dotted key (the form :func:`set_dotted` walks)."""
    return re.sub(r"\[(\d+)\]", r".\1", key)


def set_dotted(node: dict, dotted: str, value: Any) -> None:
    """``node[a][b][c] = value`` for ``a.b.c``, creating mappings on the way; a number indexes a
    list (``objectives.1.goal``). Raises ValueError naming the part that cannot be set."""
    parts = dotted.split(".")
    if not all(parts):
        raise ValueError("empty part in dotted key")
    for i, p in enumerate(parts[:-1]):
        if isinstance(node, dict) and node.get(p) is None:
            node[p] = {}
        node = _item(node, p, ".".join(parts[: i + 1]), dotted)
        if not isinstance(node, dict | list):
            raise ValueError(f"{p!r} is not a mapping, cannot set {dotted}")
    if isinstance(node, list):
        _item(node, parts[-1], dotted, dotted, value)  # an index in range
        node[int(parts[-1])] = value
    else:
        node[parts[-1]] = value


def _item(node: dict | list, part: str, where: str, dotted: str, value: Any = ...) -> Any:
    """``node``'s entry ``part``: a key of a mapping, an index of a list (``value``: what was to
    be set there, for the hint of seeds' mapping form)."""
    if isinstance(node, dict):
        return node[part]
    if not part.isdigit() or int(part) >= len(node):
        last = f"0 to {len(node) - 1}" if node else "none"
        listed = where.rsplit(".", 1)[0]
        mapping = (  # seeds' list form and its mapping form: the setting goes in the mapping
            f"; write seeds in their mapping form, --set 'seeds={_seeds_mapping(node, part, value)}'"
            if listed == "seeds" and not part.isdigit()
            else ""
        )
        raise ValueError(
            f"{listed} is a list of {len(node)} item(s) (numbered {last}), cannot set {dotted}"
            f"{mapping}"
        )
    return node[int(part)]


def _seeds_mapping(seeds: list, key: str, value: Any) -> str:
    """``{values: [0, 1], per_configuration: true}``: seeds' list form as a mapping with ``key``
    set to ``value`` (``...`` where it is not known); ``values`` itself replaces the list."""
    given = "..." if value is ... else json.dumps(value)
    if key == "values":
        return f"{{values: {given}}}"
    return f"{{values: {json.dumps(seeds)}, {key}: {given}}}"


def get_dotted(node: Any, dotted: str, default: Any = None) -> Any:
    """``node[a][b][c]`` for ``a.b.c``, or ``default`` where a part is missing. A mapping's key
    may itself hold dots (``parameters: {model.K: ...}``): ``parameters.model.K`` finds it; a
    number indexes a list (``objectives.1.goal``)."""
    if isinstance(node, list):
        head, _, rest = dotted.partition(".")
        if not head.isdigit() or int(head) >= len(node):
            return default
        return get_dotted(node[int(head)], rest, default) if rest else node[int(head)]
    if not isinstance(node, dict):
        return default
    if dotted in node:
        return node[dotted]
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):  # the longest key first
        head = ".".join(parts[:cut])
        if head in node:
            found = get_dotted(node[head], ".".join(parts[cut:]), _MISSING)
            if found is not _MISSING:
                return found
    return default


_MISSING = object()


#: a key one mapping has and the other lacks, in :func:`dotted_differences`
UNSET = object()


def dotted_differences(before: Any, now: Any, key: str = "") -> list[tuple[str, Any, Any]]:
    """``[(a.b, value before, value now), ...]`` for the dotted keys whose values differ between
    two nested mappings (lists compared whole; :data:`UNSET` where one lacks the key)."""
    if isinstance(before, dict) and isinstance(now, dict):
        found = []
        for k in [*before, *(k for k in now if k not in before)]:
            inner = f"{key}.{k}" if key else str(k)
            found += dotted_differences(before.get(k, UNSET), now.get(k, UNSET), inner)
        return found
    return [] if before == now else [(key, before, now)]


def holding_key(key: str, keys) -> str | None:
    """The one of ``keys`` that is ``key`` or holds it (``model.attention`` for
    ``model.attention.k``), or None."""
    return next((k for k in sorted(keys) if key == k or key.startswith(f"{k}.")), None)
