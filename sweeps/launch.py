"""Run a sweep: ``python sweeps/launch.py sweeps/k_vs_length.yaml [options]``.

    --dry-run              validate, print the trial table and count, check that every folder
                           the sweep writes can be written and that a cluster address given
                           answers; start nothing
    --profile NAME         apply the sweep's named profile of overrides (its `profiles:` block)
    --smoke                the plumbing profile: the same grid, scaled down (tiny model, few steps)
                           to finish in minutes on CPU; proves nothing about the science
    --resume               continue an interrupted sweep: finished trials are kept, the rest
                           continue from their last checkpoint; the first run's --set overrides
                           and profile are reused (launch.json), new conflicting ones refused
    --address ADDR         the Ray to join (HOST:6379, ray://HOST:10001, auto; `local`: a private
                           instance). Default, as Ray's own: RAY_ADDRESS if set, else the cluster
                           `ray start` runs on this machine, else a new local instance
    --set KEY=VALUE        override any spec key (repeatable), e.g. --set trainer.max_steps=500
    --output DIR           results, W&B offline runs and (by default) checkpoints; default sweep-results/
    --num-cpus N           the CPUs of a local Ray instance the launch starts (default: all)
    --verbose {0,1,2}      0: no trial table; 1 (default): the launch's table and progress line;
                           2: Tune's own reporter too

After the Tune run, the decode-timing stage (:mod:`sweeps.timing`, the spec's ``timing`` block)
times each finished trial's final model alone on a node: the results' ``decode_seconds``.
Results land in ``<output>/<name>/``: results.csv (a row for every planned trial, failed ones
included), results.md, PNG plots. W&B logs online when an API key is present (environment or
``wandb login``), offline otherwise, and the command to upload offline runs is printed at the end.

Exit status: 0 all trials done; 1 some trial failed (listed, with its error), or the disk filled or
went read-only; 2 the launch refused before training, in one line naming the problem (a bad spec or
--set value, a folder it cannot write or that holds the sweep already, another launch of it running,
nothing to --resume, data it could not prepare, a cluster address that does not answer, more CPUs or
GPUs asked than a local Ray has, local storage across several hosts, a torch that cannot use the
GPUs asked for); 75 preempted (SIGTERM, or
SIGUSR1 as SLURM's warning before the time limit, in any stage: the unfinished trials are
``preempted`` in results.csv, and ``--resume`` continues them and times and evaluates the models
not yet done), or the Ray head lost (its GCS silent for 40 s by default; the resume command is
said, no results.csv is written); 3 the sweep's ``budget`` ran out (the unfinished trials are ``budget``; ``--resume
--set budget.hours=N`` continues them); 130 interrupted (Ctrl-C). A stop that comes when every
stage has finished exits 0.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable, not sweeps/ itself
    _here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _here]
    sys.path.insert(0, str(_here.parent))

from sweeps.driver.cluster import ADDRESS_FORMS, address_parts, check_address  # noqa: E402
from sweeps.driver.cpu_fit import local_cpu_note  # noqa: E402
from sweeps.driver.launch_lock import running_launch  # noqa: E402
from sweeps.driver.resume_check import lost_finished_checkpoints  # noqa: E402
from sweeps.errors import LaunchError  # noqa: E402
from sweeps.layout import LAUNCH_FILE, holds_local_sweep, positive_int  # noqa: E402
from sweeps.plan.describe import describe  # noqa: E402
from sweeps.plan.folders import (  # noqa: E402
    check_folders,
    check_new_sweep,
    check_sweep_folder,
    describe_folders,
    gpu_note,
    resume_line,
)
from sweeps.plan.sweep_plan import build_plan  # noqa: E402
from sweeps.spec import (  # noqa: E402
    SpecError,
    check_resumed_plan,
    load_spec,
    profile_line,
    resume_launch,
)
from sweeps.spec.gpu import float16_precisions  # noqa: E402
from sweeps.spec.launch_record import first_launch_plan, read_launch  # noqa: E402
from sweeps.stages.pipeline import run_sweep  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="sweeps/launch.py",
        description="Run an attention-variant sweep on Ray Tune (+ Optuna), logged to W&B.",
    )
    p.add_argument("spec", help="the sweep file, e.g. sweeps/k_vs_length.yaml")
    p.add_argument(
        "--address",
        type=_address,
        default=None,
        help="Ray to join: HOST:PORT, ray://HOST:10001, auto, or local (a private instance); default: "
        "RAY_ADDRESS, else the `ray start` cluster on this machine, else a new local instance",
    )
    p.add_argument(
        "--profile",
        action="append",
        default=None,
        metavar="NAME",
        help="apply the sweep's named profile of overrides",
    )
    p.add_argument(
        "--smoke",
        action="store_true",
        help="the plumbing profile: same grid, scaled down (minutes on a CPU)",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="validate and list the trials; start nothing"
    )
    p.add_argument(
        "--resume", action="store_true", help="continue an interrupted sweep from its storage"
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a spec key (repeatable)",
    )
    p.add_argument(
        "--output",
        type=_folder,
        default="sweep-results",
        help="folder for results (default: sweep-results)",
    )
    p.add_argument(
        "--num-cpus",
        type=positive_int,
        default=None,
        help="CPUs of a local Ray instance the launch starts (default: all of the machine's); "
        "not read when it joins a cluster",
    )
    p.add_argument(
        "--verbose",
        type=int,
        default=1,
        choices=[0, 1, 2],
        help="0: quiet; 1: trial table and progress line (default); 2: also Tune's own reporter",
    )
    args, extra = p.parse_known_args(argv)
    profiles = list(dict.fromkeys(args.profile or []))
    if len(profiles) > 1:  # the last one alone was used, without a word
        p.error(
            f"--profile {' and --profile '.join(profiles)}: one profile a launch; pick one, and "
            "give the other's settings you want with --set KEY=VALUE"
        )
    args.profile = profiles[0] if profiles else None
    if not extra:
        return args
    # an argument past the sweep file: `--set k=[4, 8]` unquoted, its "8]" split off by the shell
    # (into the sweep file's place where the --set came first)
    rest = args.spec if not Path(args.spec).exists() else " ".join(extra)
    for override in args.overrides:
        if override.count("[") > override.count("]") or override.count("{") > override.count("}"):
            p.error(
                f"--set {override} was cut at a space by the shell ({rest} came as another "
                f"argument): quote the whole value, --set '{override} {rest}'"
            )
    p.error(f"unrecognized arguments: {' '.join(extra)}")


def _address(text: str) -> str:
    """``--address``'s form, checked before anything (whether it answers: when the launch joins)."""
    if text not in ("auto", "local") and address_parts(text) is None:
        raise argparse.ArgumentTypeError(f"{text!r}: {ADDRESS_FORMS}")
    return text


def _folder(text: str) -> str:
    """An empty ``--output`` (``--output "$DIR"`` with DIR unset) would write into the current
    folder, and a URI (``s3://...``) into a local folder named ``s3:``: both refused."""
    if not text.strip():
        raise argparse.ArgumentTypeError(
            f"empty folder name {text!r}; give the folder for the results, e.g. --output "
            "sweep-results (the default), or --output . for the current folder"
        )
    scheme, sep, _ = text.partition("://")
    if sep and scheme.isidentifier():  # a URI would become a local folder named "s3:"
        raise argparse.ArgumentTypeError(
            f"{text!r} is a URI; --output is a folder of this machine (or a shared NFS path) for "
            f"results.csv, the reports and W&B's offline runs. Checkpoints go to a bucket with "
            f"--set storage.path={text}"
        )
    return text


def stored_elsewhere(folder: Path, spec: str) -> bool:
    """Whether the first run recorded in ``folder`` (its launch.json, no results beside it yet)
    sent its trials to a ``storage.path`` that holds them: a ``--resume`` without that run's
    ``--set storage.path`` must still find them (it said no trial had started, and the command it
    offered trained every trial again beside the stored ones). A bucket is taken at its word."""
    record = folder / LAUNCH_FILE
    if not record.exists():
        return False
    first = read_launch(record, spec)
    then = load_spec(
        spec, overrides=first["overrides"], profile=first.get("profile"), resumed=folder.parent
    )
    storage = then.spec.storage.path
    if storage is None:
        return False
    return "://" in storage or holds_local_sweep(Path(storage) / then.name)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.smoke and args.profile not in (None, "smoke"):
        print(
            f"error: --smoke is --profile smoke; pick one of --smoke and --profile {args.profile}",
            file=sys.stderr,
        )
        return 2
    profile = "smoke" if args.smoke else args.profile
    try:
        # a resume keeps its first launch's warm start: the earlier folder may have moved since
        resumed = Path(args.output).resolve() if args.resume else None
        sweep = load_spec(args.spec, overrides=args.overrides, profile=profile, resumed=resumed)
        folder = Path(args.output).resolve() / sweep.name
        # a launch refused before Tune started left only its own files (launch.json, the budget
        # ledger, the lock): no trial was planned from its overrides, so none are held to
        if args.resume and (
            sweep.spec.storage.path is not None
            or holds_local_sweep(folder)
            or stored_elsewhere(folder, args.spec)
        ):
            # the first run's --set and profile, stored beside its results
            first = resume_launch(folder, args.overrides, profile, args.spec)
            if first != (args.overrides, profile):
                given = set(args.overrides)
                args.overrides, profile = first
                kept = [f"--set {o}" for o in args.overrides if o not in given]
                kept += [f"--profile {profile}"] if profile else []
                now = [f"--set {o}" for o in args.overrides if o in given]
                print(
                    "resuming with the recorded overrides: "
                    + (" ".join(kept) or "none")
                    + (f"; and this command's: {' '.join(now)}" if now else "")
                )
                sweep = load_spec(
                    args.spec, overrides=args.overrides, profile=profile, resumed=resumed
                )
            # the file plans the trials as at the first run: read with that run's profile and
            # overrides, as its plan was recorded
            check_resumed_plan(folder, sweep.planned, args.spec)
    except SpecError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"sweep {sweep.name}{f' (profile {profile})' if profile else ''}: {args.spec}")
    if sweep.profile_settings or sweep.set_overrides:
        print(profile_line(profile, sweep.profile_settings, sweep.set_overrides))
    try:
        # a resume plans the GPU arrangement for the GPU its first launch planned for, and keeps
        # the trials its first launch's warm start reused
        first = first_launch_plan(Path(args.output).resolve() / sweep.name, args.resume)
        plan = build_plan(sweep, Path(args.output), *first)
        for line in describe(plan):
            print(line)
        check_folders(plan.folders)  # every folder a trial writes, before anything starts
        check_sweep_folder(plan.out_dir, args.output)
        if args.dry_run:
            print(describe_folders(plan.folders))
            running = running_launch(plan.out_dir)  # where the launch would stop: another runs
            if running:
                raise LaunchError(running)
            experiment = plan.paths.experiment(sweep.name)
            if args.resume:
                print(resume_line(experiment, plan.out_dir))
                lost = "://" not in experiment and lost_finished_checkpoints(
                    plan.out_dir, args.spec, args.output
                )
                if lost:  # as the resume says it
                    print(lost)
            else:
                check_new_sweep(experiment, args.spec, args.output, plan.out_dir)
            # where the launch would stop: the cluster it joins does not answer (a probe of its
            # port and GCS, which starts nothing)
            address = args.address or os.environ.get("RAY_ADDRESS")
            if address and args.address != "local":
                check_address(address, source="--address" if args.address else "RAY_ADDRESS")
            cpus = local_cpu_note(
                sweep.spec.resources, args.address, args.num_cpus, float16_precisions(sweep.spec)
            )
            for note in [gpu_note(sweep), cpus, *plan.data_notes]:
                if note:
                    print(note)
    except LaunchError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.dry_run:
        return 0
    return run_sweep(plan, args, profile)


def exit_quickly(status: object) -> None:
    """Leave the process as ``sys.exit(status)`` would, without the interpreter's teardown. The
    exit handlers still run (Ray's shutdown, logging's and W&B's flushes) and the console is
    flushed; what is skipped is the freeing of every module and object one by one (torch, Ray,
    pyarrow): 1.7 s after the last exit handler, on the 2-core VM, with nothing left to write."""
    import atexit

    if isinstance(status, str):  # sys.exit("message"): printed, exit status 1
        print(status, file=sys.stderr)
        status = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(0 if status is None else int(status))


if __name__ == "__main__":
    try:
        code: object = main()
    except SystemExit as stop:  # argparse's --help and usage errors
        code = stop.code
    exit_quickly(code)
