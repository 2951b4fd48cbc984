"""Reading a sweep file's YAML, and a ``--set`` value's, one way: PyYAML's safe loader, but a
key given twice in one mapping is refused rather than the last kept."""

from __future__ import annotations

from typing import Any

import yaml

#: how a key given twice ends its message (what a --set's reader tells it by, the error's class
#: being gone once the value's parser words it)
KEEP_ONE = "; keep one"


class KeyGivenTwice(ValueError):
    """A mapping of the file names one key twice."""


class _OneKeyOnceLoader(yaml.SafeLoader):
    """YAML's safe loader, but a key given twice in one mapping is refused: PyYAML keeps the last
    value without a word, so a pasted line would quietly replace a setting (merges, ``<<:``,
    still override)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: YAML's own error follows
                continue
            if first is not None:
                where = "" if first == line else f" (first on line {first})"
                raise KeyGivenTwice(
                    f"line {line}: {key} is given twice in one mapping{where}{KEEP_ONE}"
                )
            seen[key] = line
        return super().construct_mapping(node, deep)


def read_yaml(text: str, source: str) -> Any:
    """A sweep file's YAML (:class:`_OneKeyOnceLoader`); its errors' marks name ``source``."""
    loader = _OneKeyOnceLoader(text)
    loader.name = source  # marks say the file, not "<unicode string>"
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()
