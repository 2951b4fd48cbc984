"""Before anything starts: every folder a sweep writes can be written (``--dry-run`` says which
key to change when one cannot), and the shipped sweep files write nowhere but under their data or
output folder. No Ray: the launcher's checks and real folders only."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from sweep_helpers import tiny_spec, write_spec

from sweeps.launch import main
from sweeps.plan.folders import sweep_folders, write_problem
from sweeps.spec import load_spec

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = sorted((ROOT / "sweeps").glob("*.yaml"))


def blocked(tmp_path: Path) -> Path:
    """A path no one can create, root included: its parent is a file."""
    wall = tmp_path / "a-file"
    wall.write_text("not a folder\n")
    return wall / "sub"


def test_write_problem_creates_nothing_and_sees_a_file_in_the_way(tmp_path):
    assert write_problem(str(tmp_path / "new" / "deeper")) is None
    assert not (tmp_path / "new").exists(), "the check creates nothing"
    assert "is a file" in write_problem(str(blocked(tmp_path)))
    assert write_problem("s3://bucket/sweeps") is None  # buckets are Ray's to check


@pytest.mark.parametrize(
    ("profile", "override", "key"),
    [
        ("smoke", "task.cache_dir={blocked}", "task.cache_dir "),
        (None, "task.data_dir={blocked}/{{pair}}", "task.cache_dir (unset: its default) "),
        ("smoke", "storage.path={blocked}", "storage.path "),
    ],
)
def test_dry_run_names_the_key_of_a_folder_it_cannot_write(
    tmp_path, capsys, profile, override, key
):
    """wmt17.yaml's own cache default (``<data_dir>/.cache``) is checked like a key that is set."""
    wall = blocked(tmp_path)
    code = main(
        [str(ROOT / "sweeps" / "wmt17.yaml"), "--dry-run", "--output", str(tmp_path / "out")]
        + ["--set", override.format(blocked=wall)]
        + (["--profile", profile] if profile else [])
    )
    err = capsys.readouterr().err
    assert code == 2, err
    (line,) = err.strip().splitlines()
    assert line.startswith(f"error: {key}") and str(wall) in line, line
    assert "cannot create or write there" in line and "is a file, not a folder" in line, line
    assert f"--set {key.split()[0]}=PATH" in line, line


def test_dry_run_refuses_an_output_it_cannot_write(tmp_path, capsys):
    spec = write_spec(tmp_path, tiny_spec("out"))
    assert main([str(spec), "--dry-run", "--output", str(blocked(tmp_path))]) == 2
    assert "error: --output " in capsys.readouterr().err
    assert main([str(spec), "--dry-run", "--output", str(tmp_path / "fine")]) == 0
    assert "writes to (all writable from here): --output " in capsys.readouterr().out
    assert not (tmp_path / "fine").exists(), "--dry-run creates nothing"


def test_a_fixed_teacher_checkpoint_must_be_a_file_and_is_read_from_where_the_launch_starts(
    tmp_path, capsys, monkeypatch
):
    """A fixed ``model.teacher_checkpoint`` that is no file let the launch start, and each student
    failed as it started; a relative one was kept relative, though trials run in folders of
    their own."""
    raw = tiny_spec("taught")
    raw["grid"]["model"][1].update(distill_weight=0.5, teacher_checkpoint="t.ckpt")
    spec = write_spec(tmp_path, raw)
    monkeypatch.chdir(tmp_path)
    argv = [str(spec), "--dry-run", "--output", str(tmp_path / "out")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"error: grid.model[1].teacher_checkpoint: {tmp_path / 't.ckpt'} is not a file" in err
    assert "a relative path is taken from where the launch starts" in err
    (tmp_path / "t.ckpt").write_bytes(b"")
    assert main(argv) == 0
    sweep = load_spec(spec)
    assert sweep.plans[1].model["teacher_checkpoint"] == str(tmp_path / "t.ckpt")


def test_a_test_size_of_0_with_the_held_out_stage_on_is_refused_before_training(tmp_path, capsys):
    """The held-out stage failed for every chosen trial, after all the training."""
    raw = tiny_spec("untested", heldout={"enabled": True})
    raw["task"]["test_size"] = 0
    spec = write_spec(tmp_path, raw)
    argv = [str(spec), "--dry-run", "--output", str(tmp_path / "out")]
    assert main(argv) == 2
    assert "task.test_size is 0, and the held-out stage evaluates" in capsys.readouterr().err
    assert main([*argv, "--set", "heldout.enabled=false"]) == 0


def test_a_fetch_into_data_dir_needs_it_writable_and_data_already_there_does_not(tmp_path):
    """data_dir is written only when the data is fetched into it: a read-only copy of the data
    is fine."""
    smoke = ["task.data_dir=" + str(ROOT / "tests" / "data" / "wmt-ende-tiny")]
    for download in ("false", "true"):  # the files are there: nothing to fetch
        sweep = load_spec(
            ROOT / "sweeps" / "wmt17.yaml",
            profile="smoke",
            overrides=smoke + [f"task.download={download}"],
        )
        assert "task.data_dir" not in {f.key for f in sweep_folders(sweep, tmp_path)}
    # the release's own file names (the smoke profile names the tiny slice's valid and test
    # files, which no fetch writes)
    release = ["task.valid_prefix=null", "task.test_prefix=null"]
    sweep = load_spec(
        ROOT / "sweeps" / "wmt17.yaml",
        profile="smoke",
        overrides=[f"task.data_dir={tmp_path}/empty/{{pair}}", "task.download=true", *release],
    )
    keys = {f.key: f.path for f in sweep_folders(sweep, tmp_path / "out")}
    assert keys["task.data_dir"] == str(tmp_path / "empty" / "en-de")


def test_dry_run_notes_wmt_data_that_is_missing_and_not_fetched(tmp_path, capsys):
    """With task.download off, a data_dir without the pair's files (or with an empty one) makes
    the data stage stop: the dry run says so, with the fetch command; data that is there, or
    that the launch fetches, gets no note."""
    tiny = ROOT / "tests" / "data" / "wmt-ende-tiny"
    partial = tmp_path / "partial"
    partial.mkdir()
    for f in tiny.iterdir():
        (partial / f.name).write_bytes(f.read_bytes())
    (partial / "train.de").write_bytes(b"")  # an interrupted copy

    def notes(data_dir: Path, download: str, *more: str) -> list[str]:
        sets = [f"task.data_dir={data_dir}", f"task.download={download}", *more]
        argv = [str(ROOT / "sweeps" / "wmt17.yaml"), "--profile", "smoke", "--dry-run"]
        argv += ["--output", str(tmp_path / f"out-{download}")]
        assert main(argv + [x for s in sets for x in ("--set", s)]) == 0
        out = capsys.readouterr().out.splitlines()
        return [line for line in out if line.startswith("note: data_dir")]

    assert notes(tiny, "false") == []
    release = ("task.valid_prefix=null", "task.test_prefix=null")  # the names the fetch writes
    assert notes(tmp_path / "none", "true", *release) == []  # the launch fetches them
    # the smoke profile's own prefixes (the tiny slice's valid and test files): no fetch writes
    # them, and the dry run says so before the launch would download anything
    (line,) = notes(tmp_path / "none", "true")
    assert "lacks valid.en, valid.de, test.en, ..., and download cannot fetch them" in line
    assert "test_prefix='test', valid_prefix='valid' name others" in line
    (line,) = notes(partial, "false")
    assert "lacks 1 of the 6 en-de files (train.de), missing or empty" in line
    assert f"python -m datamodules.wmt17 fetch --pair en-de --to {partial}" in line


def test_smoke_launched_from_another_folder_says_where_the_repository_holds_its_data(
    tmp_path, monkeypatch, capsys
):
    """wmt17's smoke profile names the slice the repository ships by a relative path, taken from
    where the launch starts: from another folder the dry run and the data stage said only to fetch
    the data, where launching from the repository (or giving its absolute path) is the fix."""
    monkeypatch.chdir(tmp_path)
    argv = [str(ROOT / "sweeps" / "wmt17.yaml"), "--smoke", "--output", str(tmp_path / "out")]
    assert main(argv + ["--dry-run"]) == 0
    (note,) = [line for line in capsys.readouterr().out.splitlines() if "note: data_dir" in line]
    fix = f"launch from {ROOT}, or --set task.data_dir={ROOT / 'tests' / 'data' / 'wmt-ende-tiny'}"
    assert f"taken from where the launch starts ({tmp_path.resolve()})" in note and fix in note
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "preparing the data failed" in err and fix in err, err
    assert not (tmp_path / "out" / "wmt17" / "results.csv").exists()
    monkeypatch.chdir(ROOT)  # from the repository the same profile finds its data: no note
    assert main(argv + ["--dry-run"]) == 0
    assert "note: data_dir" not in capsys.readouterr().out


def _profiles(path: Path) -> list[str | None]:
    return [None, *yaml.safe_load(path.read_text()).get("profiles", {})]


@pytest.mark.parametrize(
    ("path", "profile"),
    [(p, prof) for p in SHIPPED for prof in _profiles(p)],
    ids=lambda v: v.name if isinstance(v, Path) else str(v),
)
def test_shipped_sweeps_write_under_their_data_or_output_folder(
    path, profile, tmp_path, monkeypatch
):
    """No folder of one machine: run from an empty folder, every folder a shipped sweep writes is
    inside it, and every cache lies under the sweep's data folder or its output root."""
    monkeypatch.chdir(tmp_path)
    output = tmp_path / "sweep-results"  # the default --output, relative to where you launch
    sweep = load_spec(path, profile=profile)
    data = {p.task.get("data_dir") for p in sweep.plans} - {None}
    for folder in sweep_folders(sweep, output):
        p = Path(folder.path)
        assert p.is_relative_to(tmp_path), f"{path.name} writes to {folder.key} {p}"
        if "cache" in folder.key:
            assert p.is_relative_to(output) or any(p.is_relative_to(d) for d in data), (
                f"{path.name}: {folder.key} {p} is under neither a data_dir nor the output"
            )


def test_dry_run_resume_says_what_it_continues_or_that_there_is_nothing(tmp_path, capsys):
    """``--dry-run --resume`` stops where the launch would (the folder holds no sweep), before
    Ray; with a sweep there it names the folder and its results.csv's statuses."""
    spec = write_spec(tmp_path, tiny_spec("again"))
    out = tmp_path / "out"
    argv = [str(spec), "--dry-run", "--resume", "--output", str(out)]
    assert main(argv) == 2
    said = capsys.readouterr().err.strip()
    assert said == (
        f"error: --resume: {out / 'again'} holds no sweep to continue. Check --output (and "
        "storage.path), or run the same command without --resume to start the sweep."
    )
    # a launch refused before any trial started (here with --set trainer.max_steps=7) leaves its
    # own record: no sweep yet, and a --resume with another --set is not held to the refused one's
    (out / "again").mkdir(parents=True)
    (out / "again" / "launch.json").write_text(
        '{"overrides": ["trainer.max_steps=7"], "profile": null}\n'
    )
    assert main([*argv, "--set", "trainer.max_steps=9"]) == 2, "the launcher's own record"
    assert capsys.readouterr().err.strip() == (
        f"error: --resume: {out / 'again'} holds no sweep to continue: the launch that wrote its "
        "launch.json stopped before any trial started. Run the same command without --resume to "
        "start the sweep."
    )
    (out / "again" / "launch.json").write_text('{"overrides": [], "profile": null}\n')
    (out / "again" / "results.csv").write_text("trial_id,status\na,done\nb,preempted\nc,done\n")
    assert main(argv) == 0
    said = capsys.readouterr().out.splitlines()
    assert (
        f"--resume continues the sweep in {out / 'again'}; its last results.csv: 2 done, 1 preempted"
    ) in said
    # its finished rows name no checkpoint file: said as the resume says it
    assert any(line.startswith("note: 2 finished trial(s) have lost their") for line in said)
    # --output the sweep's own folder: the advice was to start a new sweep inside it
    inside = [str(spec), "--dry-run", "--resume", "--output", str(out / "again")]
    assert main(inside) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: --resume: {out / 'again' / 'again'} holds no sweep to continue, and --output "
        f"names the sweep's own folder ({out / 'again'}): pass --output {out}, the folder that "
        "holds again/."
    )


def test_a_storage_uri_of_a_scheme_ray_cannot_read_is_refused(tmp_path, capsys):
    """s4:// passed the dry run, listed as writable; Ray's storage (pyarrow) would refuse it once
    the sweep had started."""
    base = [str(ROOT / "sweeps" / "quickstart.yaml"), "--dry-run", "--output", str(tmp_path)]
    assert main([*base, "--set", "storage.path=s4://bucket/sweeps"]) == 2
    err = capsys.readouterr().err
    assert "storage.path s4://bucket/sweeps: unknown filesystem s4://" in err and "s3://" in err
    assert main([*base, "--set", "storage.path=s3://bucket/sweeps"]) == 0
    out = capsys.readouterr().out
    assert "writes to (the local ones writable from here): " in out
    assert write_problem("gs://bucket/x") is None
    assert "unknown filesystem S3://" in write_problem("S3://b/x")  # pyarrow: lower case only


def test_the_schemes_let_through_are_those_rays_storage_reads():
    """The schemes a storage path may have are the ones pyarrow's filesystems (what Ray's storage
    reads) recognise, checked with pyarrow itself: one it drops or renames stops being accepted
    here, not at the first checkpoint on the cluster."""
    import pyarrow.fs

    from sweeps.plan.folders import URI_SCHEMES

    def recognised(scheme: str) -> bool:
        query = "?region=us-east-1" if scheme == "s3" else ""  # no bucket-region lookup on the net
        try:
            pyarrow.fs.FileSystem.from_uri(f"{scheme}://bucket/x{query}")
        except Exception as exc:  # a missing library or account is a scheme it knows
            return "Unrecognized filesystem type" not in str(exc)
        return True

    assert {s: recognised(s) for s in URI_SCHEMES} == dict.fromkeys(URI_SCHEMES, True)
    assert not recognised("ftp") and not recognised("s4")
