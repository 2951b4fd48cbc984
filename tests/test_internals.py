"""The list of library internals the project relies on (docs/internals.md): every check has its
entry there and every entry its check, the versions agree, and every private name or module of
a library the code touches (read from the source) is named there. And W&B's internals, checked
against the installed wandb: a failure names wandb, its version and the version the code was
written against. Ray's checks are in tests/test_internals_ray.py, the other libraries' in
tests/test_internals_libs.py. Seconds, no Ray."""

from __future__ import annotations

import ast
import functools
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from internals_check import WRITTEN_AGAINST, internal, source

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "internals.md"
CHECK_FILES = tuple(ROOT / "tests" / f"test_internals{part}.py" for part in ("", "_ray", "_libs"))
PACKAGES = ("sweeps", "lightning_modules", "datamodules", "benchmarks")
#: names with a leading underscore that are public API
PUBLIC = {"os._exit"}


# ---- the list ---------------------------------------------------------------------------------


def checked_ids() -> list[str]:
    return [
        m.group(1)
        for path in CHECK_FILES
        for m in re.finditer(r'@internal\(\s*"([a-z0-9-]+)"', path.read_text())
    ]


def test_every_check_has_its_entry_in_the_docs_and_every_entry_its_check():
    ids = checked_ids()
    assert len(ids) == len(set(ids)), "two checks share an id"
    documented = re.findall(r"^#### .*\{#([a-z0-9-]+)\}\s*$", DOC.read_text(), re.M)
    assert sorted(documented) == sorted(set(documented)), "two entries share an anchor"
    assert not set(ids) - set(documented), f"checks without an entry: {set(ids) - set(documented)}"
    assert not set(documented) - set(ids), f"entries without a check: {set(documented) - set(ids)}"


def test_the_docs_name_the_versions_the_checks_were_written_against():
    headings = dict(
        re.findall(r"^### .*\(written against (\S+) ([0-9.]+)\)\s*$", DOC.read_text(), re.M)
    )
    assert headings == WRITTEN_AGAINST


@functools.cache  # two tests read it; parsing every file of the packages twice costs a second
def private_uses() -> dict[str, set[str]]:
    """What the project's code touches that a library keeps private: ``obj._name`` on an object
    that is not the project's own (no project code defines ``_name``; ``super()._name`` always
    counts), ``getattr(obj, "_name")`` likewise, and imports of private modules or names."""
    files = [p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))]
    trees = {p: ast.parse(p.read_text()) for p in files}
    siblings = {p.stem for p in (ROOT / "benchmarks").glob("*.py")}

    def private(name: str) -> bool:
        return name.startswith("_") and not name.startswith("__")

    def on_self(node: ast.AST) -> bool:
        return isinstance(node, ast.Name) and node.id in ("self", "cls")

    own: set[str] = set()
    for tree in trees.values():
        for n in ast.walk(tree):
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                own.add(n.name)
            targets = n.targets if isinstance(n, ast.Assign) else []
            targets += [n.target] if isinstance(n, ast.AnnAssign | ast.AugAssign) else []
            for t in (x for target in targets for x in ast.walk(target)):
                if isinstance(t, ast.Name):
                    own.add(t.id)
                elif isinstance(t, ast.Attribute) and on_self(t.value):
                    own.add(t.attr)
    found: dict[str, set[str]] = {}
    for path, tree in trees.items():
        rel = str(path.relative_to(ROOT))
        for n in ast.walk(tree):
            names: list[str] = []
            if isinstance(n, ast.Attribute) and private(n.attr) and not on_self(n.value):
                through_super = (
                    isinstance(n.value, ast.Call) and ast.unparse(n.value.func) == "super"
                )
                if ast.unparse(n) not in PUBLIC and (through_super or n.attr not in own):
                    names.append(n.attr)
            elif (
                isinstance(n, ast.Call)
                and ast.unparse(n.func) in ("getattr", "hasattr", "setattr")
                and len(n.args) >= 2
                and isinstance(n.args[1], ast.Constant)
                and isinstance(n.args[1].value, str)
                and private(n.args[1].value)
                and not on_self(n.args[0])
                and n.args[1].value not in own
            ):
                names.append(n.args[1].value)
            elif isinstance(n, ast.ImportFrom) and n.level == 0 and n.module:
                parts = n.module.split(".")
                if parts[0] in PACKAGES or parts[0] in siblings:
                    continue
                if any(private(p) for p in parts):
                    names.append(n.module)
                names += [f"{n.module}.{a.name}" for a in n.names if private(a.name)]
            elif isinstance(n, ast.Import):
                names += [
                    a.name
                    for a in n.names
                    if a.name.split(".")[0] not in PACKAGES
                    and any(private(p) for p in a.name.split("."))
                ]
            for name in names:
                found.setdefault(name, set()).add(rel)
    return found


def test_the_private_name_reader_finds_a_library_internal():
    """The reader itself can fail: it finds what lost_nodes-like code would touch."""
    uses = private_uses()
    assert {"_trial_id", "ray._private.services", "_wandb_init"} <= uses.keys(), sorted(uses)
    assert "_study" not in uses, "the project's own private method counted as a library's"


def test_every_private_name_the_code_touches_is_listed_in_the_docs():
    text = DOC.read_text()

    def named(name: str) -> bool:  # a module by its dotted path, an attribute by its name
        return re.search(
            rf"(?<![\w.]){re.escape(name)}(?!\w)", text.replace("`", " ")
        ) is not None or (
            name.startswith("_") and re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text) is not None
        )

    unlisted = {name: sorted(files) for name, files in private_uses().items() if not named(name)}
    assert not unlisted, (
        f"library internals used but not listed in docs/internals.md: {unlisted}. Add an entry "
        "(file, symbol, version written against, what breaks first) and a check in "
        "tests/test_internals*.py"
    )


# ---- W&B ----------------------------------------------------------------------------------------


@internal("wandb-transaction-log", "wandb", "sweeps/integrations/wandb_runs.py")
def test_a_run_log_written_by_hand_reads_back_with_wandbs_own_reader(tmp_path):
    pytest.importorskip("wandb")
    from wandb.proto import wandb_internal_pb2 as pb

    from sweeps.integrations.wandb_runs import (
        BLOCK,
        HEADER,
        IDENT,
        MAGIC,
        read_chunks,
        write_chunks,
    )

    run = tmp_path / "offline-run-20260101_000000-abc12345"
    run.mkdir()
    records = [
        pb.Record(num=1, run=pb.RunRecord(run_id="abc12345", project="p")),
        # one record longer than a block: written as first, middle and last chunks
        pb.Record(
            num=2,
            history=pb.HistoryRecord(
                item=[pb.HistoryItem(key="pad", value_json=json.dumps("x" * 2 * BLOCK))]
            ),
        ),
        pb.Record(
            num=3,
            summary=pb.SummaryRecord(
                update=[pb.SummaryItem(key="decode_seconds", value_json="0.25")]
            ),
        ),
        pb.Record(num=4, exit=pb.RunExitRecord(exit_code=0)),
    ]
    data = write_chunks(HEADER.pack(IDENT, MAGIC, 0), (r.SerializeToString() for r in records))
    (run / "run-abc12345.wandb").write_bytes(data)
    assert len(read_chunks(data)[1]) == len(records)
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "wandb"),
            "leet",
            "inspect",
            "--summary",
            "--json",
            str(run),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"wandb leet inspect refused the log: {done.stderr.strip()}"
    seen = json.loads(done.stdout)
    assert seen["state"] == "finished" and seen["summary"]["decode_seconds"] == 0.25, seen


@internal("wandb-synced-mark", "wandb", "sweeps/integrations/wandb_env.py (unsynced_runs)")
def test_wandb_sync_marks_an_uploaded_run_beside_its_log():
    pytest.importorskip("wandb")
    from pathlib import Path

    from wandb.cli import beta_sync

    assert '".wandb.synced"' in source(beta_sync._is_synced)
    assert not beta_sync._is_synced(Path("/nonexistent/run-x.wandb"))


@internal(
    "wandb-record-proto", "wandb", "sweeps/integrations/wandb_runs.py, sweeps/report/sweep_runs.py"
)
def test_the_record_messages_have_the_fields_the_code_writes():
    pytest.importorskip("wandb")
    from wandb.proto import wandb_internal_pb2 as pb

    record = pb.Record(
        num=7, summary=pb.SummaryRecord(update=[pb.SummaryItem(key="k", value_json="1")])
    )
    assert record.WhichOneof("record_type") == "summary"
    assert pb.Record(exit=pb.RunExitRecord(exit_code=0)).WhichOneof("record_type") == "exit"
    # where a run logged to, as the W&B Report reads it (sweeps.report.sweep_runs.run_target)
    run = pb.Record(run=pb.RunRecord(project="p", run_group="g", entity="e")).run
    assert (run.project, run.run_group, run.entity) == ("p", "g", "e")
    # what a summary already holds is read back (summary_values): removals and nested keys too
    gone = pb.SummaryRecord(remove=[pb.SummaryItem(nested_key=["a", "b"])])
    assert [list(item.nested_key) for item in gone.remove] == [["a", "b"]]
