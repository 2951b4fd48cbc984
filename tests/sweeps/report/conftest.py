"""Fixtures of the report tests."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture
def drawn(monkeypatch) -> dict[str, Any]:
    """The figures the report draws, by file name, kept open rather than saved (the plots' and
    results.md's own saves both replaced)."""
    from sweeps.report import local, plots

    figures: dict[str, Any] = {}

    def keep(fig, path, *args, **kwargs):
        figures[path.name] = fig
        return path

    monkeypatch.setattr(plots, "_save", keep)
    monkeypatch.setattr(local, "save_figure", keep)
    return figures
