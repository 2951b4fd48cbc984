"""A fused member's W&B run (``MemberRun``, no torch) against an unfused trial's (Lightning's
``WandbLogger``): the same arguments, rows and image logged by each in its own process, then both
offline runs read back record by record with wandb's protobufs and ``wandb leet inspect``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("wandb")

from sweep_helpers import wandb_read  # noqa: E402

from sweeps.integrations.wandb_runs import read_records, run_log  # noqa: E402

LOG = """
import json, sys
from PIL import Image
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from sweeps.trial.wandb_run import close_wandb

arguments, kind, png = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
if kind == "member":
    from sweeps.trial.wandb_run import MemberRun
    run = MemberRun(arguments)
else:
    from sweeps.trial.wandb_logger import lightning_logger
    run = lightning_logger(arguments)
_ = run.experiment
run.log_metrics({"train/loss_step": 1.5, "epoch": 0}, step=4)
run.log_metrics({"val/bleu": 12.25, "val/loss": 0.75, "step": 10}, step=9)
run.log_metrics({"train/loss_epoch": 1.25, "epoch": 0}, step=9)
if kind == "member":  # the group's PNG file of the figure
    run.log_image("val/attention", [Image.open(png)])
else:  # the figure itself, as an unfused trial logs it
    fig, ax = plt.subplots(figsize=(2, 2))
    ax.imshow([[0.0, 1.0], [1.0, 0.0]])
    run.log_image(key="val/attention", images=[fig])
close_wandb(run)
print(json.dumps(sorted(m for m in ("torch", "lightning") if m in sys.modules)))
"""

FIGURE = """
import sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(2, 2))
ax.imshow([[0.0, 1.0], [1.0, 0.0]])
fig.savefig(sys.argv[1], format="png")
"""


def log_run(tmp_path: Path, kind: str, png: Path) -> tuple[Path, list[str]]:
    run_id = f"{kind}0001"
    arguments = {
        "name": "memory K=4 seed=0",
        "project": "p",
        "dir": str(tmp_path / kind),
        "id": run_id,
        "resume": "allow",
        "entity": None,
        "group": "g",
        "tags": ["teacher:abc"],
        "notes": "a note",
        "job_type": "train",
        "config": {"cell": "memory K=4", "seed": 0, "model.hidden_size": 64, "trial_id": run_id},
        "mode": "offline",
    }
    Path(arguments["dir"]).mkdir()
    env = {**os.environ, "WANDB_SILENT": "true", "PYTHONPATH": os.getcwd()}
    done = subprocess.run(
        [sys.executable, "-c", LOG, json.dumps(arguments), kind, str(png)],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (folder,) = sorted((Path(arguments["dir"]) / "wandb").glob(f"offline-run-*-{run_id}"))
    return folder, json.loads(done.stdout.strip().splitlines()[-1])


def what_was_logged(folder: Path) -> dict:
    """The run's rows (without wandb's own clock keys), its metric definitions, config and run
    fields, from its transaction log."""
    rows, metrics, config, run = [], [], {}, {}
    for record in read_records(run_log(folder)):
        kind = record.WhichOneof("record_type")
        if kind == "history":
            row = {
                (item.key or "/".join(item.nested_key)): json.loads(item.value_json)
                for item in record.history.item
            }
            rows.append({k: v for k, v in row.items() if k not in ("_timestamp", "_runtime")})
        elif kind == "metric":
            m = record.metric
            metrics.append((m.name, m.glob_name, m.step_metric, m.options.step_sync))
        elif kind == "config":
            config.update({i.key: json.loads(i.value_json) for i in record.config.update})
        elif kind == "run":
            r = record.run
            run = {
                "name": r.display_name,
                "project": r.project,
                "group": r.run_group,
                "job_type": r.job_type,
                "tags": list(r.tags),
                "notes": r.notes,
            }
    for row in rows:  # the image's file name is random; what it points to is compared below
        if "val/attention" in row:
            row["val/attention"] = {
                k: v for k, v in row["val/attention"].items() if k != "filenames"
            }
    return {"rows": rows, "metrics": metrics, "config": config, "run": run}


@pytest.mark.train
def test_a_member_s_run_records_what_lightning_s_logger_records_without_torch(tmp_path):
    png = tmp_path / "figure.png"
    subprocess.run([sys.executable, "-c", FIGURE, str(png)], check=True, timeout=60)
    member, member_modules = log_run(tmp_path, "member", png)
    unfused, unfused_modules = log_run(tmp_path, "unfused", png)
    assert member_modules == [], f"the member's run imported {member_modules}"
    assert unfused_modules == ["lightning", "torch"]  # the comparison is with Lightning's logger

    ours, theirs = what_was_logged(member), what_was_logged(unfused)
    assert ours["rows"] and ours["metrics"], "nothing was read back from the member's run"
    assert ours["run"] == theirs["run"]
    assert {k: v for k, v in ours["config"].items() if k != "trial_id"} == {
        k: v for k, v in theirs["config"].items() if k != "trial_id"
    }
    assert ours["metrics"] == theirs["metrics"]
    assert ours["rows"] == theirs["rows"]
    # the logged rows at their steps; the image's row takes the last step (step_sync)
    steps = [r["trainer/global_step"] for r in ours["rows"] if "trainer/global_step" in r]
    assert steps == [4, 9, 9, 9], ours["rows"]

    images = [sorted(f.glob("files/media/images/val/attention_*.png")) for f in (member, unfused)]
    assert all(len(i) == 1 for i in images), images
    assert images[0][0].read_bytes() == images[1][0].read_bytes(), "the two runs' images differ"

    for folder in (member, unfused):
        info = wandb_read(folder)
        assert info["state"] == "finished"
        assert info["summary"]["val/bleu"] == 12.25 and info["summary"]["trainer/global_step"] == 9
        assert "val/attention" in info["summary"]


@pytest.mark.parametrize(
    ("error", "said"),
    [("ActorDiedError", False), ("ValueError", True)],
)
def test_a_member_asks_no_heatmaps_of_a_group_that_is_gone(error, said, capsys):
    """The group's process dies when a second Ctrl-C stops the sweep: its members printed "could
    not draw attention heatmaps: ActorDiedError()" after the launch's last line. A drawing that
    fails for another reason is still said."""
    pytest.importorskip("ray")
    import ray.exceptions

    from sweeps.trial.fused.member import heatmaps_of

    exc = ray.exceptions.ActorDiedError() if error == "ActorDiedError" else ValueError("no axes")

    class Group:
        class heatmaps:  # noqa: N801 -- as a Ray actor handle's method is called
            @staticmethod
            def remote(*_args):
                raise exc

    assert heatmaps_of(Group(), 0, b"", "t1") == []
    assert ("could not draw attention heatmaps" in capsys.readouterr().out) is said
