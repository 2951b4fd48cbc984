"""NVIDIA MPS for trials that share a GPU: one control daemon per sweep (per node on a cluster),
started before the trials and stopped after them, also when the sweep fails or is preempted.

Without MPS, processes that share a GPU (``resources.gpu: 0.5`` puts two on one: two unfused
trials, or two fused groups, whose members hold 1/n of a group's share each) each have
a CUDA context of their own and the GPU time-slices between them; under MPS their kernels run side
by side, which small launch-bound training steps need. Nothing in a trial changes: CUDA connects a
process to the daemon that ``CUDA_MPS_PIPE_DIRECTORY`` names.

``resources.mps`` (:func:`plan_mps`): ``auto`` (the default) starts a daemon when the trials share
GPUs (0 < ``resources.gpu`` < 1, or the plan puts several to a GPU with ``resources.gpu: auto``)
and the node has ``nvidia-cuda-mps-control``; ``on`` whenever the
trials use a GPU, a node without the program being an error; ``off`` never. A daemon the site
runs already is used as it is (:func:`node_mps`). Each daemon has its own pipe and log
directories in a temporary folder of its own, so jobs on one node do not meet.

- The launcher, for the Ray it starts itself: :func:`mps_for_sweep` around the whole sweep. The
  local Ray's processes inherit the variables; at the end Ray stops first (its workers are the
  daemon's clients), then the daemon.
- ``cluster/slurm.sbatch``, on every node: ``python -m sweeps.driver.mps plan SWEEP [options]`` says
  what the sweep wants (from the launch's plan: :func:`sweeps.plan.sweep_plan.build_plan`), and
  ``python -m sweeps.driver.mps run --want W --dir DIR -- ray start ...`` runs the node's Ray
  under a daemon and stops the daemon when that Ray ends, whatever ends it.
  A launcher that joins a cluster (``--address``) leaves MPS to the cluster's scripts.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from sweeps.driver.cluster import choose_address
from sweeps.driver.environ import restore_environ
from sweeps.plan.mps import MpsPlan, Want, plan_mps  # noqa: F401 (named here by the docs, tests)

#: the MPS control program of NVIDIA's driver
MPS_CONTROL = "nvidia-cuda-mps-control"
#: why :func:`node_mps` starts no daemon on a node without the control program
NO_CONTROL = f"no {MPS_CONTROL} on this node's PATH"
#: what tells the launcher this machine has an NVIDIA GPU at all (as the plan names it)
NVIDIA_SMI = "nvidia-smi"
PIPE_ENV, LOG_ENV = "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY"
#: where a node-wide daemon listens when nobody set a pipe directory
DEFAULT_PIPE = Path("/tmp/nvidia-mps")
#: seconds the daemon gets to open its control socket, and to quit
START_SECONDS, QUIT_SECONDS = 10.0, 60.0


def node_mps(
    want: Want,
    environ: Mapping[str, str],
    which: Callable[[str], str | None] = shutil.which,
    default_pipe: Path = DEFAULT_PIPE,
) -> tuple[str | None, str]:
    """The node's part: the control program to start a daemon with (None: start none), and why.

    Raises:
        RuntimeError: ``want`` is ``required`` and the node has no MPS control program.
    """
    if want == "no":
        return None, "not wanted"
    if environ.get(PIPE_ENV):
        return None, f"the environment names a running daemon ({PIPE_ENV}={environ[PIPE_ENV]})"
    if (default_pipe / "control").exists():
        return None, f"a daemon of this node listens in {default_pipe}: the trials use it"
    binary = which(MPS_CONTROL)
    if binary is None:
        if want == "required":
            raise RuntimeError(
                f"resources.mps is on, but this node has no {MPS_CONTROL} on PATH (it comes with "
                f"NVIDIA's driver); put it on PATH, or set resources.mps to auto (MPS where a node "
                f"has it) or off"
            )
        return None, f"{NO_CONTROL}: the trials time-slice the GPU"
    return binary, "starting one"


class MpsDaemon:
    """One MPS control daemon with its pipe and log directories under ``root``.

    Args:
        root: a folder of this daemon's own (created; its ``pipe`` and ``log`` inside). Keep its
            path short: the daemon's socket lives in ``root/pipe`` and socket paths are limited
            to about 100 characters.
        binary: the control program.
    """

    def __init__(self, root: Path, binary: str = MPS_CONTROL) -> None:
        self.root, self.binary = Path(root), binary
        self.pipe, self.log = self.root / "pipe", self.root / "log"
        self.running = False

    @property
    def env(self) -> dict[str, str]:
        """The variables a process needs to be the daemon's client (and to talk to it)."""
        return {PIPE_ENV: str(self.pipe), LOG_ENV: str(self.log)}

    def stop_command(self) -> str:
        """The shell command that stops it, for a launcher that was killed before it could."""
        return f"{PIPE_ENV}={shlex.quote(str(self.pipe))} sh -c 'echo quit | {self.binary}'"

    def start(self) -> None:
        """``nvidia-cuda-mps-control -d``, then wait until its control socket exists.

        Raises:
            RuntimeError: the program failed, or no control socket appeared.
        """
        for folder in (self.pipe, self.log):
            folder.mkdir(parents=True, exist_ok=True)
            folder.chmod(0o700)  # the daemon runs work for whoever reaches its pipe
        proc = subprocess.run(
            [self.binary, "-d"],
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=START_SECONDS,
        )
        if proc.returncode != 0:
            said = (proc.stderr or proc.stdout).strip() or f"exit status {proc.returncode}"
            raise RuntimeError(f"{self.binary} -d failed: {said}{self._log_tail()}")
        self.running = True
        deadline = time.monotonic() + START_SECONDS
        while not (self.pipe / "control").exists():
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(
                    f"{self.binary} -d started no daemon: no control socket in {self.pipe} after "
                    f"{START_SECONDS:g} s{self._log_tail()}"
                )
            time.sleep(0.05)

    def stop(self, timeout: float = QUIT_SECONDS) -> str | None:
        """``echo quit | nvidia-cuda-mps-control``: the daemon waits for its clients, then ends.
        Returns None when it quit, else what went wrong (the daemon may still run)."""
        if not self.running:
            return None
        try:
            proc = subprocess.run(
                [self.binary],
                input="quit\n",
                env={**os.environ, **self.env},
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return (
                f"the MPS daemon did not quit within {timeout:g} s (a client process still "
                f"runs?); stop it with: {self.stop_command()}"
            )
        if proc.returncode != 0:
            said = (proc.stderr or proc.stdout).strip() or f"exit status {proc.returncode}"
            return f"quitting the MPS daemon failed: {said}; stop it with: {self.stop_command()}"
        self.running = False
        return None

    def _log_tail(self) -> str:
        try:
            lines = (self.log / "control.log").read_text(errors="replace").splitlines()[-3:]
        except OSError:
            return ""
        return f" (control.log: {' | '.join(lines)})" if lines else ""


def start_daemon(binary: str, parent: str | None = None) -> tuple[MpsDaemon, dict]:
    """Start a daemon in a new temporary folder (under ``parent``, default the system's) and put
    its variables in this process's environment. Returns the daemon and the variables' earlier
    values, for :func:`end_daemon`.

    Raises:
        RuntimeError: the daemon did not start (its folder is removed, the environment unchanged).
    """
    root = Path(tempfile.mkdtemp(prefix="memattn-mps-", dir=parent))
    daemon = MpsDaemon(root, binary)
    try:
        daemon.start()
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(str(exc)) from None
    before = {name: os.environ.get(name) for name in daemon.env}
    os.environ.update(daemon.env)
    return daemon, before


def end_daemon(daemon: MpsDaemon, before: dict, say: Callable[[str], None] = print) -> None:
    """Take the variables back, stop the daemon and remove its folder (kept, with a warning that
    says how to stop the daemon, when it would not quit)."""
    restore_environ(before)
    problem = daemon.stop()
    if problem:
        say(f"warning: {problem}")
    else:
        shutil.rmtree(daemon.root, ignore_errors=True)


@contextmanager
def mps_daemon(binary: str, parent: str | None = None) -> Iterator[MpsDaemon]:
    """:func:`start_daemon` and :func:`end_daemon` around a block, whatever ends it."""
    daemon, before = start_daemon(binary, parent)
    try:
        yield daemon
    finally:
        end_daemon(daemon, before)


def _starts_its_own_ray(address: str | None) -> bool:
    """Whether the launcher will start a local Ray (the Ray whose processes it can put under MPS)."""
    import ray

    return not ray.is_initialized() and choose_address(address).address is None


def without_mps(arranged: bool, gpu_here: bool) -> str:
    """What a sweep that wanted a daemon and got none comes to, for the console: on a machine
    without an NVIDIA GPU, only that (its trials train on the CPU, no GPU time-slices); under
    ``resources.gpu: auto`` (``arranged``) that the plan counted on MPS, and the launch that plans
    without it."""
    if not gpu_here:
        return f"no NVIDIA GPU on this machine: no {NVIDIA_SMI} on PATH"
    if not arranged:
        return "the trials time-slice the GPU"
    return (
        "the trials time-slice the GPU, but the plan's GPU arrangement (resources.gpu auto) "
        "assumed MPS; relaunch with --set resources.mps=off: the plan then costs shared GPUs as "
        "time-sliced (and keeps any fused groups)"
    )


@contextmanager
def mps_for_sweep(
    plan: MpsPlan,
    address: str | None,
    arranged: bool = False,
    which: Callable[[str], str | None] = shutil.which,
) -> Iterator[MpsDaemon | None]:
    """The launcher's MPS: a daemon for the sweep's trials while the block runs, when the sweep
    wants one (``plan``, the launch plan's :func:`~sweeps.plan.mps.plan_mps`), the launcher starts its own Ray (no ``--address``, or
    ``local``) and this machine has MPS (:func:`node_mps`). Ray is stopped before the daemon.
    ``arranged``: the plan chose the GPU arrangement (``resources.gpu: auto``), counting on MPS
    where it shares GPUs; without a daemon the console says so, with the launch that plans
    without it (:func:`without_mps`).

    A sweep with ``resources.mps: on`` on a machine without MPS stops here, before Ray starts,
    with exit status 2 (as a bad ``--output`` does)."""
    if plan.want == "no":
        yield None
        return
    if not _starts_its_own_ray(address):
        print(
            f"MPS: not started by the launcher ({plan.reason}): on a Ray cluster the cluster's "
            "scripts run a daemon on each node (cluster/slurm.sbatch does)"
        )
        yield None
        return
    try:
        binary, why = node_mps(plan.want, os.environ, which)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    gpu_here = which(NVIDIA_SMI) is not None
    if binary is None and not gpu_here and why.startswith(NO_CONTROL):
        print(f"MPS: none started ({without_mps(arranged, gpu_here)})")
        yield None
        return
    if binary is None and why.startswith(NO_CONTROL):
        said = f"MPS: none started ({plan.reason}, but {NO_CONTROL}): "
        said += without_mps(arranged, gpu_here)
        if arranged:  # the arrangement loses what it was chosen for: a warning
            print(f"warning: {said}", file=sys.stderr, flush=True)
        else:
            print(said)
        yield None
        return
    if binary is None:
        print(f"MPS: none started ({plan.reason}, but {why})")
        yield None
        return
    try:
        daemon, before = start_daemon(binary)
    except RuntimeError as exc:  # the daemon did not start: the sweep runs without it
        if plan.want == "required":
            print(f"error: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
        print(
            f"warning: MPS not started ({exc}); {without_mps(arranged, gpu_here)}",
            file=sys.stderr,
        )
        yield None
        return
    print(
        f"MPS: a control daemon for this sweep's trials ({plan.reason}), pipe {daemon.pipe}; if "
        f"the launcher is killed, stop it with: {daemon.stop_command()}",
        flush=True,
    )
    try:
        yield daemon
    finally:
        import ray

        if ray.is_initialized():  # its workers are the daemon's clients: they go first
            ray.shutdown()
        end_daemon(daemon, before, say=lambda line: print(line, file=sys.stderr, flush=True))
        print("MPS: the daemon stopped", flush=True)


# ---------------------------------------------------------------------------------------------
# The command line, for cluster/slurm.sbatch


def _plan_command(spec: str, options: Sequence[str]) -> int:
    """Print ``<want> <reason>`` for the sweep as launch.py loads it with ``options`` (its
    ``--profile``, ``--smoke``, ``--set``, and with ``--resume`` the first run's as the sweep's
    launch.json under ``--output`` records them, as the launcher reads them; the others change
    nothing here)."""

    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--profile")
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--set", dest="overrides", action="append", default=[])
    p.add_argument("--output", default="sweep-results")
    p.add_argument("--resume", action="store_true")
    args, _ = p.parse_known_args(list(options))
    profile = "smoke" if args.smoke else args.profile
    # the sweep file's reader (pydantic) and the plan only here: `run`, around every command,
    # starts in 0.1 s
    from sweeps.errors import LaunchError
    from sweeps.layout import holds_local_sweep
    from sweeps.plan.sweep_plan import build_plan
    from sweeps.spec import SpecError, load_spec
    from sweeps.spec.launch_record import first_launch_plan, resume_launch

    try:
        # a resume keeps its first launch's warm start, as the launcher does
        resumed = Path(args.output).resolve() if args.resume else None
        sweep = load_spec(spec, overrides=args.overrides, profile=profile, resumed=resumed)
        folder = Path(args.output).resolve() / sweep.name
        if args.resume and (sweep.spec.storage.path is not None or holds_local_sweep(folder)):
            # a resubmission may give only --resume and a budget: the first run's --set and
            # profile plan the trials (and so whether they share GPUs), as the launcher reads them
            overrides, profile = resume_launch(folder, args.overrides, profile, spec)
            sweep = load_spec(spec, overrides=overrides, profile=profile, resumed=resumed)
        # the launch's own decision: with resources.gpu auto, the GPU arrangement it chooses
        first = first_launch_plan(Path(args.output).resolve() / sweep.name, args.resume)
        plan = build_plan(sweep, Path(args.output), *first).mps
    except (SpecError, LaunchError) as exc:  # the launcher says it again, and stops the job
        print(f"no (the sweep file did not load: {str(exc).splitlines()[0]})")
        return 0
    print(f"{plan.want} {plan.reason}")
    return 0


#: the exit status when the command cannot be run at all (a shell's, for a command not found)
COMMAND_NOT_RUN = 127


def _cannot_run(command: Sequence[str], exc: OSError) -> str:
    return (
        f"error: cannot run {command[0]!r} ({exc.strerror or exc}): give the command after `--` "
        "as its path, or a name found on PATH"
    )


def _replace_with(command: Sequence[str]) -> int:
    """This process becomes ``command``; a command that cannot be run is said in one line, and its
    status (:data:`COMMAND_NOT_RUN`) returned."""
    try:
        os.execvp(command[0], list(command))
    except OSError as exc:
        print(_cannot_run(command, exc), file=sys.stderr, flush=True)
    return COMMAND_NOT_RUN


def _run_command(want: Want, folder: str, command: Sequence[str]) -> int:
    """Run ``command`` under this node's daemon (started when ``want`` asks and the node can),
    passing SIGTERM, SIGINT, SIGUSR1 and SIGHUP on to it; the daemon stops when it ends. Without
    a daemon the command replaces this process."""
    node = os.uname().nodename
    try:
        binary, why = node_mps(want, os.environ)
    except RuntimeError as exc:
        print(f"error: MPS on {node}: {exc}", file=sys.stderr, flush=True)
        return 1
    if binary is None:
        print(f"MPS on {node}: none started ({why})", flush=True)
        return _replace_with(command)  # nothing to stop afterwards: the command alone
    Path(folder).mkdir(parents=True, exist_ok=True)
    try:
        daemon, before = start_daemon(binary, parent=folder)
    except RuntimeError as exc:
        if want == "required":
            print(f"error: MPS on {node}: {exc}", file=sys.stderr, flush=True)
            return 1
        print(f"warning: MPS on {node} not started ({exc})", file=sys.stderr, flush=True)
        return _replace_with(command)
    print(f"MPS on {node}: a control daemon, pipe {daemon.pipe}", flush=True)
    passed = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGHUP)
    child: subprocess.Popen | None = None
    pending: list[int] = []  # a signal that came before the child existed

    def pass_on(number: int, _frame: object) -> None:
        if child is None:
            pending.append(number)
        else:
            child.send_signal(number)

    previous = {s: signal.signal(s, pass_on) for s in passed}
    try:
        try:
            child = subprocess.Popen(list(command))
        except OSError as exc:
            print(_cannot_run(command, exc), file=sys.stderr, flush=True)
            code = COMMAND_NOT_RUN
        else:
            for number in pending:
                child.send_signal(number)
            code = child.wait()
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        if child is not None and child.poll() is None:  # we are being stopped: the child first
            child.terminate()
            child.wait()
        end_daemon(daemon, before)
    print(f"MPS on {node}: the daemon stopped", flush=True)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sweeps.driver.mps plan SWEEP [launch.py options]`` prints what the sweep wants
    (``no``/``yes``/``required`` and why); ``python -m sweeps.driver.mps run --want W --dir DIR --
    COMMAND...`` runs COMMAND under a daemon of this node (in a new folder under DIR)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["plan"] and len(argv) >= 2 and argv[1] not in ("-h", "--help"):
        return _plan_command(argv[1], argv[2:])
    p = argparse.ArgumentParser(prog="python -m sweeps.driver.mps", description=main.__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    what = "SWEEP [launch.py options]: what the sweep wants of MPS, as its launch plans it"
    usage = "python -m sweeps.driver.mps plan [-h] SWEEP [launch.py options]"
    sub.add_parser("plan", help=what, description=what, usage=usage)
    run = sub.add_parser("run", help="run a command under this node's MPS daemon")
    run.add_argument(
        "--want",
        choices=["no", "yes", "required"],
        required=True,
        help="what `plan` printed: no, COMMAND alone; yes, a daemon where this node has "
        "nvidia-cuda-mps-control and none runs; required, the same or exit 1",
    )
    run.add_argument("--dir", required=True, help="a node-local folder for the daemon's files")
    run.add_argument("cmd", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    args = p.parse_args(argv)
    if args.command == "plan":
        p.error("plan needs the sweep file: plan SWEEP [launch.py options]")
    command = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not command:
        p.error("run needs a command after --")
    return _run_command(args.want, args.dir, command)


if __name__ == "__main__":
    sys.exit(main())
