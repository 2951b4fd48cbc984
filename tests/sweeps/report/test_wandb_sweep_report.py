"""The W&B Report of a sweep folder, as `python -m sweeps.report DIR --wandb` and
`python -m sweeps.report.moo DIR --wandb` build it: built here and caught before it is saved (no W&B
server), its runsets, filters and blocks checked. The sweeps' runs are offline run logs written
here, with the records W&B reads (project, group, config)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from sweep_helpers import done_row

from sweeps.integrations.wandb_runs import HEADER, IDENT, MAGIC, write_chunks
from sweeps.report import local, moo
from sweeps.report.results import write_results_csv
from sweeps.report.wandb_report import report_problem

# the tests here build W&B Reports from offline runs and the local page: seconds each
pytestmark = pytest.mark.report

wr = pytest.importorskip("wandb_workspaces.reports.v2")
ROOT = Path(__file__).resolve().parents[3]
MOO_RESULTS = ROOT / "docs" / "results" / "minimal_k"


def offline_run(sweep: Path, run_id: str, synced: bool = True, **record: str) -> Path:
    """An offline run folder as a trial leaves it: its log's run record (``project``, ``group``,
    ``sweep_id`` in its config) and exit record; ``synced``: with wandb sync's mark beside it."""
    from wandb.proto import wandb_internal_pb2 as pb

    config = pb.ConfigRecord(
        update=[pb.ConfigItem(key="sweep_id", value_json=json.dumps(record.get("sweep_id", "")))]
    )
    run = pb.RunRecord(
        run_id=run_id,
        project=record.get("project", "memory-attention"),
        run_group=record.get("group", sweep.name),
        config=config,
    )
    records = [pb.Record(num=1, run=run), pb.Record(num=2, exit=pb.RunExitRecord(exit_code=0))]
    folder = sweep / "wandb" / f"offline-run-20260101_000000-{run_id}"
    folder.mkdir(parents=True)
    log = folder / f"run-{run_id}.wandb"
    log.write_bytes(
        write_chunks(HEADER.pack(IDENT, MAGIC, 0), (r.SerializeToString() for r in records))
    )
    if synced:
        log.with_suffix(".wandb.synced").touch()
    return folder


def sweep(folder: Path, sweep_id: str, rows: list[dict], **launch) -> Path:
    """A sweep folder: its results.csv and launch.json (``sweep_id``, and ``launch``'s keys)."""
    write_results_csv(rows, folder)
    record = {"overrides": [], "profile": None, "sweep_id": sweep_id, **launch}
    (folder / "launch.json").write_text(json.dumps(record))
    return folder


def rows(ids: list[str], reused: str = "", **figures) -> list[dict]:
    return [
        {
            "trial_id": trial_id,
            **done_row(f"memory K={k}", "memory", k, 10, 0, **figures),
            "val/bleu": 50.0 + k,
            "decode_seconds": 0.01 * k,
            "reused": reused if n else "",
        }
        for n, (trial_id, k) in enumerate(zip(ids, (4, 8, 16)))
    ]


@pytest.fixture
def saved(monkeypatch) -> list:
    """The Reports the commands save, caught before W&B: a key, W&B's default entity for it."""

    class Api:
        default_entity = "keys-entity"

    import wandb

    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.setattr(wandb, "Api", Api)
    caught: list = []
    monkeypatch.setattr(wr.Report, "save", lambda self, *a, **k: caught.append(self) or self)
    monkeypatch.setattr(wr.Report, "url", property(lambda self: "https://wandb.test/report"))
    return caught


def runsets(report) -> list:
    return [rs for b in report.blocks if isinstance(b, wr.PanelGrid) for rs in b.runsets]


def texts(report) -> list[tuple[str, str]]:
    return [(type(b).__name__, getattr(b, "text", "")) for b in report.blocks]


def test_the_multi_objective_command_takes_the_keys_entity_and_says_wandb_errors(
    tmp_path, saved, monkeypatch, capsys
):
    """`python -m sweeps.report.moo DIR --wandb`, the command docs/wandb.md gives, ended in a
    pydantic traceback without --entity; a W&B error ended in a traceback too."""
    out = shutil.copytree(MOO_RESULTS, tmp_path / "minimal_k")
    assert moo.main([str(out), "--wandb"]) == 0
    (report,) = saved
    assert report.entity == "keys-entity" and "W&B report: https://wandb.test/report" in (
        capsys.readouterr().out
    )

    class Refused:
        def __init__(self):
            raise RuntimeError("API key refused\nmore lines")

    import wandb

    monkeypatch.setattr(wandb, "Api", Refused)
    assert moo.main([str(out), "--wandb"]) == 2
    err = capsys.readouterr().err
    assert "--wandb: W&B did not take the report (RuntimeError: API key refused)" in err
    assert "the section above is written" in err and "Traceback" not in err


def test_a_warm_started_sweeps_panels_are_its_runs_and_the_reused_ones(tmp_path, saved):
    """After a warm start the Report dropped its sweep_id filter, and its panels averaged in every
    run of the group (smoke runs, earlier sweeps, trials this sweep never had): it keeps this
    sweep's runs and those of the sweep its reused rows came from, by their sweep ids."""
    earlier = sweep(tmp_path / "earlier" / "quickstart", "aaaa1111", rows(["t1", "t2", "t3"]))
    later = sweep(
        tmp_path / "later" / "quickstart", "bbbb2222", rows(["n1", "t2", "t3"], str(earlier))
    )
    local.main([str(later), "--wandb"])
    (report,) = saved
    (runs,) = runsets(report)
    assert runs.filters == (
        "Group == 'quickstart' and Config('sweep_id') in ['bbbb2222', 'aaaa1111']"
    )
    # as the Report saves it: the expression parses into W&B's filter of either id
    from wandb_workspaces import expr

    saved_filters = expr.filters_tree_to_v2(expr.expr_to_filters(runs.filters))["filters"]
    assert {"op": "IN", "value": ["bbbb2222", "aaaa1111"]}.items() <= saved_filters[1].items()
    assert saved_filters[1]["key"] == {"section": "config", "name": "sweep_id"}
    # a reused row's earlier sweep that reused it in turn: the sweep that trained it
    (earlier / "results.csv").unlink()
    first = sweep(tmp_path / "first" / "quickstart", "cccc3333", rows(["t0", "t2", "t3"]))
    write_results_csv(rows(["t1", "t2", "t3"], str(first)), earlier)
    local.main([str(later), "--wandb"])
    assert runsets(saved[-1])[0].filters.endswith("in ['bbbb2222', 'cccc3333']")
    # an earlier sweep whose id cannot be read: the whole group, and the Report says why
    shutil.rmtree(first)
    local.main([str(later), "--wandb"])
    assert runsets(saved[-1])[0].filters == "Group == 'quickstart'"
    assert any("The panels cover the whole group" in t for _, t in texts(saved[-1]))


def test_the_multi_objective_report_is_of_this_sweep_and_says_what_results_md_says(tmp_path, saved):
    """The multi-objective command's Report never filtered by sweep_id and had none of the
    launch's metric, confirm section or smoke caveats of the other command's: the two commands
    build one Report, the multi-objective section in it."""
    out = shutil.copytree(MOO_RESULTS, tmp_path / "minimal_k")
    (out / "launch.json").write_text(
        json.dumps(
            {
                "sweep_id": "dddd4444",
                "profile": "smoke",
                "profile_sets": "profile smoke sets: trainer.max_steps=60",
                "planned": {"metric": {"name": "val/loss", "goal": "minimize"}},
            }
        )
    )
    built = moo.wandb_report(out, "an-entity", "memory-attention", "minimal_k")
    assert runsets(built)[0].filters.endswith(" and Config('sweep_id') == 'dddd4444'")
    assert moo.main([str(out), "--wandb"]) == 0
    local.main([str(out), "--wandb"])
    by_moo, by_report = saved
    assert texts(by_moo) == texts(by_report)
    (runs,) = runsets(by_moo)
    assert runs.filters == "Group == 'minimal_k' and Config('sweep_id') == 'dddd4444'"
    said = "\n".join(t for _, t in texts(by_moo))
    assert "This run's profile smoke sets: trainer.max_steps=60" in said
    assert "the best trial by the sweep's metric (val/loss, min)" in said  # the launch's


def test_the_report_carries_the_multi_objective_section(tmp_path, saved):
    """`python -m sweeps.report DIR --wandb` left out results.md's "Multi-objective search"
    section (its fronts, the constrained-out trials, the answers), which docs/wandb.md says it
    carries: it is there, as results.md has it, less the figures' links (the panels)."""
    out = shutil.copytree(MOO_RESULTS, tmp_path / "minimal_k")
    local.main([str(out), "--wandb"])
    (report,) = saved
    blocks = texts(report)
    at = blocks.index(("H2", "Multi-objective search"))
    page = (out / "results.md").read_text().split("## Multi-objective search\n\n", 1)[1]
    assert blocks[at + 1][0] == "MarkdownBlock"
    assert page.startswith(blocks[at + 1][1]) and "### Answers" in blocks[at + 1][1]
    assert "![" not in blocks[at + 1][1]
    assert blocks[at + 2] == ("H2", "Panels over the group's runs")


def test_the_report_opens_as_results_md_does(tmp_path, saved):
    """The Report left out results.md's notes on the run (the profile's settings, the budget): a
    smoke run's Report said nowhere at its top that it was one. Its text is results.md's, up to
    the figures."""
    out = sweep(
        tmp_path / "quickstart",
        "eeee5555",
        rows(["a1", "a2", "a3"]),
        profile="smoke",
        profile_sets="profile smoke sets: model.preset=tiny, trainer.max_steps=60",
    )
    (out / "budget.json").write_text(
        json.dumps({"limits": {"hours": 1.0}, "charged": {"hours": 0.5, "cpu_hours": 0.5}})
    )
    local.main([str(out), "--wandb"])
    (report,) = saved
    lines = []
    for kind, text in texts(report):
        if kind == "H2" and text.startswith("Panels over"):
            break
        lines += [f"# {text}"] if kind == "H1" else [f"## {text}"] if kind == "H2" else []
        lines += [text] if kind == "MarkdownBlock" else []
    page = (out / "results.md").read_text().split("\n\n## Figures")[0]
    assert "\n\n".join(lines) == page
    assert "This run's profile smoke sets: model.preset=tiny" in page and "\n## Budget\n" in page


def test_the_report_is_of_the_group_and_project_the_runs_logged_to(tmp_path, saved, capsys):
    """The Report took the folder's name as group and memory-attention as project: a sweep run with
    another group or project, or a renamed folder, got panels that select nothing. It takes them
    from the runs' own records, --group and --project overriding, and says which it took."""
    out = sweep(tmp_path / "renamed", "ffff6666", rows(["r1", "r2"]))
    for run_id in ("r1", "r2"):
        offline_run(out, run_id, project="attention-study", group="quickstart-big")
    local.main([str(out), "--wandb"])
    (report,) = saved
    assert report.project == "attention-study"
    assert runsets(report)[0].filters.startswith("Group == 'quickstart-big' and")
    said = capsys.readouterr().out
    assert (
        "W&B group 'quickstart-big' and project 'attention-study': as the sweep's 2 W&B run(s) "
        "logged to" in said
    )
    local.main([str(out), "--wandb", "--group", "other", "--project", "p2"])
    assert saved[-1].project == "p2" and runsets(saved[-1])[0].filters.startswith(
        "Group == 'other' and"
    )
    assert "W&B group 'other' and project 'p2': as given" in capsys.readouterr().out
    shutil.rmtree(out / "wandb")  # no run record to read: the folder's name, the default project
    local.main([str(out), "--wandb"])
    assert saved[-1].project == "memory-attention"
    assert runsets(saved[-1])[0].filters.startswith("Group == 'renamed' and")
    assert "the folder's name: no record of the sweep's W&B runs here" in capsys.readouterr().out


def test_the_upload_check_counts_the_reused_rows_runs(tmp_path, monkeypatch):
    """After a warm start, `--wandb` counted only the sweep's own runs not uploaded: the reused
    rows' runs are the earlier sweep's, in its folder, and the Report lacked them with no word.
    They are counted and named, with the launch's `wandb sync` line for them."""
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    earlier = sweep(tmp_path / "earlier" / "quickstart", "aaaa1111", rows(["t1", "t2", "t3"]))
    runs = {run_id: offline_run(earlier, run_id, synced=False) for run_id in ("t1", "t2", "t3")}
    later = sweep(
        tmp_path / "later" / "quickstart", "bbbb2222", rows(["n1", "t2", "t3"], str(earlier))
    )
    offline_run(later, "n1", synced=False)
    problem = report_problem(later)
    assert problem.startswith("3 of the sweep's W&B runs ran offline and are not uploaded (2 of")
    assert f"wandb sync {later / 'wandb'}/offline-run-*" in problem
    assert f"wandb sync {runs['t2']} {runs['t3']})" in problem
    assert str(runs["t1"]) not in problem  # the earlier sweep's run of a row not reused
    for run_id in ("t2", "t3"):
        (runs[run_id] / f"run-{run_id}.wandb.synced").touch()
    assert report_problem(later).startswith("1 of the sweep's W&B runs")
    (later / "wandb" / "offline-run-20260101_000000-n1" / "run-n1.wandb.synced").touch()
    assert report_problem(later) is None
