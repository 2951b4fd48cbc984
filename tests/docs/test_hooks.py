"""The mkdocs hooks that are not checked by the built pages' own tests."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "docs" / "hooks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_sphinx_roles_render_as_the_names_they_mark():
    """mkdocstrings left the docstrings' roles as text: ":mod:<code>lightning_modules.distill</code>"."""
    roles = load("sphinx_roles")
    html = (
        "see :mod:<code>lightning_modules.distill</code>, :meth:<code>~Seq2Seq.forward</code> and "
        ":py:data:<code>PRESETS</code>; a ratio 3:2 and <code>:mod:</code> stay"
    )
    assert roles.plain(html) == (
        "see <code>lightning_modules.distill</code>, <code>forward</code> and "
        "<code>PRESETS</code>; a ratio 3:2 and <code>:mod:</code> stay"
    )
