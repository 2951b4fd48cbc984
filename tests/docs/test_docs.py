"""The user docs agree with the code and with each other: every file, module attribute,
``python -m`` command and README section they name exists (:mod:`references`; the sweep files'
comments too), each duration is stated once (benchmarks/README.md), the pages hold no lab notebook
(commit hashes, how the work was organised), the README's reuse snippet runs as written and its
results.csv table lists every column, and the docs site's key reference covers every sweep-file
key.

Fast (no mkdocs build, no import of the project for the references): the key reference is
produced by calling the site's build hook directly; only the snippet trains (a few seconds).
"""

from __future__ import annotations

import importlib.util
import re
import sys
import typing
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import references  # noqa: E402

ROOT = references.ROOT
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


# ----------------------------------------------------------------------------------------------
# What the docs name exists


def test_user_docs_name_only_what_exists():
    """Files, module attributes, `python -m` modules, test ids, links and README sections named in
    README, CONTRIBUTING, docs/ (but the committed runs' own records), cluster/ and benchmarks/."""
    found = references.problems()
    assert not found, "dead references in the user docs:\n" + "\n".join(found)


CANARY = """# A page

- `sweeps/no_such_module.py` and `tests/test_moo.py::test_gone`
- `sweeps.report.results.no_such_column_list` and `attach_timing` in `sweeps.report.results`
- `sweeps/report/results.py: attach_timing`
- `python -m sweeps.no_such_command DIR`
- [the timing page](decode-timing.md#no-such-section), [here](#not-here), [there](nowhere.md)
- [the runs](results/)
- the README's "What repeats exactly", and the README's benchmark section
- fine: `sweeps/launch.py`, `sweeps.timing.record.attach_timing`, `python -m sweeps.report DIR`,
  `FIRST_COLUMNS` in `sweeps.report.results`, [results](reading-results.md#resultscsv),
  [up](#a-page), `lightning_modules.Seq2SeqModule.decode`, `sweeps/<name>.yaml`,
  benchmarks/README.md, "Durations"
"""


def test_the_reference_check_finds_each_kind_of_dead_reference():
    found = references.text_problems(CANARY, ROOT / "docs" / "canary.md")
    expected = [
        "no file sweeps/no_such_module.py",
        "no file tests/test_moo.py",
        "no sweeps.report.results.no_such_column_list",
        "no attach_timing in sweeps.report.results",
        "no attach_timing in sweeps/report/results.py",
        "python -m sweeps.no_such_command: no such module",
        "decode-timing.md#no-such-section: no section",
        "#not-here: no section",
        "link to nowhere.md: no",
        "link to results/: a folder",
        'README.md has no section "What repeats exactly"',
        'README.md has no section "benchmark"',
    ]
    for what in expected:
        assert any(what in line for line in found), f"{what!r} not found in {found}"
    fine = [line for line in found if re.match(r"docs/canary\.md:(10|11|12|13):", line)]
    assert not fine, f"references that exist were reported: {fine}"


# ----------------------------------------------------------------------------------------------
# One figure per duration; no lab notebook in the user pages

#: a command whose duration the docs might quote
TIMED = re.compile(
    r"make (?:test(?:-fast|-slow)?|sweep|venv|docs-results|bench)\b|--profile cpu|\b`?cpu`? profiles?"
    r"|--smoke|--profile smoke|quickstart|\b2-core CPU\b|\bon 2 cores\b",
    re.IGNORECASE,
)
DURATION = re.compile(
    r"\b\d+(?:[.,]\d+)?(?:\s*-\s*\d+(?:[.,]\d+)?)?\s*(?:s|sec|seconds?|min|minutes?|h|hours?)\b"
    r"|\b(?:an|one|a few|under a|about a)\s+(?:hour|minute)s?\b",
    re.IGNORECASE,
)


SWEEP_FILES = sorted((ROOT / "sweeps").glob("*.yaml"))
#: a YAML comment: from a ``#`` at the start of a line or after a space to the line's end
COMMENT = re.compile(r"(?:^|\s)#(.*)$")


def comments(path: Path) -> str:
    """A sweep file's comments, each on its own line's number (the YAML itself blanked)."""
    return "\n".join(
        m.group(1) if (m := COMMENT.search(line)) else ""
        for line in path.read_text(encoding="utf-8").splitlines()
    )


def page_lines(page: Path) -> list[tuple[int, str]]:
    """A page's lines; a sweep file's comments only."""
    if page.suffix == ".yaml":
        return list(enumerate(comments(page).splitlines(), 1))
    return references.lines(page)


def duration_claims(pages: list[Path]) -> list[str]:
    """Lines that put a figure of time beside a command (outside benchmarks/README.md)."""
    found = []
    for page in pages:
        name = page.relative_to(ROOT) if page.is_relative_to(ROOT) else page.name
        for n, line in page_lines(page):
            if TIMED.search(line) and DURATION.search(line):
                found.append(f"{name}:{n}: {line.strip()}")
    return found


def test_each_duration_is_stated_once_in_benchmarks():
    """How long `make test`, `make sweep`, a cpu profile... take is said in benchmarks/README.md's
    Durations table, with its machine; every other page and the Makefile link there."""
    pages = [p for p in references.user_pages() if p != ROOT / "benchmarks" / "README.md"]
    found = duration_claims([*pages, ROOT / "Makefile", *SWEEP_FILES])
    assert not found, "durations outside benchmarks/README.md:\n" + "\n".join(found)
    table = (ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8")
    assert "## Durations" in table
    for command in ("make sweep", "make test", "make test-fast", "--profile cpu"):
        row = rf"^\| (?:<a id=\"[\w-]+\"></a>)?`[^|]*{re.escape(command)}[^|]*` [^|]*\| [^|]*\d"
        assert re.search(row, table, re.M), (
            f"benchmarks/README.md's Durations table has no figure for {command}"
        )


def test_the_duration_check_finds_a_quoted_time(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "make test    # the default suite, 6-11 minutes on 2 cores\n"
        "the `cpu` profile fits about an hour on a 2-core CPU\n"
        "make test    # the default suite (how long: benchmarks/README.md)\n"
    )
    assert [line.split(":")[1] for line in duration_claims([page])] == ["1", "2"]
    assert DURATION.search("6-11 minutes") and DURATION.search("about an hour")
    assert TIMED.search("--profile cpu    # Table 1 scaled down, 3 seeds: 1-3 h")
    assert DURATION.search("1-3 h on 2 cores") and not DURATION.search("3 seeds, 54 trials")
    sweep = tmp_path / "sweep.yaml"  # a sweep file's comments are read, its YAML is not
    sweep.write_text(
        "#   launch.py s.yaml --profile cpu # Table 1 scaled down, 3 seeds: 1-3 h on 2 cores\n"
        "  # Table 1 scaled down to fit an hour on a 2-core CPU\n"
        "name: q   # the quickstart in 20 min\n"
        "description: the quickstart in 3 min\n"
    )
    assert [line.split(":")[1] for line in duration_claims([sweep])] == ["1", "2", "3"]


def test_sweep_file_comments_name_only_what_exists():
    """A sweep file's comments point to files, modules and README sections that exist (its
    quickstart once pointed to a README section that did not)."""
    found = [p for f in SWEEP_FILES for p in references.text_problems(comments(f), f)]
    assert not found, "dead references in the sweep files' comments:\n" + "\n".join(found)
    dead = references.text_problems('# see README, "How to read them"\n', SWEEP_FILES[0])
    assert dead and "has no section" in dead[0]


#: what a lab notebook leaves: commit hashes, "session", loans of machines and the calls that
#: lent them, load averages, notes to maintainers, internal issue numbers
NOTEBOOK = re.compile(
    r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b"
    r"|\bsessions?\b|\bload average|\bload (?:of |about |at )?\d"
    r"|\bloans?\b|\blent\b|\bthe issue's\b|\brun\(carry="
    r"|for whoever maintains|\bissues? #?\d+",
    re.IGNORECASE,
)


def notebook_pages() -> list[Path]:
    """README, CONTRIBUTING, CHANGELOG, the cluster and benchmark guides, docs/ and the sweep
    files, but the committed runs' own records (docs/results/<sweep>/)."""
    pages = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "CHANGELOG.md"]
    pages += [ROOT / "cluster" / "README.md", ROOT / "benchmarks" / "README.md", *SWEEP_FILES]
    for page in sorted((ROOT / "docs").rglob("*.md")):
        rel = page.relative_to(ROOT / "docs").parts
        if rel[0] == "results" and len(rel) > 2:
            continue
        pages.append(page)
    return pages


def in_code(line: str, at: int) -> bool:
    """Whether position ``at`` of a Markdown line lies inside an inline code span."""
    return line[:at].count("`") % 2 == 1


def test_user_pages_keep_no_lab_notebook():
    """Histories, hashes and load averages go to CHANGELOG.md or benchmarks/README.md."""
    found = [
        f"{page.relative_to(ROOT)}:{n}: {m.group(0)!r} in {line.strip()[:100]}"
        for page in notebook_pages()
        for n, line in page_lines(page)
        for m in NOTEBOOK.finditer(line)
        # a library's own `session` (Ray Train's) in code is not the notebook's word
        if not (m.group(0).lower().startswith("session") and in_code(line, m.start()))
    ]
    assert not found, "lab notebook in the user pages:\n" + "\n".join(found)


def test_the_notebook_pattern_catches_what_the_pages_used_to_hold():
    for text in (
        "From a fresh clone of this repository (commit `b4a651f`)",
        "beside another session's test runs",
        "on the AMD EPYC VM at load average 2.4-4.6",
        "Ray's parts, for whoever maintains this:",
        "Issue 22 asked for 3 seeds in under an hour",
        "(K 2..256, commit 92d7966, idle)",
        "### Fourth loan: the fused tests (H200)",
        "lent twice, 15 minutes of GPU time each",
        "the issue's aim, member-steps per GPU-second",
        "run(carry=[\".whl\"], timeout_s=500, command='...')",
    ):
        assert NOTEBOOK.search(text), text
    for text in (
        "`decode_seconds` 0.0246 s",
        "sweeps/report/results.py",
        "seed 1234567",
        "a talented, loaned, sessionless run (carry on)",
    ):
        assert not NOTEBOOK.search(text), text


# ----------------------------------------------------------------------------------------------
# The README's reuse snippet and column table


def readme_section(title: str) -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


@pytest.mark.train
def test_readme_reuse_snippet_trains_decodes_and_loads_as_written(tmp_path, monkeypatch):
    """The snippet under "Reusing the models", run as it is (a few training steps), in an
    empty folder: it writes its checkpoint there and loads it back."""
    (code,) = re.findall(r"```python\n(.*?)```", readme_section("Reusing the models"), re.S)
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(code, "README.md (Reusing the models)", "exec"), namespace)  # noqa: S102
    model, trained, tokens = namespace["model"], namespace["trained"], namespace["tokens"]
    assert (tmp_path / "copy.ckpt").exists()
    assert type(trained) is type(model) and trained.hparams == model.hparams
    assert tokens.shape[0] == namespace["batch"]["src"].shape[0]
    assert namespace["trainer"].global_step == namespace["trainer"].max_steps


def documented_columns() -> set[str]:
    """The column names the README's results.csv table lists (its first column's code spans)."""
    section = readme_section("Reading the results")
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`([^`]+)`", row.split(" | ")[0])}


def test_readme_column_table_lists_every_results_column():
    """Every column results.csv can have, read from the code that writes it
    (``sweeps/report/results.py``'s column lists), is in the README's table; a new column fails
    this until the README says what it is."""
    from sweeps.report import results

    lists = [n for n in vars(results) if n.endswith("_COLUMNS") and n.isupper()]
    assert {"FIRST_COLUMNS", "METRIC_COLUMNS", "HELDOUT_COLUMNS", "TAIL_COLUMNS"} <= set(lists)
    columns = {c for n in lists for c in getattr(results, n)} | {"configuration", "param:<key>"}
    columns |= set(results.headline_columns()) - {"window"}  # the README shows memory's K
    missing = sorted(columns - documented_columns())
    assert not missing, f"results.csv columns missing from the README's table: {missing}"
