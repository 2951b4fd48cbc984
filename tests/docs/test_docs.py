"""The README stays a user's page, and the docs site's key reference covers every sweep-file key.

Fast (no mkdocs build): the reference is produced by calling the site's build hook directly.
"""

from __future__ import annotations

import importlib.util
import re
import typing
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
HOOK = ROOT / "docs" / "hooks" / "spec_reference.py"

#: a commit hash: 7-40 hex digits in backticks, or after the word "commit"
COMMIT_HASH = re.compile(r"`[0-9a-f]{7,40}`|\bcommits?\s+`?[0-9a-f]{7,40}\b", re.IGNORECASE)


@pytest.fixture(scope="module")
def hook():
    spec = importlib.util.spec_from_file_location("spec_reference", HOOK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_is_at_most_200_lines():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, (
        f"README.md has {len(lines)} lines; move detail to docs/ (at most 200)"
    )


def test_readme_names_no_commit():
    found = COMMIT_HASH.findall(README.read_text(encoding="utf-8"))
    assert not found, f"README.md names commits {found}: history goes to CHANGELOG.md"


def test_commit_pattern_catches_hashes():
    """The pattern itself can fail: it finds the ways the old README named commits."""
    assert COMMIT_HASH.search("At `1b9287c` the same runs gave")
    assert COMMIT_HASH.search("Before that (commit 163d9f1, same command)")
    assert not COMMIT_HASH.search("`decode_seconds` is 0.0246 s; `val/bleu` 100.00")


def _models_in(annotation) -> list[type]:
    from pydantic import BaseModel

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def test_key_reference_covers_every_sweep_file_key(hook):
    spec = hook.sweep_spec()
    text = hook.spec_tables(spec)
    for name, field in spec.model_fields.items():
        assert f"| `{name}` |" in text, f"top-level key {name!r} missing from the key reference"
        for sub in _models_in(field.annotation):
            for key in sub.model_fields:
                assert re.search(rf"\| `{re.escape(name)}[^`|]*\.{re.escape(key)}` \|", text), (
                    f"{name}...{key} missing from the key reference"
                )


def test_reference_page_has_the_placeholder(hook):
    page = ROOT / "docs" / hook.PAGE
    assert hook.PLACEHOLDER in page.read_text(encoding="utf-8")
