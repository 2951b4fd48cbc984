"""Every row of the generated sweep-file key reference (docs/reference/sweep-file.md) says what
its key does: a new key without a description (``Field(description=...)`` or a comment above
the field in ``sweeps/spec/``, a docstring ``Args:`` line for a constructor argument) fails here,
naming it. Read from the site's build hook's own output, as mkdocs renders it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HOOK = ROOT / "docs" / "hooks" / "spec_reference.py"


@pytest.fixture(scope="module")
def hook():
    spec = importlib.util.spec_from_file_location("spec_reference_for_descriptions", HOOK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cells(row: str) -> list[str]:
    """A Markdown table row's cells: split on the pipes outside code spans that no backslash
    escapes (the hook escapes a pipe in a cell's text and leaves those in code as they are)."""
    out, cell, code, prev = [], "", False, ""
    for ch in row.strip().strip("|"):
        if ch == "`":
            code = not code
        if ch == "|" and not code and prev != "\\":
            out.append(cell.strip())
            cell = ""
        else:
            cell += ch
        prev = ch
    return [*out, cell.strip()]


def undescribed(markdown: str) -> tuple[int, list[str]]:
    """(rows read, the keys whose description cell is empty) of the key tables in ``markdown``."""
    rows = [line for line in markdown.splitlines() if line.startswith("| `")]
    empty = [cells(r)[0] for r in rows if len(cells(r)) < 5 or not cells(r)[4]]
    return len(rows), empty


def test_the_row_reader_finds_an_empty_description():
    """The check itself can fail: a row with an empty last cell, pipes in code spans and escaped."""
    text = "| `a.b` | int \\| null | `x|y` | >= 1 |  |\n| `a.c` | str | `q` |  | what c does |"
    assert undescribed(text) == (2, ["`a.b`"])


def test_every_sweep_file_key_has_a_description(hook):
    read, empty = undescribed(hook.spec_tables())
    assert read > 50, f"only {read} keys read: has the reference's table format changed?"
    assert not empty, (
        f"{len(empty)} sweep-file key(s) without a description in the key reference: "
        f"{', '.join(empty)}. Describe each beside its field in sweeps/spec/ (what it does, its "
        f"unit, what its default means), as a comment above the field or Field(description=...)"
    )


def test_every_constructor_argument_has_a_description(hook):
    pytest.importorskip("torch")
    read, empty = undescribed(hook.constructor_tables())
    assert read > 20, f"only {read} arguments read: has the reference's table format changed?"
    assert not empty, (
        f"{len(empty)} task/model argument(s) without a description in the key reference: "
        f"{', '.join(empty)}. Add each to its class's docstring, under Args:"
    )
