"""Figures quoted in the user pages agree with the rows of benchmarks/README.md they cite.

The convention (benchmarks/README.md says it too): a page quotes a measured figure as a link
whose text is the figure and whose target is the row it comes from, e.g.
``[9.2x](benchmarks.md#gpu-fusion-paper-16)``; the row starts with ``<a id="gpu-fusion-paper-16"></a>``.
Each number of the link's text must be in that row, as written or rounded to the digits quoted.
Static reads: a fraction of a second.
"""

from __future__ import annotations

import re
import sys
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import references  # noqa: E402

ROOT = references.ROOT
BENCHMARKS = ROOT / "benchmarks" / "README.md"
ROW_ID = re.compile(r'<a id="([\w-]+)"></a>')
#: a link to a place on the benchmarks page (from docs/: benchmarks.md; from the root:
#: benchmarks/README.md)
CITE = re.compile(
    r"\[([^\]]+)\]\((?:\.\./)*(?:docs/)?(?:benchmarks\.md|benchmarks/README\.md)#([\w-]+)\)"
)
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")
CODE = re.compile(r"`[^`]*`")


def numbers(text: str) -> list[Decimal]:
    return [Decimal(n.replace(",", "")) for n in NUMBER.findall(text)]


def rows(text: str) -> dict[str, str]:
    """The benchmarks page's anchored rows: id -> the line that holds it."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        for name in ROW_ID.findall(CODE.sub("", line)):  # (an id in a code span is an example)
            assert name not in found, f"benchmarks/README.md: the id {name} twice"
            found[name] = line
    return found


def agrees(quoted: Decimal, row: str) -> bool:
    """Whether ``quoted`` is one of the row's numbers, rounded to the digits quoted (within half a
    unit of its last digit: 9.2 for 9.17, 17.3 for 17.35, 2.5 for 2.47)."""
    half = Decimal(1).scaleb(quoted.as_tuple().exponent) / 2
    return any(abs(value - quoted) <= half for value in numbers(ROW_ID.sub("", row)))


def disagreements(pages: list[tuple[str, str]], benchmarks: str) -> list[str]:
    """Each quoted figure that its row does not hold, each citation of a row that does not
    exist, and each figure cited from a place on the page that is not a row."""
    table = rows(benchmarks)
    out = []
    for name, text in pages:
        for n, line in enumerate(text.splitlines(), 1):
            for m in CITE.finditer(CODE.sub("", line)):  # (one in a code span is an example)
                quoted, target = numbers(m.group(1)), m.group(2)
                if not quoted:
                    continue  # a link to a section, not a figure
                if target not in table:
                    out.append(f"{name}:{n}: {m.group(0)} cites no row of benchmarks/README.md")
                    continue
                wrong = [str(q) for q in quoted if not agrees(q, table[target])]
                if wrong:
                    out.append(
                        f"{name}:{n}: {m.group(0)}: {', '.join(wrong)} not in the row "
                        f"{table[target].strip()[:120]!r}"
                    )
    return out


def cited_pages() -> list[Path]:
    pages = [p for p in references.user_pages() if p != BENCHMARKS]
    return [*pages, ROOT / "CHANGELOG.md"]


def test_each_quoted_figure_is_in_the_row_it_cites():
    pages = [(str(p.relative_to(ROOT)), p.read_text(encoding="utf-8")) for p in cited_pages()]
    found = disagreements(pages, BENCHMARKS.read_text(encoding="utf-8"))
    assert not found, "figures that disagree with benchmarks/README.md:\n" + "\n".join(found)


def test_the_pages_cite_figures_this_way():
    """The convention is in use where the GPU and fusion figures are quoted (a page that dropped
    its citations would pass the check above with nothing to check)."""
    for page, least in (("docs/gpu.md", 10), ("docs/fusion.md", 10), ("README.md", 2)):
        text = (ROOT / page).read_text(encoding="utf-8")
        cited = [m for m in CITE.finditer(text) if numbers(m.group(1))]
        assert len(cited) >= least, f"{page} cites {len(cited)} figures by their rows"


def test_the_check_finds_a_figure_that_moved():
    bench = (
        "| cell | step | ratio |\n"
        '| <a id="paper-16"></a>paper_copy M=16 | 0.1517 s | 9.17 |\n'
        '| <a id="tiny-16"></a>tiny M=16 | 1,234.5 s | 9.98 |\n'
        "## A heading\n"
    )
    page = (
        "fine: [9.2x](benchmarks.md#paper-16), [0.152 s](benchmarks.md#paper-16), "
        "[10.0x](../benchmarks.md#tiny-16), [1,234.5 s](benchmarks/README.md#tiny-16), "
        "[a section](benchmarks.md#a-heading)\n"
        "moved: [9.3x](benchmarks.md#paper-16)\n"
        "too precise: [9.171x](benchmarks.md#paper-16)\n"
        "gone: [7.0x](benchmarks.md#p8)\n"
        "a heading is no row: [3 rows](benchmarks.md#a-heading)\n"
    )
    found = disagreements([("page.md", page)], bench)
    assert [line.split(":")[1] for line in found] == ["2", "3", "4", "5"], found
    assert "9.3 not in the row" in found[0] and "cites no row" in found[2]
