"""mkdocs hook: the Sphinx roles of the code's docstrings rendered as the names they mark.

The docstrings name other code as Sphinx does (``:mod:`lightning_modules.distill```,
``:meth:`~Seq2Seq.forward```), which mkdocstrings leaves as text beside a code span:
``:mod:<code>lightning_modules.distill</code>``. :func:`on_page_content` drops the role and, as
Sphinx does for a name written with ``~``, keeps its last component.
"""

from __future__ import annotations

import re
from typing import Any

ROLE = re.compile(
    r":(?:py:)?(?:mod|func|class|meth|data|attr|exc|obj|const|ref|doc):<code>(~?)([^<]*)</code>"
)


def plain(html: str) -> str:
    """``html`` with every role before a code span dropped (``~`` keeping the last name)."""
    return ROLE.sub(
        lambda m: f"<code>{m.group(2).rsplit('.', 1)[-1] if m.group(1) else m.group(2)}</code>",
        html,
    )


def on_page_content(html: str, **_: Any) -> str:
    return plain(html)
