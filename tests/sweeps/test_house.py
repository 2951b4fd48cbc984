"""The shape of the sweeps package, held by tests: module sizes, the number of modules at its top,
no mechanism named in orchestration code, no import circle among the project's modules or its
packages, few imports inside functions and each with its reason, the README's layout, no machine
path in the repository.
Static reads of the source (ast), no imports: a fraction of a second."""

from __future__ import annotations

import ast
import functools
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SWEEPS = ROOT / "sweeps"
#: past this a module holds more than one concept: split it by concept (CONTRIBUTING)
MAX_LINES = 600
MAX_TOP_MODULES = 8  # besides launch.py: the rest lives in the packages
#: the tests that read every module's syntax tree share one worker, and so one reading
ON_TREES = pytest.mark.xdist_group("house-trees")


def sweeps_modules() -> list[Path]:
    return sorted(SWEEPS.rglob("*.py"))


@pytest.mark.parametrize("path", sweeps_modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_in_sweeps_exceeds_the_line_limit(path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, (
        f"{path.relative_to(ROOT)} has {lines} lines: it holds more than one concept; split it by "
        "concept (a module of its own for each), not into parts of a size"
    )


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


#: the project's packages, whose modules may not import each other in a circle
PACKAGES = ("sweeps", "lightning_modules", "datamodules", "benchmarks")


@functools.cache
def parsed(path: Path) -> tuple[list[str], ast.Module]:
    """A file's lines and syntax tree, read once per test process (the house tests share them:
    tests/conftest.py keeps them in one worker)."""
    text = path.read_text()
    return text.splitlines(), ast.parse(text)


@functools.cache
def project_modules() -> dict[str, Path]:
    """Dotted name -> file, for every module of :data:`PACKAGES` (a package by its ``__init__``)."""
    return {
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
        for package in PACKAGES
        for p in sorted((ROOT / package).rglob("*.py"))
    }


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules ``name`` imports anywhere in its file: at module level and inside
    functions alike (an import deferred into a function hides a circle, it does not remove it),
    ``if TYPE_CHECKING:`` blocks left out. ``from a.b import c`` names the module ``a.b.c`` when
    there is one, else ``a.b``; a benchmark's ``from _machine import`` is ``benchmarks._machine``."""

    def module_of(dotted: str) -> str | None:
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    tree = parsed(path)[1]
    typing_only = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for n in ast.walk(node)
    }
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str | None] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found.update(module_of(a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from its package up
                parent = package
                for _ in range(node.level - 1):
                    parent = parent.rpartition(".")[0]
                base = f"{parent}.{base}".rstrip(".")
            elif f"{name.partition('.')[0]}.{base}" in modules and name.startswith("benchmarks"):
                base = f"benchmarks.{base}"  # a script's sibling, found through sys.path
            found.update(module_of(f"{base}.{a.name}") for a in node.names)
    return {m for m in found if m and m != name}


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import graph's circles: each group of modules that reach one another (Tarjan's
    strongly connected components of more than one module), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(m: str) -> None:
        index[m] = low[m] = len(index)
        stack.append(m)
        for n in graph[m]:
            if n not in index:
                visit(n)
                low[m] = min(low[m], low[n])
            elif n in stack:
                low[m] = min(low[m], index[n])
        if low[m] == index[m]:
            group = []
            while True:
                n = stack.pop()
                group.append(n)
                if n == m:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    for m in sorted(graph):
        if m not in index:
            visit(m)
    return sorted(circles)


def test_the_circle_finder_finds_a_circle():
    """The check itself can fail: a hidden circle of three and a module importing itself."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert import_circles(graph) == [["a", "b", "c"]]


@functools.cache
def module_graph() -> dict[str, frozenset[str]]:
    """Each project module -> the project modules it imports (:func:`_imports`)."""
    modules = project_modules()
    return {m: frozenset(_imports(m, p, modules) & modules.keys()) for m, p in modules.items()}


@ON_TREES
def test_the_import_graph_has_no_circle():
    """No module of the project imports, through any chain, a module that imports it back, not
    even from inside a function: dependencies point down (CONTRIBUTING.md)."""
    graph = module_graph()
    assert sum(map(len, graph.values())) > 100, "the import reader finds too few imports"
    circles = import_circles(graph)
    said = [
        " <-> ".join(c) + ": " + "; ".join(f"{m} imports {sorted(graph[m] & set(c))}" for m in c)
        for c in circles
    ]
    assert not circles, "import circles (move what both need into a module below them):\n" + (
        "\n".join(said)
    )


def package_of(module: str) -> str:
    """A module's package at the level the layout speaks of: ``sweeps.<concept>`` for the concept
    packages under sweeps/ and a module directly in sweeps/ on its own, else the top package."""
    parts = module.split(".")
    if parts[0] == "sweeps" and len(parts) > 1:
        return ".".join(parts[:2])
    return parts[0]


@ON_TREES
def test_no_package_imports_a_package_that_imports_it():
    """Between packages too, dependencies point one way: spec below plan below search, stages
    above them all (docs/internals.md). Counted with imports inside functions."""
    graph: dict[str, set[str]] = {}
    for m, imported in module_graph().items():
        graph.setdefault(package_of(m), set()).update(package_of(n) for n in imported)
    graph = {k: v - {k} for k, v in graph.items()}
    for target in {n for v in graph.values() for n in v}:
        graph.setdefault(target, set())
    assert len(graph) > 15, sorted(graph)
    circles = import_circles(graph)
    said = [
        " <-> ".join(c) + ": " + "; ".join(f"{m} imports {sorted(graph[m] & set(c))}" for m in c)
        for c in circles
    ]
    assert not circles, "packages that import each other:\n" + "\n".join(said)


#: imports of the project's own modules that may sit inside functions, each with its reason
MAX_INNER_IMPORTS = 40
INNER_ROOTS = ("sweeps", "lightning_modules", "datamodules")


def inner_imports() -> list[tuple[Path, int, bool]]:
    """Each import of the project's own modules inside a function: its file, its line, and whether
    a comment gives its reason (on its line, or above its run of imports)."""
    found = []
    for root in INNER_ROOTS:
        for path in sorted((ROOT / root).rglob("*.py")):
            lines, tree = parsed(path)
            seen: set[int] = set()
            spans = {  # every line of an import statement, a wrapped one's included
                n
                for node in ast.walk(tree)
                if isinstance(node, ast.Import | ast.ImportFrom)
                for n in range(node.lineno, (node.end_lineno or node.lineno) + 1)
            }
            for fn in ast.walk(tree):
                if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                for node in ast.walk(fn):
                    if not isinstance(node, ast.Import | ast.ImportFrom) or node.lineno in seen:
                        continue
                    name = node.names[0].name if isinstance(node, ast.Import) else node.module
                    own = getattr(node, "level", 0) or (name or "").split(".")[0] in INNER_ROOTS
                    if not own:
                        continue
                    seen.add(node.lineno)
                    found.append((path, node.lineno, _has_reason(lines, node.lineno, spans)))
    return found


def _has_reason(lines: list[str], lineno: int, spans: set[int] | None = None) -> bool:
    """Whether the import on ``lineno`` has a comment on its line or above its run of imports
    (``spans``: the 1-based lines of the file's import statements, wrapped ones whole)."""
    if "#" in lines[lineno - 1]:
        return True
    i = lineno - 2
    while i >= 0 and (
        not lines[i].strip()
        or lines[i].lstrip().startswith(("import ", "from "))
        or (spans is not None and i + 1 in spans)
    ):
        i -= 1
    return i >= 0 and "#" in lines[i]


@ON_TREES
def test_few_imports_inside_functions_each_with_its_reason():
    """An import deferred into a function is for a reason a comment names (torch kept out of the
    launcher's parts, a process pinned to its CPUs first, an optional dependency); the rest sit at
    the top of their module, where a reader finds a module's dependencies."""
    found = inner_imports()
    assert found, "the reader finds no import inside a function: it is broken"
    where = [f"{p.relative_to(ROOT)}:{n}" for p, n, _ in found]
    assert len(found) <= MAX_INNER_IMPORTS, f"{len(found)} imports inside functions: {where}"
    bare = [f"{p.relative_to(ROOT)}:{n}" for p, n, reason in found if not reason]
    assert not bare, "imports inside functions without a comment that says why:\n" + "\n".join(bare)


def test_the_reason_reader_wants_a_comment():
    lines = ["def f():", "    x = 1", "    from sweeps import a", "", "    # torch", "    import b"]
    assert not _has_reason(lines, 3) and _has_reason(lines, 6)
    wrapped = [
        "def f():",
        "    # torch",
        "    from a import (",
        "        b,",
        "    )",
        "    import c",
    ]
    assert _has_reason(wrapped, 6, {3, 4, 5, 6}) and not _has_reason(wrapped, 6)


def test_the_readme_layout_names_every_package_of_sweeps():
    """README's layout lists each package under sweeps/ (a new one is named where users look)."""
    layout = (ROOT / "README.md").read_text().split("## Layout", 1)[1].split("```")[1]
    packages = sorted(p.parent.name for p in SWEEPS.glob("*/__init__.py"))
    missing = [name for name in packages if f"  {name}/" not in layout]
    assert not missing, f"README.md's layout does not list sweeps/{missing}"


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


def test_no_internal_issue_number_in_the_code():
    """Docstrings and comments say what the code does, not which tracker entry asked for it: a
    reader of the code has no such tracker."""
    files = subprocess.run(
        ["git", "ls-files", "*.py", "*.yaml", "*.sh", "*.sbatch", "Makefile"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    pattern = re.compile(r"\b[Ii]ssues? #?\d+|\bthe issue(?:'s|_s)?\b", re.IGNORECASE)
    found = [
        f"{rel}:{i}: {line.strip()[:80]}"
        for rel in files
        if rel != "tests/docs/test_docs.py"  # its pattern's own examples of what the docs held
        for i, line in enumerate((ROOT / rel).read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert not found, "internal issue numbers:\n" + "\n".join(found)


def test_make_clean_keeps_the_sweeps_results(tmp_path):
    """`make clean` deleted sweep-results/, the default --output: every sweep's results and
    checkpoints. It removes what the environments, benchmarks and docs build made, and keeps it."""
    import shutil

    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    for made in ("sweep-results", "bench-out", "site"):
        (tmp_path / made).mkdir()
        (tmp_path / made / "file").write_text("x")
    said = subprocess.run(
        ["make", "-s", "clean"], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["Makefile", "sweep-results"]
    assert "kept sweep-results/" in said


def test_make_docs_results_keeps_the_unfused_example_apart_from_the_fused_run(tmp_path):
    """`make docs-results SWEEP=k_vs_length` fuses now, and copied that run over
    docs/results/k_vs_length/, the committed unfused example the docs describe as unfused."""
    import shutil

    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")

    def commands(*args: str) -> str:
        return subprocess.run(
            ["make", "-n", "-o", "venv", "docs-results", *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=True,
        ).stdout

    fused = commands("SWEEP=k_vs_length")
    assert "docs/results/k_vs_length_fused/" in fused and "docs/results/k_vs_length/" not in fused
    assert "--set" not in fused
    unfused = commands("SWEEP=k_vs_length", "SET=fusion=off")
    assert "--output sweep-results/docs --set fusion=off" in unfused
    assert "docs/results/k_vs_length/" in unfused and "k_vs_length_fused" not in unfused
    other = commands("SWEEP=minimal_k", "SET=trainer.max_steps=10 num_samples=2")
    assert "--set trainer.max_steps=10 --set num_samples=2" in other
    assert "docs/results/minimal_k/" in other
