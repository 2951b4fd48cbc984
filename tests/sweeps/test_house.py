"""The shape of the sweeps package, held by tests: module sizes, the number of modules at its top,
no mechanism named in orchestration code, no import cycle, no machine path in the repository.
Static reads of the source (ast), no imports: a fraction of a second."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SWEEPS = ROOT / "sweeps"
MAX_LINES = 400  # CONTRIBUTING's limit: a module a newcomer reads in one sitting
MAX_TOP_MODULES = 8  # besides launch.py: the rest lives in the packages


def sweeps_modules() -> list[Path]:
    return sorted(SWEEPS.rglob("*.py"))


@pytest.mark.parametrize("path", sweeps_modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_in_sweeps_exceeds_the_line_limit(path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(ROOT)} has {lines} lines; split it by concept"


def test_few_modules_at_the_top_of_sweeps():
    top = sorted(p.name for p in SWEEPS.glob("*.py") if p.name != "launch.py")
    assert len(top) <= MAX_TOP_MODULES, f"{len(top)} modules directly in sweeps/: {top}"


def test_orchestration_names_no_mechanism():
    """Mechanism knowledge (cost per step, headline option, the default baseline) lives beside
    the mechanisms; code in sweeps/ compares no attention name with a literal."""
    pattern = re.compile(r"""attention["')\]]*\s*[!=]=\s*["']|["']\s*[!=]=\s*\w*attention\b""")
    found = [
        f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
        for p in sweeps_modules()
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert not found, "\n".join(found)


def _imports(path: Path) -> set[str]:
    """The sweeps modules ``path`` imports at module level (imports inside functions are lazy
    and cannot form a cycle at import time)."""
    tree = ast.parse(path.read_text())
    out: set[str] = set()
    for node in tree.body:
        nodes = [node]
        if isinstance(node, ast.If | ast.Try):  # `if TYPE_CHECKING:` stays out; try-imports count
            nodes = [] if isinstance(node, ast.If) else node.body
        for n in nodes:
            if isinstance(n, ast.ImportFrom) and n.module and n.module.startswith("sweeps"):
                out.add(n.module)
                out.update(f"{n.module}.{a.name}" for a in n.names)
            elif isinstance(n, ast.Import):
                out.update(a.name for a in n.names if a.name.startswith("sweeps"))
    return out


def test_the_sweeps_import_graph_has_no_cycle():
    modules = {
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
        for p in sweeps_modules()
    }
    graph = {m: {i for i in _imports(p) if i in modules and i != m} for m, p in modules.items()}
    state: dict[str, int] = {}
    cycle: list[str] = []

    def visit(m: str, stack: list[str]) -> bool:
        state[m] = 1
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                cycle.extend(stack[stack.index(n) :] + [n] if n in stack else [m, n])
                return True
            if state.get(n) is None and visit(n, stack + [n]):
                return True
        state[m] = 2
        return False

    for m in sorted(graph):
        if state.get(m) is None and visit(m, [m]):
            break
    assert not cycle, " -> ".join(cycle)


def test_no_machine_path_in_the_repository():
    """Shared data is found relative to the repository root (or MEMATTN_SHARED_DATA)."""
    files = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    # this project's development machines: anything under /work, root's home, and a sweep run in
    # a scratch folder (the committed example runs in docs/results/ name their trials' folders
    # relative to the repository: `make docs-results` rewrites them)
    pattern = re.compile("/" + r"work/\w|/" + r"root/|/" + r"tmp/[\w.-]+/sweep-results")
    found = []
    for rel in files:
        path = ROOT / rel
        if path.suffix in {".png", ".de", ".en"}:
            continue
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        found += [
            f"{rel}:{i}" for i, line in enumerate(text.splitlines(), 1) if pattern.search(line)
        ]
    assert not found, found
