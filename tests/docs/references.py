"""What the user docs point at, found and checked without importing the project: repository
paths, module attributes (``pkg.mod.attr``, ``attr`` in ``pkg.mod``, ``pkg/mod.py: attr``), pytest
node ids, ``python -m`` modules, links and the README sections they name. Static reads (ast and
the file tree): a fraction of a second for every page.

Used by ``tests/docs/test_docs.py``; :func:`problems` lists what does not exist, one line each.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import unicodedata
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: the repository's folders and files a doc may name by path
TOP = (
    "sweeps",
    "lightning_modules",
    "datamodules",
    "tests",
    "docs",
    "benchmarks",
    "cluster",
    "requirements",
    ".ci",
)
TOP_FILES = ("README.md", "CONTRIBUTING.md", "CHANGELOG.md", "Makefile", "pyproject.toml")
PACKAGES = ("sweeps", "lightning_modules", "datamodules")

#: a placeholder inside a path or name: sweeps/<name>.yaml, docs/results/*/, $(SWEEP), {pair}, ...
PLACEHOLDER = re.compile(r"[<>*{}$…]|\.\.\.|\b[A-Z][A-Z_]{2,}\b")

PATH = re.compile(
    r"(?<![\w./~-])((?:" + "|".join(re.escape(t) for t in TOP) + r")/[\w./<>*{}$()-]*)"
)
DOTTED = re.compile(r"(?<![\w./-])((?:" + "|".join(PACKAGES) + r")(?:\.\w+)+)")
IN_MODULE = re.compile(r"`([A-Za-z_]\w*(?:\.\w+)*)(?:\([^`]*\))?`\s+in\s+`([\w./]+)`")
#: `pkg/mod.py: attr` or `pkg/mod.py:attr`, the whole of a code span
FILE_ATTR = re.compile(
    r"((?:" + "|".join(PACKAGES) + r"|benchmarks)/[\w/]+\.py):\s?([A-Za-z_][\w.]*)"
)
CODE_SPAN = re.compile(r"`([^`]+)`")
#: an anchor a table row carries (benchmarks/README.md's cited rows)
ROW_ANCHOR = re.compile(r'<a id="([\w-]+)"></a>')
NODE_ID = re.compile(r"(tests/[\w/]+\.py)::(\w+)")
PYTHON_M = re.compile(r"python3?\s+-m\s+([\w.]+)")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
#: a section named in prose: README's "Quickstart", benchmarks/README.md, "Durations"
SECTION = re.compile(
    r"((?:[\w./-]*/)?README(?:\.md)?)(?:'s)?,?\s+(?:section\s+)?[\"“]([^\"”]{3,80})[\"”]"
)


#: a section named in prose: the README's benchmark section
SECTION_PROSE = re.compile(r"((?:[\w./-]*/)?README(?:\.md)?)'s ([a-z][\w -]{2,40}?) section")


def user_pages() -> list[Path]:
    """The pages a user reads: README, CONTRIBUTING, the cluster and benchmark guides, and every
    docs/ page except the committed runs' own records (docs/results/<sweep>/)."""
    pages = [ROOT / "README.md", ROOT / "CONTRIBUTING.md"]
    pages += [ROOT / "cluster" / "README.md", ROOT / "benchmarks" / "README.md"]
    for page in sorted((ROOT / "docs").rglob("*.md")):
        rel = page.relative_to(ROOT / "docs").parts
        if rel[0] == "results" and len(rel) > 2:
            continue
        pages.append(page)
    return pages


def lines(page: Path) -> list[tuple[int, str]]:
    return list(enumerate(page.read_text(encoding="utf-8").splitlines(), 1))


# ----------------------------------------------------------------------------------------------
# Python names, by reading the source


@cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def module_file(dotted: str) -> Path | None:
    """The file of a module or package of this repository (``sweeps.report`` ->
    ``sweeps/report/__init__.py``), or None."""
    base = ROOT.joinpath(*dotted.split("."))
    if (base / "__init__.py").exists():
        return base / "__init__.py"
    if base.with_suffix(".py").exists():
        return base.with_suffix(".py")
    return None


def _names(body: list[ast.stmt]) -> dict[str, ast.AST]:
    """Names bound at the top of a module or class body (defs, classes, assignments, imports,
    ``__all__`` entries, and the branches of top-level ``if``/``try``)."""
    out: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out[node.name] = node
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        out[n.id] = node
                        if n.id == "__all__" and isinstance(node.value, ast.List | ast.Tuple):
                            for elt in node.value.elts:
                                if isinstance(elt, ast.Constant) and isinstance(elt.value, str):
                                    out.setdefault(elt.value, node)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for a in node.names:
                out[(a.asname or a.name).split(".")[0]] = node
        elif isinstance(node, ast.If | ast.Try):
            inner = list(node.body) + list(getattr(node, "orelse", []))
            for h in getattr(node, "handlers", []):
                inner += h.body
            out.update(_names(inner))
    return out


def attribute_exists(module: str, attr: str) -> bool:
    """``attr`` (``name`` or ``Class.member``) in the repository module ``module``, by reading it;
    a name a package's ``__init__`` imports, or one of its submodules, counts."""
    path = module_file(module)
    if path is None:
        return False
    first, *rest = attr.split(".")
    names = _names(_tree(path).body)
    node = names.get(first)
    if node is None:
        sub = module_file(f"{module}.{first}")
        return sub is not None and (
            not rest or attribute_exists(f"{module}.{first}", ".".join(rest))
        )
    for part in rest:
        if isinstance(node, ast.ClassDef):
            members = _names(node.body)
            members.update(
                {
                    t.attr: t
                    for f in node.body
                    if isinstance(f, ast.FunctionDef)
                    for n in ast.walk(f)
                    for t in ([n] if isinstance(n, ast.Attribute) else [])
                    if isinstance(t.value, ast.Name) and t.value.id == "self"
                }
            )
            node = members.get(part)
            if node is None:
                return False
        elif isinstance(node, ast.ImportFrom) and node.module:
            target = node.module if node.level == 0 else _relative(module, path, node)
            return attribute_exists(target, ".".join([first, *rest][1:])) if target else True
        else:
            return True  # a method of a value (a dict's .get, ...): not checked further
    return True


def _relative(module: str, path: Path, node: ast.ImportFrom) -> str | None:
    parts = module.split(".")
    if path.name != "__init__.py":
        parts = parts[:-1]
    parts = parts[: len(parts) - node.level + 1] if node.level > 1 else parts
    return ".".join(parts + ([node.module] if node.module else []))


def dotted_exists(name: str) -> bool:
    """``pkg.mod.attr...``: the longest prefix that is a repository module, then attributes."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        if module_file(".".join(parts[:i])) is not None:
            rest = parts[i:]
            return not rest or attribute_exists(".".join(parts[:i]), ".".join(rest))
    return False


def module_runs(name: str) -> bool:
    """``python -m name`` finds a module: a repository module (a package needs ``__main__``),
    or an installed one."""
    if name.split(".")[0] in PACKAGES:
        base = ROOT.joinpath(*name.split("."))
        return (base / "__main__.py").exists() or base.with_suffix(".py").exists()
    return importlib.util.find_spec(name.split(".")[0]) is not None


# ----------------------------------------------------------------------------------------------
# Sections and links


def slug(heading: str) -> set[str]:
    """The anchors a heading gets: Python-Markdown's (mkdocs) and GitHub's."""
    text = re.sub(r"\s*\{#([\w-]+)\}\s*$", "", heading)
    plain = re.sub(r"[`*]", "", text)  # code and emphasis marks; `_` stays (a word character)
    norm = unicodedata.normalize("NFKD", plain).encode("ascii", "ignore").decode()
    mk = re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", norm).strip().lower())
    gh = re.sub(r" ", "-", re.sub(r"[^\w\- ]", "", plain.strip().lower()))
    out = {mk, gh}
    if m := re.search(r"\{#([\w-]+)\}\s*$", heading):
        out.add(m.group(1))
    return out


@cache
def generated_text(page: Path) -> str:
    """What the docs site's build hook writes into the key reference page (its placeholder):
    the spec's tables, and the constructors' section headings (their anchors from the tasks and
    the registered mechanisms' names, read from the source: no torch)."""
    hook_path = ROOT / "docs" / "hooks" / "spec_reference.py"
    spec = importlib.util.spec_from_file_location("spec_reference", hook_path)
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    if page != ROOT / "docs" / hook.PAGE:
        return ""
    out = [hook.sweep_file_reference(constructors=False)]
    out += ["## Constructors {#keys-constructors}", "### t {#keys-task-constructors}"]
    out += ["### m {#keys-model-constructors}", "### a {#keys-attention}"]
    tasks = re.findall(
        r'"(\w+)": "\w+DataModule"', (ROOT / "datamodules" / "__init__.py").read_text()
    )
    out += [f"#### t {{#keys-task-{t}}}" for t in tasks]
    for source in sorted((ROOT / "lightning_modules" / "attention").glob("*.py")):
        for name in re.findall(r'@register_attention\("(\w+)"\)', source.read_text()):
            out.append(f"#### a {{#keys-attention-{name}}}")
    return "\n".join(out)


@cache
def headings(page: Path) -> tuple[list[str], set[str]]:
    """The page's section titles and their anchors (code blocks skipped), and the anchors of its
    rows (``<a id="..."></a>``, outside code spans)."""
    titles, anchors, fenced = [], set(), False
    generated = list(enumerate(generated_text(page).splitlines()))
    for _, line in lines(page) + generated:
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6}\s+(.*)", line)):
            titles.append(re.sub(r"\s*\{#[\w-]+\}\s*$", "", m.group(1)).strip())
            anchors |= slug(m.group(1))
        elif not fenced:
            anchors |= set(ROW_ANCHOR.findall(CODE_SPAN.sub("", line)))
    return titles, anchors


def _included(page: Path) -> Path | None:
    """A docs page that only shows another file (``--8<-- "cluster/README.md"``)."""
    m = re.search(r'^--8<-- "([^"]+)"', page.read_text(encoding="utf-8"), flags=re.M)
    return ROOT / m.group(1) if m else None


def link_problem(page: Path, target: str, text: str | None = None) -> str | None:
    """Why a link from ``page`` (whose content is ``text``) is dead, or None."""
    if re.match(r"[a-z]+:", target) or target.startswith("//"):
        return None  # a URL
    path, _, anchor = target.partition("#")
    dest = (page.parent / path).resolve() if path else page
    if path and not dest.exists():
        shown = dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest
        return f"link to {target}: no {shown}"
    if path and dest.is_dir() and page.resolve().is_relative_to(ROOT / "docs"):
        # the docs site makes a page of each .md file, none of a folder
        return f"link to {target}: a folder, which the docs site has no page for; link a file in it"
    if anchor and dest.suffix == ".md":
        if not path and text is not None:
            titles = re.findall(r"^#{1,6}\s+(.*)", text, re.M)
            anchors = set().union(*(slug(t) for t in titles)) if titles else set()
        else:
            anchors = headings(_included(dest) or dest)[1]
        if anchor not in anchors:
            return f"link to {target}: no section #{anchor} there"
    return None


# ----------------------------------------------------------------------------------------------
# Everything at once


def _path_problem(token: str) -> str | None:
    token = token.rstrip(".,;:)")
    token = re.split(r"::|:(?=\w)", token)[0]
    if PLACEHOLDER.search(token) or "(" in token:
        return None
    return None if (ROOT / token).exists() else f"no file {token}"


def problems(pages: list[Path] | None = None) -> list[str]:
    """Every reference on the pages that does not resolve, as ``page:line: what``."""
    found: list[str] = []
    for page in pages or user_pages():
        found += text_problems(page.read_text(encoding="utf-8"), page)
    return found


def text_problems(text: str, page: Path) -> list[str]:
    """The references in ``text`` (the content of ``page``, which need not exist: relative links
    resolve from its folder) that do not resolve."""
    name = str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else page.name
    found: list[str] = []
    for n, line in enumerate(text.splitlines(), 1):
        where = f"{name}:{n}"
        for m in PATH.finditer(line):
            if why := _path_problem(m.group(1)):
                found.append(f"{where}: {why}")
        for m in DOTTED.finditer(line):
            dotted = m.group(1).rstrip(".")
            if dotted.endswith((".py", ".md", ".yaml")) or PLACEHOLDER.search(dotted):
                continue
            if not dotted_exists(dotted):
                found.append(f"{where}: no {dotted}")
        for m in IN_MODULE.finditer(line):
            attr, module = m.group(1), m.group(2).removesuffix(".py").replace("/", ".")
            if module.split(".")[0] in PACKAGES and module_file(module) is not None:
                if not attribute_exists(module, attr):
                    found.append(f"{where}: no {attr} in {module}")
        for span in CODE_SPAN.finditer(line):
            if not (m := FILE_ATTR.fullmatch(span.group(1))):
                continue
            module = m.group(1).removesuffix(".py").replace("/", ".")
            attr = m.group(2).rstrip(".")
            if module_file(module) is not None and not attribute_exists(module, attr):
                found.append(f"{where}: no {attr} in {m.group(1)}")
        for m in NODE_ID.finditer(line):
            test = ROOT / m.group(1)
            if test.exists() and f"def {m.group(2)}(" not in test.read_text():
                found.append(f"{where}: no test {m.group(2)} in {m.group(1)}")
        for m in PYTHON_M.finditer(line):
            module = m.group(1).rstrip(".")
            if not PLACEHOLDER.search(module) and not module_runs(module):
                found.append(f"{where}: python -m {module}: no such module")
        for m in LINK.finditer(CODE_SPAN.sub("", line)):  # (a link in a code span is an example)
            if why := link_problem(page, m.group(1) or m.group(2), text):
                found.append(f"{where}: {why}")
    flat = re.sub(r"\s*\n\s*", " ", text)  # a section's name may wrap onto the next line
    for m in [*SECTION.finditer(flat), *SECTION_PROSE.finditer(flat)]:
        readme = m.group(1) if "/" in m.group(1) else "README.md"
        target = ROOT / (readme if readme.endswith(".md") else f"{readme}.md")
        wanted = m.group(2).strip().lower()
        titles = [t.lower() for t in headings(target)[0]] if target.exists() else []
        ok = wanted in titles if m.re is SECTION else any(wanted in t for t in titles)
        if target.exists() and not ok:
            found.append(f'{name}: {readme} has no section "{m.group(2)}"')
    return found
