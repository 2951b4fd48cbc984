"""The decode-timing stage (sweeps/timing/) on real checkpoints: tiny copy-task and WMT models
trained for a few steps with Lightning, the command run as a subprocess, the stage on a real local Ray."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch

from datamodules import CopyTaskDataModule, WMT17DataModule
from sweeps.build import build_module
from sweeps.report.heatmaps import main as heatmaps_main
from sweeps.timing import measure
from sweeps.timing import pinned as pinned_module
from sweeps.timing.checkpoint import (
    data_task,
    infer_task,
    load_module,
    saved_data_settings,
    time_checkpoint,
)
from sweeps.timing.cli import main, report_lines
from sweeps.timing.devices import cpu_model, pinned
from sweeps.timing.jobs import TimingJob, already_timed, pick_cpus, plan_lanes, timing_settings
from sweeps.timing.measure import (
    TimingError,
    clean_passes,
    measure_decode_time,
    median_precision,
)
from sweeps.timing.pinned import side_by_side, time_checkpoint_pinned, time_checkpoints_pinned
from sweeps.timing.record import TIMING_FILE, DecodeTiming, read_record, repeats_note, train_note
from sweeps.timing.stage import measure_options, run_timing_stage

ROOT = Path(__file__).resolve().parents[3]
TINY_WMT = ROOT / "tests" / "data" / "wmt-ende-tiny"
COPY = dict(vocab_size=8, max_length=6, train_size=128, val_size=24, test_size=8, batch_size=8)


def train_briefly(dm: pl.LightningDataModule, model: dict, path: Path, steps: int = 4) -> Path:
    """Fit a tiny model for a few steps with ``trainer.fit(model, datamodule=dm)`` and save it."""
    dm.setup("fit")
    module = build_module({"preset": "tiny", "val_decode": False, **model}, dm)
    trainer = pl.Trainer(
        max_steps=steps,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        use_distributed_sampler=False,
    )
    trainer.fit(module, datamodule=dm)
    trainer.save_checkpoint(path)
    return path


@pytest.fixture(scope="module")
def copy_ckpts(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("copy-ckpts")
    return {
        "bahdanau": train_briefly(
            CopyTaskDataModule(**COPY),
            {"attention": "bahdanau", "val_beam_size": 2},
            d / "bahdanau.ckpt",
        ),
        "memory": train_briefly(
            CopyTaskDataModule(**COPY),
            {"attention": "memory", "K": 4, "val_beam_size": 2},
            d / "memory.ckpt",
        ),
    }


@pytest.fixture(scope="module")
def wmt_ckpt(tmp_path_factory) -> tuple[Path, list[str]]:
    """A WMT checkpoint trained on the shipped slice, and the command-line options naming its data
    (WMT17DataModule does not save_hyperparameters(), so its checkpoints do not carry them)."""
    d = tmp_path_factory.mktemp("wmt-ckpt")
    settings = dict(
        pair="en-de",
        data_dir=str(TINY_WMT),
        vocab_size=800,
        max_length=100,
        batch_tokens=1200,
        valid_prefix="valid",
        test_prefix="",
        cache_dir=str(d / "cache"),
    )
    dm = WMT17DataModule(**settings)
    dm.prepare_data()
    ckpt = train_briefly(dm, {"attention": "bahdanau", "val_beam_size": 1}, d / "wmt.ckpt", steps=3)
    options = ["--task", "wmt17", "--data-dir", str(TINY_WMT), "--cache-dir", settings["cache_dir"]]
    for key in ("vocab_size", "max_length", "batch_tokens", "valid_prefix", "test_prefix"):
        options += ["--data", f"{key}={settings[key]}"]
    return ckpt, options


class CountingLoader:
    """A DataLoader wrapper that counts how often the split is read."""

    def __init__(self, loader) -> None:
        self.loader, self.passes = loader, 0

    def __iter__(self):
        self.passes += 1
        return iter(self.loader)


def test_checkpoints_carry_their_data_settings(copy_ckpts):
    copy = saved_data_settings(copy_ckpts["bahdanau"])
    assert copy["max_length"] == 6 and copy["val_size"] == 24
    assert infer_task(copy) == "copy"
    assert data_task(copy, overrides={"val_size": 10}) == {"name": "copy", **copy, "val_size": 10}
    wmt = data_task({}, "wmt17", {"data_dir": "d", "test_prefix": ""})
    assert wmt == {"name": "wmt17", "data_dir": "d", "test_prefix": ""}


@pytest.mark.train
def test_measure_decodes_the_whole_split_repeats_times_after_a_warmup(copy_ckpts):
    module = load_module(copy_ckpts["bahdanau"])
    dm = CopyTaskDataModule(**COPY)
    dm.setup("validate")
    loader = CountingLoader(dm.val_dataloader())
    calls = {"decode": 0, "beam": 0, "threads": set(), "tokens": [], "seconds": []}
    decode, beam_search = module.decode, module.model.beam_search

    def counting_decode(src, src_lengths):
        calls["decode"] += 1
        calls["threads"].add(torch.get_num_threads())
        start = time.perf_counter()
        calls["tokens"].append(decode(src, src_lengths))  # (B, T')
        calls["seconds"].append(time.perf_counter() - start)
        return calls["tokens"][-1]

    def counting_beam(*args, **kwargs):
        calls["beam"] += 1
        assert kwargs["beam_size"] == 3
        return beam_search(*args, **kwargs)

    module.decode, module.model.beam_search = counting_decode, counting_beam
    timing = measure_decode_time(module, loader, "cpu", beam_size=3, repeats=4, warmup=2, threads=2)

    batches = -(-COPY["val_size"] // COPY["batch_size"])
    assert loader.passes == 1, "batches are materialised once: data loading is not timed"
    assert calls["decode"] == calls["beam"] == batches * (2 + 4), (
        "2 warm-up + 4 timed passes over every batch"
    )
    assert calls["threads"] == {2} and torch.get_num_threads() == 1, (
        "fixed threads inside, restored after"
    )
    assert module.hparams.val_beam_size == 2, "the checkpoint's beam size is put back"
    assert timing.repeats == len(timing.seconds) == 4
    assert timing.decode_seconds == statistics.median(timing.seconds)
    assert (timing.min_seconds, timing.max_seconds) == (min(timing.seconds), max(timing.seconds))
    assert [timing.q1_seconds, timing.q3_seconds] == statistics.quantiles(
        timing.seconds, n=4, method="inclusive"
    )[::2]
    # each timed pass's seconds hold all of that pass's decodes (every batch of the split, warm-up passes left out)
    timed = calls["seconds"][2 * batches :]
    decoding = [sum(timed[i * batches : (i + 1) * batches]) for i in range(4)]
    assert all(inside <= wall for inside, wall in zip(decoding, timing.seconds)), (
        decoding,
        timing.seconds,
    )
    assert (timing.sentences, timing.batches, timing.beam_size, timing.warmup) == (
        24,
        batches,
        3,
        2,
    )
    assert (
        timing.output_tokens == sum(int((t != 0).sum()) for t in calls["tokens"][-batches:]) >= 24
    )
    assert timing.per_sentence_seconds == pytest.approx(timing.decode_seconds / 24)
    assert (timing.device, timing.threads, timing.torch_version) == ("cpu", 2, torch.__version__)
    assert DecodeTiming.from_dict(json.loads(json.dumps(timing.to_dict()))) == timing


@pytest.mark.train
def test_command_prints_split_and_sentence_seconds_with_the_beam(copy_ckpts, tmp_path, capsys):
    """In this process: ``python -m sweeps.timing`` itself runs in the peaks test below."""
    out = tmp_path / "timing.json"
    argv = [str(copy_ckpts["memory"]), "--split", "valid", "--repeats", "3", "--precision", "0"]
    assert main([*argv, "--calibration-seconds", "0.3", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["repeats"] == 3 and data["beam_size"] == 2  # the checkpoint's val_beam_size
    assert data["decode_seconds"] == statistics.median(data["seconds"])
    assert f"whole split  {data['decode_seconds']:.4f} s  (median of 3" in printed
    assert f"per sentence {1000 * data['per_sentence_seconds']:.3f} ms" in printed
    assert "valid: 24 sentences" in printed
    assert "beam 2," in printed and "1 warm-up + 3 timed runs" in printed
    model_name = next(  # what it ran on, by name (a GPU's name on CUDA)
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        None,
    )
    if model_name:  # with its family and model (tests/sweeps/timing/test_devices.py)
        named = data["device_name"]
        assert named == cpu_model() and named.startswith(f"{model_name} [")
        assert f"device cpu ({named})," in printed


@pytest.mark.train
def test_command_on_a_wmt_checkpoint_valid_split(wmt_ckpt, capsys):
    ckpt, options = wmt_ckpt
    # exactly 2 repeats (--precision 0): adaptive ones ran to the 30 s cap on a noisy host
    args = [str(ckpt), "--split", "valid", "--repeats", "2", "--precision", "0", "--beam", "2"]
    assert main([*args, *options]) == 0
    printed = capsys.readouterr().out
    assert "valid: 50 sentences" in printed and "beam 2," in printed and "wmt17 en-de" in printed
    assert "per sentence" in printed


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


@pytest.mark.train
def test_command_errors_are_one_line(wmt_ckpt, copy_ckpts, tmp_path, capsys):
    assert main([str(tmp_path / "nope.ckpt")]) == 2
    assert "not found" in one_line_error(capsys)
    assert main([str(tmp_path)]) == 2
    assert "holds no .ckpt file" in one_line_error(capsys)
    # a file that is no checkpoint (empty, a results.csv, a torch file of something else): named
    # as load_from_checkpoint names it (it was "not a checkpoint torch can read (EOFError: )")
    for name, content, what in [
        ("empty.ckpt", b"", "an empty file (cut short on disk, or never written)"),
        ("results.csv", b"trial_id,cell\n", "not a file torch.save wrote"),
    ]:
        (tmp_path / name).write_bytes(content)
        assert main([str(tmp_path / name)]) == 2
        said = one_line_error(capsys)
        assert f"{tmp_path / name}: {what}; pass a Lightning checkpoint" in said, said
        assert said.endswith("or train the trial again"), said
    torch.save({"weights": torch.zeros(2)}, tmp_path / "other.ckpt")
    assert main([str(tmp_path / "other.ckpt")]) == 2
    said = one_line_error(capsys)
    assert "a torch file, but not a Lightning checkpoint (it has no 'pytorch-lightning" in said
    torch.save([1, 2], tmp_path / "list.ckpt")  # a torch file of something other than a dict
    assert main([str(tmp_path / "list.ckpt")]) == 2
    assert "a torch file holding a list, not a Lightning checkpoint" in one_line_error(capsys)
    # a Lightning checkpoint without the module's settings, or of a mechanism this version lacks:
    # a TypeError of the constructor's, or the model's own error sent to "the data options"
    real = torch.load(copy_ckpts["memory"], map_location="cpu", weights_only=False)
    torch.save({**real, "hyper_parameters": {}}, tmp_path / "nohp.ckpt")
    torch.save(
        {**real, "hyper_parameters": {**real["hyper_parameters"], "attention": "nosuch"}},
        tmp_path / "badattn.ckpt",
    )
    for name, what in [
        ("nohp.ckpt", "a Lightning checkpoint without the module's settings (hyper_parameters"),
        ("badattn.ckpt", "its model's attention 'nosuch' is none this version knows"),
    ]:
        assert main([str(tmp_path / name)]) == 2
        said = one_line_error(capsys)
        assert f"{tmp_path / name}: {what}" in said and "data options" not in said, said
        with pytest.raises(SystemExit) as stop:
            heatmaps_main([str(tmp_path / name), "--output", str(tmp_path / "maps")])
        assert stop.value.code == 2 and f"{tmp_path / name}: {what}" in capsys.readouterr().err
    # a real checkpoint cut short on disk: named as such (it was a bare "[Errno 22] Invalid
    # argument", or a traceback), by the command and by the stages' loader alike
    cut = tmp_path / "cut.ckpt"
    cut.write_bytes(copy_ckpts["memory"].read_bytes()[:5000])
    assert main([str(cut)]) == 2
    said = one_line_error(capsys)
    assert f"{cut}: cut short or damaged on disk" in said and "train the trial again" in said
    with pytest.raises(TimingError, match="cut short or damaged on disk"):
        load_module(cut)
    # a precision below 0 ran to the time cap; a negative cap reported "median +-inf%"
    for option, said in [
        (["--precision", "-1"], "argument --precision: must be at least 0, got -1"),
        (["--max-seconds", "-5"], "argument --max-seconds: must be above 0, got -5"),
        # counts below their floor reached the measurement; --measure foo was named timing.measure
        (["--repeats", "0"], "argument --repeats: must be at least 1, got 0"),
        (["--beam", "0"], "argument --beam: must be at least 1, got 0"),
        (["--warmup", "-1"], "argument --warmup: must be at least 0, got -1"),
        (["--threads", "0"], "argument --threads: must be at least 1, got 0"),
        (["--train-steps", "0"], "argument --train-steps: must be at least 1, got 0"),
        (
            ["--calibration-seconds", "-1"],
            "argument --calibration-seconds: must be above 0, got -1",
        ),
        # 0 passed, then stopped the measurement as "calibration_seconds must be > 0"
        (
            ["--calibration-seconds", "0"],
            "argument --calibration-seconds: must be above 0, got 0",
        ),
        (
            ["--measure", "decode", "foo"],
            "argument --measure: invalid choice: 'foo' (choose from 'decode', 'train', 'memory')",
        ),
    ]:
        with pytest.raises(SystemExit):
            main([str(tmp_path / "other.ckpt"), *option])
        assert capsys.readouterr().err.strip().endswith(said)
    # a --json that could not be written is refused before the measurement, not after it
    with pytest.raises(SystemExit):
        main([str(tmp_path / "other.ckpt"), "--json", str(tmp_path)])
    assert "a folder; give a file name" in capsys.readouterr().err

    ckpt, options = wmt_ckpt
    assert main([str(ckpt), "--split", "test", *options]) == 2
    assert "split 'test' does not exist" in one_line_error(capsys)

    assert main([str(ckpt), "--split", "train", *options]) == 2
    assert "unknown split 'train'" in one_line_error(capsys)

    bare = tmp_path / "bare.ckpt"
    ckpt = torch.load(copy_ckpts["bahdanau"], map_location="cpu", weights_only=False)
    del ckpt["datamodule_hyper_parameters"]
    torch.save(ckpt, bare)
    assert main([str(bare)]) == 2
    assert "no datamodule settings" in one_line_error(capsys)
    assert main([str(bare), "--task", "copy", "--data", "max_lenght=6"]) == 2
    assert "unknown data option(s) max_lenght" in one_line_error(capsys)
    # a flag's setting is named by its flag; a seed that is no whole number says so, not int()'s words
    assert main([str(copy_ckpts["bahdanau"]), "--data-dir", str(tmp_path)]) == 2
    assert "unknown data option(s) data_dir (--data-dir) for task copy" in one_line_error(capsys)
    assert main([str(copy_ckpts["bahdanau"]), "--data", "seed=x"]) == 2
    assert "--data seed=x: the data's seed must be a whole number from 0" in one_line_error(capsys)
    # told the data, the same checkpoint times
    assert (
        main(
            [
                str(bare),
                "--task",
                "copy",
                "--data",
                "vocab_size=8",
                "--data",
                "max_length=6",
                "--data",
                "val_size=10",
                "--data",
                "batch_size=4",  # the example --help gives for the copy task
                "--repeats",
                "1",
                "--precision",
                "0",
            ]
        )
        == 0
    )
    assert "valid: 10 sentences" in capsys.readouterr().out


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"repeats": 0}, "repeats must be >= 1"),
        ({"warmup": -1}, "warmup must be >= 0"),
        ({"threads": 0}, "threads must be >= 1"),
        ({"device": "tpu"}, "device must be one of auto, cpu, cuda"),
        ({"measure": ["decode", "speed"]}, "measure must be one of decode, train, memory"),
        ({"measure": []}, "measure"),
        ({"train_steps": 0}, "train_steps must be >= 1"),
    ],
)
def test_stage_settings_are_checked_when_made(bad, message):
    with pytest.raises(TimingError, match=message):
        timing_settings(**bad)


def test_lanes_hold_a_whole_node_or_a_gpu_with_its_cpu_share():
    nodes = [
        {"NodeID": "head", "Alive": True, "Resources": {"CPU": 0.0}},
        {"NodeID": "cpu", "Alive": True, "Resources": {"CPU": 8.0}},
        {"NodeID": "gpu", "Alive": True, "Resources": {"CPU": 16.0, "GPU": 4.0}},
        {"NodeID": "dead", "Alive": False, "Resources": {"CPU": 8.0}},
    ]
    cpu_lanes = plan_lanes(nodes, use_gpu=False)
    assert [(lane.node_id, lane.cpus, lane.gpus, lane.device) for lane in cpu_lanes] == [
        ("cpu", 8.0, 0.0, "cpu"),
        ("gpu", 16.0, 0.0, "cpu"),
    ]
    gpu_lanes = plan_lanes(nodes, use_gpu=True)
    assert [(lane.node_id, lane.cpus, lane.gpus, lane.device) for lane in gpu_lanes] == [
        ("gpu", 4.0, 1.0, "cuda")
    ] * 4


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray")
    saved = dict(os.environ)
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=80 * 2**20,
        log_to_driver=False,
    )
    yield ray
    ray.shutdown()
    os.environ.clear()
    os.environ.update(saved)


@pytest.mark.train
def test_stage_times_trials_one_after_another_and_never_twice(local_ray, copy_ckpts, tmp_path):
    jobs = []
    for name, ckpt in copy_ckpts.items():
        trial_dir = tmp_path / f"trial_{name}"
        (trial_dir / "checkpoint_000001").mkdir(parents=True)
        shutil.copy(
            ckpt, trial_dir / "checkpoint_000001" / "checkpoint.ckpt"
        )  # a Tune checkpoint folder
        jobs.append(
            TimingJob(
                trial_id=name,
                checkpoint=str(trial_dir / "checkpoint_000001"),
                task={"name": "copy", **COPY},
                output_dir=str(trial_dir),
                seed=0,
            )
        )
    settings = timing_settings(
        repeats=2,
        warmup=1,
        threads=1,
        device="auto",
        precision=None,
        processes=1,
        calibration_seconds=0.2,
        measure=["decode", "train"],  # (memory: a fresh process per model, tested end to end)
    )  # exactly 2 repeats
    lines: list[str] = []

    broken = dataclasses.replace(
        jobs[0],
        trial_id="broken",
        task={"name": "copy", "bogus": 1},
        output_dir=str(tmp_path / "trial_broken"),
    )
    first = run_timing_stage([jobs[0], broken, jobs[1]], settings, log=lines.append)
    assert [o.status for o in first] == ["timed", "error", "timed"], [o.error for o in first]
    assert "bogus" in first[1].error and len(first[1].error.splitlines()) == 1, first[1].error
    assert not (tmp_path / "trial_broken" / TIMING_FILE).exists()
    first = [first[0], first[2]]
    records = [read_record(job.output_dir) for job in jobs]
    for job, outcome, record in zip(jobs, first, records):
        assert record == outcome.record and record.trial_id == job.trial_id
        assert record.timing.repeats == 2 and record.timing.sentences == COPY["val_size"]
        # the training step too, by the same rules in the same process; memory left out
        assert record.measured == ("decode", "train") and record.train.repeats == 2
        assert record.train.cpus == record.timing.cpus and record.memory is None
        assert record.reserved_cpus == 2.0, "each job holds the whole (2-CPU) node"
        assert record.timing.cpus == (max(os.sched_getaffinity(0)),), (
            "timed in a process pinned to one CPU"
        )
        assert not list(Path(job.output_dir).glob(".timing.json.*")), (
            "no temporary file left behind"
        )
    a, b = sorted(records, key=lambda r: r.started_at)
    assert a.finished_at <= b.started_at, "the two timings overlapped"
    assert (
        sum("median of 2" in line for line in lines) == 2
        and sum("broken: failed" in line for line in lines) == 1
    )

    mtimes = [job.result_path.stat().st_mtime_ns for job in jobs]
    second = run_timing_stage(jobs, settings, log=None)
    assert [o.status for o in second] == ["skipped", "skipped"]
    assert [o.record for o in second] == records
    assert [job.result_path.stat().st_mtime_ns for job in jobs] == mtimes

    # a new checkpoint (the trial trained further) or another beam size is not "already timed"
    assert already_timed(jobs[0]) is not None
    assert already_timed(dataclasses.replace(jobs[0], beam_size=5)) is None
    # nor a figure of other settings (a resume with --set timing.threads=2 kept the 1-thread
    # figures, and results.md called them the new settings')
    assert already_timed(jobs[0], threads=1, device="auto") is not None
    assert already_timed(jobs[0], threads=2) is None
    assert already_timed(jobs[0], device="cuda") is None
    # nor one measured under other repeats, warm-up or processes (a resume with --set
    # timing.repeats=20 kept the 2-repeat figures); a record kept them as it was timed
    assert records[0].settings == {
        "repeats": 2,
        "precision": None,
        "max_seconds": settings.max_seconds,
        "calibration_seconds": 0.2,
        "warmup": 1,
        "fresh_process": True,
        "processes": 1,
    }
    assert already_timed(jobs[0], settings=settings) is not None
    for change in ({"repeats": 20}, {"warmup": 0}, {"processes": 3}, {"precision": 0.01}):
        other = settings.model_copy(update=change)
        assert already_timed(jobs[0], settings=other) is None, change
    assert already_timed(jobs[0], settings=settings.model_copy(update={"models_per_process": 2}))
    again = run_timing_stage(jobs[1:], settings.model_copy(update={"repeats": 3}), log=None)
    assert [o.status for o in again] == ["timed"] and again[0].record.timing.repeats == 3
    # the sweep folder copied elsewhere as `cp -r` or scp copy it (new paths, new modification
    # times): its records still name its checkpoints, so a resume there times nothing again
    moved = tmp_path / "elsewhere" / "trial_moved"
    shutil.copytree(jobs[0].output_dir, moved, copy_function=shutil.copy)
    assert (moved / "checkpoint_000001" / "checkpoint.ckpt").stat().st_mtime_ns != (
        Path(jobs[0].checkpoint) / "checkpoint.ckpt"
    ).stat().st_mtime_ns
    copied = dataclasses.replace(
        jobs[0], checkpoint=str(moved / "checkpoint_000001"), output_dir=str(moved)
    )
    assert already_timed(copied) == records[0]
    shutil.copy(copy_ckpts["memory"], Path(jobs[0].checkpoint) / "checkpoint.ckpt")
    assert already_timed(jobs[0]) is None
    assert (Path(jobs[0].output_dir) / TIMING_FILE).exists()


def test_a_checkpoint_is_known_by_its_content_and_an_old_record_by_its_path(copy_ckpts, tmp_path):
    """Timing and held-out records name their checkpoint by a hash of its bytes; a record written
    before that (resolved path, size, mtime) still matches the untouched file it was made for."""
    from sweeps.timing.checkpoint import checkpoint_fingerprint, same_checkpoint

    original = copy_ckpts["memory"]
    copy = tmp_path / "copy.ckpt"
    shutil.copy(original, copy)  # new path and mtime, same bytes
    assert checkpoint_fingerprint(copy) == checkpoint_fingerprint(original)
    assert checkpoint_fingerprint(copy_ckpts["bahdanau"]) != checkpoint_fingerprint(original)
    recorded = checkpoint_fingerprint(original)
    assert same_checkpoint(recorded, copy) and not same_checkpoint(recorded, copy_ckpts["bahdanau"])
    assert not same_checkpoint(None, copy) and not same_checkpoint("", copy)
    f = original.resolve()
    legacy = f"{f}:{f.stat().st_size}:{f.stat().st_mtime_ns}"
    assert same_checkpoint(legacy, original) and not same_checkpoint(legacy, copy)


def test_pinned_timing_picks_the_highest_cpus_and_refuses_more_than_there_are():
    assert pick_cpus(1, [0, 1, 2, 3]) == [3]
    assert pick_cpus(2, [0, 5, 3]) == [3, 5]
    with pytest.raises(TimingError, match="threads=3 but only 2 CPU"):
        pick_cpus(3, [0, 1])


@pytest.mark.train
def test_pinned_timing_runs_in_another_process_on_its_cpu(copy_ckpts):
    ckpt = copy_ckpts["memory"]
    pinned = time_checkpoint_pinned(
        ckpt,
        {"name": "copy", **COPY},
        seed=0,
        split="valid",
        device="cpu",
        beam_size=2,
        repeats=2,
        warmup=0,
        threads=1,
        calibration_seconds=0.2,
        precision=None,
    )
    here = time_checkpoint(
        ckpt,
        {"name": "copy", **COPY},
        seed=0,
        split="valid",
        device="cpu",
        beam_size=2,
        repeats=2,
        warmup=0,
        threads=1,
        calibration_seconds=0.2,
        precision=None,
    )
    assert pinned.cpus == (max(os.sched_getaffinity(0)),) and here.cpus == ()
    assert (pinned.sentences, pinned.output_tokens, pinned.beam_size) == (
        here.sentences,
        here.output_tokens,
        2,
    )
    with pytest.raises(TimingError, match="timing process failed.*bogus"):
        time_checkpoint_pinned(ckpt, {"name": "copy", **COPY, "bogus": 1}, seed=0, threads=1)


@pytest.mark.train
def test_one_process_times_a_batch_one_after_another_and_a_bad_job_fails_alone(copy_ckpts):
    options = dict(
        seed=0,
        split="valid",
        device="cpu",
        beam_size=2,
        repeats=2,
        warmup=0,
        threads=1,
        calibration_seconds=0.2,
    )
    task = {"name": "copy", **COPY}
    got = time_checkpoints_pinned(
        [
            (copy_ckpts["memory"], task, options),
            (copy_ckpts["memory"], {**task, "bogus": 1}, options),
            (copy_ckpts["bahdanau"], task, options),
        ]
    )
    (first, a0, a1), error, (second, b0, b1) = got
    assert first.train is None and first.memory is None, "decode time only unless asked"
    first, second = first.decode, second.decode
    assert isinstance(error, str) and "bogus" in error and len(error.splitlines()) == 1, error
    assert a0 <= a1 <= b0 <= b1, "timed one after another"
    assert (
        first.cpus == second.cpus == (max(os.sched_getaffinity(0)),)
        and first.repeats == second.repeats == 2
    )
    assert time_checkpoints_pinned([]) == []


def test_passes_while_the_machine_ran_slow_or_on_a_shared_core_are_not_kept():
    """(wall, shared core, probe after the pass): a probe 1.4x the fastest one means the machine
    ran slow during that pass; a faster probe later, or in the calibration before the passes,
    raises the bar for the passes before it."""
    passes = [
        (0.020, False, 0.0025),
        (0.021, False, 0.0027),
        (0.030, False, 0.0035),
        (0.020, True, 0.0025),
    ]
    assert clean_passes(passes) == [True, True, False, False]
    assert clean_passes(passes + [(0.016, False, 0.0022)]) == [True, False, False, False, True]
    # a measurement wholly inside a slow spell: only the calibration before it knows the machine's speed
    assert clean_passes(passes[:2], best=0.0018) == [False, False]


def test_the_time_cap_bounds_the_waits_for_a_slow_machine_too(monkeypatch):
    """On a host where the probe finds the machine slow after every pass, each pass was followed
    by a wait of up to RECOVERY_WAIT_S (5 s) whatever the cap: a model's timing took minutes.
    The waits asked for now end at the cap; the passes go on (without waits) only until the
    attempts that flag the timing contended are used up."""
    asked: list[float] = []

    def wait_for_speed(best, limit_s):
        asked.append(limit_s)
        time.sleep(limit_s)  # as the real one does when the machine stays slow
        return best

    monkeypatch.setattr(measure, "wait_for_speed", wait_for_speed)
    cap = 0.3
    started = time.perf_counter()
    passes, keep, reached, stopped_by, _ = measure._timed_repeats(
        lambda: [],
        lambda: None,
        watch=True,
        per_repeat=1,
        repeats=3,
        precision=0.02,
        max_seconds=cap,
        machine_speed=1e-12,  # every probe is far slower than this "fastest" one: always slow
    )
    assert not any(keep) and len(passes) == 3 * measure.MAX_ATTEMPTS_FACTOR
    assert asked and sum(asked) <= cap  # 5 s each before
    assert time.perf_counter() - started >= sum(asked)  # the waits did happen


@pytest.mark.train
def test_passes_on_a_shared_core_are_run_again_and_flagged_when_the_core_never_frees(
    copy_ckpts, monkeypatch
):
    """A busy process pinned to the timing thread's core: every pass's wall time is about twice
    its CPU time, so each is thrown away and, after 4x repeats, the timing says it is contended.
    Timed here, not in a fresh process, with the 2 s calibration and the 5 s waits for the machine
    to recover cut short: beside the busy process every probe looks slow, so each pass would wait
    its full 5 s."""
    monkeypatch.setattr(measure, "RECOVERY_WAIT_S", 0.0)
    module = load_module(copy_ckpts["memory"])
    dm = CopyTaskDataModule(**COPY)
    dm.setup("validate")
    loader = list(
        dm.val_dataloader()
    )  # beam 4 over 24 sentences: ~40 ms of CPU a pass, many time slices
    cpu = max(os.sched_getaffinity(0))
    hog = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nprint(flush=True)\nwhile True: pass",
        ],
        stdout=subprocess.PIPE,
    )
    try:
        hog.stdout.readline()  # it is on the core before the passes start
        with pinned([cpu]):
            timing = measure_decode_time(
                module,
                loader,
                "cpu",
                beam_size=4,
                repeats=3,
                warmup=1,
                threads=1,
                calibration_seconds=0.1,
            )
            # the training step, timed by the same rules beside the same neighbour
            from sweeps.timing.train import measure_train_step, train_batches

            batches = train_batches(dm, 2, torch.device("cpu"))
            train = measure_train_step(
                module, batches, "cpu", repeats=3, warmup=1, threads=1, calibration_seconds=0.1
            )
    finally:
        hog.kill()
        hog.wait()
    assert timing.contended and timing.interrupted >= 10, (timing.interrupted, timing.seconds)
    assert len(timing.seconds) == 3
    assert train.contended and train.interrupted >= 10 and train.repeats == 3, train
    # the [timing] line holds the decode figure too: the warning says which figure it is about
    assert "WARNING: the train step's time is contended" in train_note(train)
    line = "\n".join(report_lines(timing, "valid"))
    assert "WARNING" in line and "quiet machine" in line


@pytest.mark.train
def test_adaptive_repeats_go_on_until_the_median_is_known_and_short_splits_repeat_passes(
    copy_ckpts, monkeypatch
):
    module = load_module(copy_ckpts["bahdanau"])
    dm = CopyTaskDataModule(**COPY)
    dm.setup("validate")
    loader = list(dm.val_dataloader())
    # greedy, 3 repeats after a warm-up, one thread; the machine's speed found in 0.3 s, not 2
    common = dict(beam_size=1, repeats=3, warmup=1, threads=1, calibration_seconds=0.3)
    fixed = measure_decode_time(module, loader, "cpu", **common)
    assert (fixed.repeats, fixed.passes_per_repeat, fixed.precision, fixed.stopped_by) == (
        3,
        1,
        None,
        None,
    ), "precision=None: as asked"
    # A 24-sentence greedy decode takes 5-40 ms by host, too close to MIN_REPEAT_S (50 ms) for a
    # slow CI host to need a second pass: a repeat of 0.5 s makes the split short on any host.
    with monkeypatch.context() as patch:
        patch.setattr(measure, "MIN_REPEAT_S", 0.5)
        loose = measure_decode_time(module, loader, "cpu", precision=0.5, max_seconds=10, **common)
    # each repeat decodes the split until the repeat's length has passed (counted from the last
    # warm-up pass, so a warm-up 2.5x slower than the median still passes 0.2 of it)
    assert loose.passes_per_repeat > 1
    assert loose.passes_per_repeat * fixed.decode_seconds >= 0.2 * 0.5
    # a precision met at once stops at the minimum; one never met stops at the time cap, and the
    # precision recorded is what the kept repeats give in both cases (contended timings claim none)
    tight = measure_decode_time(module, loader, "cpu", precision=1e-6, max_seconds=1.0, **common)
    for timing in (loose, tight):
        if timing.contended:
            assert timing.precision is None
        else:
            assert timing.precision == pytest.approx(median_precision(timing.seconds), abs=1e-5)
    assert loose.contended or (
        loose.repeats == 3 and loose.precision <= 0.5 and loose.stopped_by == "precision"
    )
    # past the minimum until the time cap, unless passes run again on a busy machine used the time up
    assert tight.contended or (
        tight.precision > 1e-6 and (tight.repeats > 3 or tight.interrupted > 0)
    )
    assert tight.stopped_by == (
        None if tight.contended else "time cap"
    )  # the record says the cap, not the precision, ended it
    assert "stopped by the time cap" in repeats_note(tight) or tight.contended
    assert median_precision([1.0, 1.0]) == float("inf")  # too few repeats to know anything
    assert median_precision([1.0, 1.1, 1.2, 1.3]) == pytest.approx(1.57 * 0.15 / 2 / 1.15)


def test_a_caller_that_knows_the_machines_speed_is_not_calibrated_again(copy_ckpts, monkeypatch):
    """The decode probe times dozens of models in one process: it calibrates once and hands the
    speed in, instead of probing the machine for CALIBRATION_S before every measurement."""
    module = load_module(copy_ckpts["memory"])
    dm = CopyTaskDataModule(**COPY)
    dm.setup("validate")
    loader = list(dm.val_dataloader())
    calls = []
    real = measure.fastest_probe
    monkeypatch.setattr(
        measure, "fastest_probe", lambda seconds: calls.append(seconds) or real(0.01)
    )
    measure_decode_time(module, loader, "cpu", beam_size=1, repeats=3, threads=1)
    measure_decode_time(
        module, loader, "cpu", beam_size=1, repeats=3, threads=1, calibration_seconds=0.5
    )
    assert calls == [measure.CALIBRATION_S, 0.5]  # the default, then the length asked for
    speed = measure.machine_probe()
    timing = measure_decode_time(
        module, loader, "cpu", beam_size=1, repeats=3, threads=1, machine_speed=speed
    )
    assert calls == [measure.CALIBRATION_S, 0.5] and timing.repeats == 3, "calibrated again"
    with pytest.raises(TimingError, match="calibration_seconds must be > 0"):
        measure_decode_time(
            module, loader, "cpu", beam_size=1, repeats=3, threads=1, calibration_seconds=0
        )


@pytest.mark.train
def test_timing_json_names_the_figure_decode_seconds_and_reads_the_older_name():
    from sweeps.timing.record import DecodeTiming

    timing = DecodeTiming(
        decode_seconds=0.2,
        min_seconds=0.1,
        max_seconds=0.3,
        q1_seconds=0.15,
        q3_seconds=0.25,
        seconds=(0.2, 0.1, 0.3),
        per_sentence_seconds=0.01,
        sentences=20,
        output_tokens=100,
        batches=2,
        beam_size=1,
        warmup=1,
        device="cpu",
        threads=1,
        torch_version="x",
    )
    data = timing.to_dict()
    assert data["decode_seconds"] == 0.2 and "median_seconds" not in data
    older = {("median_seconds" if k == "decode_seconds" else k): v for k, v in data.items()}
    assert DecodeTiming.from_dict(older) == DecodeTiming.from_dict(data) == timing


def test_peak_memory_follows_what_the_work_allocates():
    """CPU: the resident peak above the footprint before the work, reset between measurements, so
    a smaller allocation after a larger one is not hidden by the earlier high-water mark."""
    from sweeps.timing.memory import peak_above

    def hold(mib: int):
        return lambda: torch.ones(mib * 2**18).add_(1)  # float32: mib MiB, touched

    cpu = torch.device("cpu")
    hold(48)()  # one-time allocations first, as measure_peaks does
    big, small, big_again = (peak_above(hold(m), cpu) for m in (48, 16, 48))
    assert 15 <= small < 24 and 46 <= big < 60, (small, big)
    assert abs(big_again - big) <= 0.05 * big, "the same work measured twice differs"


@pytest.mark.train
def test_training_step_and_peaks_are_measured_on_a_copy_of_the_model(copy_ckpts, tmp_path):
    """measure_checkpoint times training steps of the study's batches on a copy (the checkpoint and
    the loaded weights unchanged), with the decode-time rules, and the peaks of a step and of
    decoding; the record keeps them through timing.json and the results row gets them."""
    from sweeps.timing.checkpoint import checkpoint_fingerprint
    from sweeps.timing.cost import measure_checkpoint
    from sweeps.timing.record import TimingRecord, attach_train_cost, write_json_atomic
    from sweeps.timing.train import quiet_logging, step_runner, train_batches, trainer_copy

    ckpt = copy_ckpts["memory"]
    before = ckpt.read_bytes()
    task = {"name": "copy", **COPY}
    options = dict(device="cpu", repeats=3, warmup=1, threads=1, calibration_seconds=0.2)
    cost = measure_checkpoint(
        ckpt, task, measure=["decode", "train", "memory"], train_steps=2, **options
    )
    assert ckpt.read_bytes() == before
    t = cost.train
    assert (t.steps, t.batch_size, t.repeats, t.threads) == (2, COPY["batch_size"], 3, 1)
    assert t.step_seconds == statistics.median(t.seconds) > 0
    assert t.tokens_per_second == pytest.approx(t.tokens_per_step / t.step_seconds)
    assert t.tokens_per_step > COPY["batch_size"]  # target tokens, EOS included
    m = cost.memory
    assert m.how == "resident" and m.train_peak_mb > 0 and m.decode_peak_mb > 0, m
    assert cost.decode.sentences == COPY["val_size"]

    module = load_module(ckpt)
    weights = {k: v.clone() for k, v in module.state_dict().items()}
    dm = CopyTaskDataModule(**COPY)
    clone, optimizer = trainer_copy(module, torch.device("cpu"))
    with quiet_logging():
        step_runner(clone, optimizer, train_batches(dm, 2, torch.device("cpu")))()
    assert all(torch.equal(weights[k], v) for k, v in module.state_dict().items())
    assert any(not torch.equal(weights[k], v) for k, v in clone.state_dict().items())

    record = TimingRecord(
        "t", str(ckpt), checkpoint_fingerprint(ckpt), "valid", cost.decode, "n", "h", 2.0, 0.0, 0.0, 1.0,
        train=cost.train, memory=cost.memory, measured=("decode", "train", "memory"),
    )  # fmt: skip
    assert TimingRecord.from_dict(json.loads(json.dumps(record.to_dict()))) == record
    row: dict = {}
    attach_train_cost(row, t.to_dict(), m.to_dict())
    assert row["train_step_seconds"] == t.step_seconds and row["train_peak_mb"] == m.train_peak_mb
    assert row["train_step_contended"] == t.contended and row["decode_peak_mb"] == m.decode_peak_mb

    # a record without the training step is not "already timed" for a study that asks for it
    job = TimingJob("t", str(ckpt), task, str(tmp_path))
    write_json_atomic(job.result_path, dataclasses.replace(record, train=None).to_dict())
    assert already_timed(job, ["decode"]) is not None
    assert already_timed(job, ["decode", "train"], 2) is None
    write_json_atomic(job.result_path, record.to_dict())
    assert already_timed(job, ["decode", "train", "memory"], 2) is not None
    assert already_timed(job, ["train"], 4) is None, "timed over another number of steps"


@pytest.mark.train
def test_the_command_reads_cpu_peaks_in_a_fresh_process_as_the_stage_does(
    copy_ckpts, tmp_path, monkeypatch, capsys
):
    """`python -m sweeps.timing CKPT --measure train memory`: the peaks come from a process of their
    own with the stage's fixed mmap threshold (in the timing process, after its training steps,
    one model's decode peak read 12.0 and 14.5 MiB in two runs, 4.9-5.0 afresh)."""
    from sweeps.timing import cli
    from sweeps.timing.memory import MEMORY_ENV

    for key in MEMORY_ENV:
        monkeypatch.delenv(key, raising=False)
    assert cli.memory_needs_a_fresh_process("cpu") and not cli.memory_needs_a_fresh_process("cuda")
    children = []
    real_run = subprocess.run

    def run(cmd, **kwargs):
        children.append((cmd, kwargs.get("env", {})))
        return real_run(cmd, **kwargs)

    monkeypatch.setattr(cli.subprocess, "run", run)
    out = tmp_path / "t.json"
    argv = [str(copy_ckpts["memory"]), "--measure", "train", "memory", "--repeats", "2"]
    argv += ["--precision", "0", "--calibration-seconds", "0.2", "--json", str(out)]
    assert cli.main(argv) == 0
    ((cmd, env),) = children  # one fresh process, for the peaks only
    assert cmd[cmd.index("--measure") + 1 :][:1] == ["memory"] and str(out) not in cmd
    assert all(env.get(k) == v for k, v in MEMORY_ENV.items())
    data = json.loads(out.read_text())
    assert data["memory"]["train_peak_mb"] > 0 and data["train"]["step_seconds"] > 0
    assert f"train {data['memory']['train_peak_mb']} MiB" in capsys.readouterr().out


def test_the_processes_of_a_cpu_timing_share_its_time_cap():
    """``timing.max_seconds`` is per model and measure: three fresh CPU processes get a third each,
    a GPU's single measurement (or timing inside the worker) the whole."""
    settings = timing_settings(max_seconds=30, processes=3)
    assert measure_options(settings, "cpu")["max_seconds"] == pytest.approx(10.0)
    assert measure_options(settings, "cuda")["max_seconds"] == pytest.approx(30.0)
    inside = timing_settings(max_seconds=30, processes=3, fresh_process=False)
    assert measure_options(inside, "cpu")["max_seconds"] == pytest.approx(30.0)


def test_memory_processes_run_side_by_side_each_on_cpus_of_its_own(monkeypatch):
    """The memory processes (peaks, not times) run as many at a time as the node has CPUs for,
    each given CPUs no other running one holds; results come back in the batches' order."""
    lock, running, seen = threading.Lock(), set(), []

    def run(name, cpus):
        with lock:
            assert not running & set(cpus), (running, cpus)
            running.update(cpus)
            seen.append(len(running))
        time.sleep(0.2)
        with lock:
            running.difference_update(cpus)
        return name, tuple(cpus)

    got = side_by_side([(f"b{i}",) for i in range(6)], run, threads=1)
    assert [name for name, _ in got] == [f"b{i}" for i in range(6)]
    assert max(seen) == min(len(os.sched_getaffinity(0)), pinned_module.MAX_SIDE_BY_SIDE)
    assert all(len(cpus) == 1 for _, cpus in got)
    # never more at once than the cap, however many cores the node has (each holds a model and data)
    monkeypatch.setattr(pinned_module, "MAX_SIDE_BY_SIDE", 1)
    seen.clear()
    side_by_side([(f"b{i}",) for i in range(3)], run, threads=1)
    assert max(seen) == 1


def test_a_gpu_record_of_peaks_alone_is_already_timed_under_the_same_settings(tmp_path):
    """A GPU lane's record keeps no CPU-only settings (fresh processes); one holding peaks alone
    (``measure: [memory]``) was compared as a CPU's and timed again at every resume."""
    from sweeps.timing.files import checkpoint_fingerprint
    from sweeps.timing.jobs import measure_settings
    from sweeps.timing.memory import MemoryPeaks
    from sweeps.timing.record import TimingRecord, write_json_atomic

    ckpt = tmp_path / "checkpoint_000001" / "checkpoint.ckpt"
    ckpt.parent.mkdir()
    ckpt.write_bytes(b"weights")
    settings = timing_settings(measure=["memory"], device="cuda")
    record = TimingRecord(
        trial_id="t1",
        checkpoint=str(ckpt.parent),
        fingerprint=checkpoint_fingerprint(ckpt.parent),
        split="valid",
        timing=None,
        node_id="n",
        hostname="h",
        reserved_cpus=4.0,
        reserved_gpus=1.0,
        started_at=0.0,
        finished_at=1.0,
        memory=MemoryPeaks(3.0, 2.0, "cuda allocator", "cuda"),
        measured=("memory",),
        settings=measure_settings(settings, "cuda"),
    )
    write_json_atomic(tmp_path / TIMING_FILE, record.to_dict())
    job = TimingJob("t1", str(ckpt.parent), {"name": "copy"}, str(tmp_path))
    assert already_timed(job, ["memory"], None, 1, "cuda", settings) == record
    other = settings.model_copy(update={"warmup": 3})
    assert already_timed(job, ["memory"], None, 1, "cuda", other) is None
