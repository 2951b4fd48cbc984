"""Shared pytest fixtures. Keep this file generic: other test files add their own fixtures here.

- ``local_ray``: one private local Ray for the test modules that ask for it, started once and
  kept while consecutive modules use it (test_study.py, test_sweep.py, ... run one after another).
- ``quiet_trainer``: a Lightning Trainer on CPU that logs, checkpoints and prints nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import warnings
from pathlib import Path
from typing import Any

import pytest

# every Ray the tests start (local, `ray start`, cluster_utils) without the idle workers Ray starts
# for the first driver, as the launcher's own local Ray (sweeps/driver/cluster.py, init_ray)
os.environ.setdefault("RAY_prestart_worker_first_driver", "0")


@pytest.fixture(scope="session", autouse=True)
def _single_thread_torch():
    """One intra-op thread: the test machine's few cores are shared. (torch is imported in the
    fixtures, where the tests run: under pytest-xdist the controller, which runs none, loads this
    file too, and importing torch there held back the workers' start by ~2 s.)"""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(autouse=True)
def _sigint_as_python_sets_it():
    """Each test starts with Python's own SIGINT handler (KeyboardInterrupt) and ends with the
    handler it began with. A script that starts the suite in the background (`make test &`, no
    job control) hands it SIGINT ignored, and Python keeps it so; Lightning's Trainer, interrupted
    in ``fit``, also sets SIG_IGN and never restores it (lightning/pytorch/trainer/call.py). The
    tests that send a real SIGINT (test_preemption_signals.py, test_wmt_fetch.py) failed there."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    before = signal.getsignal(signal.SIGINT)
    yield
    if signal.getsignal(signal.SIGINT) is not before and before is not None:
        signal.signal(signal.SIGINT, before)


@pytest.fixture(autouse=True)
def _seed_torch():
    """Each test starts from the same torch seed: the CPU generator's, and CUDA's where there is
    CUDA. (Not ``torch.manual_seed``: on a machine without CUDA it also queues the seed for each
    device initialised later, CUDA, XPU and MTIA, keeping the caller's stack each time, ~1.4 ms at
    pytest's depth, for every test.)"""
    import torch

    torch.default_generator.manual_seed(0)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(0)


def pytest_collection_finish(session):
    """The collected suite (torch, Lightning, Ray, every test module: ~0.5 M objects) moves to
    the garbage collector's permanent generation, which its full collections skip: each took
    ~0.26 s in a worker of test-fast, and a worker ran 13-23 of them (4-6 CPU-seconds; 1.6-2.3
    with this, 2-core Intel Xeon VM). Those objects live as long as the session anyway."""
    import gc

    gc.freeze()


def pytest_configure(config):
    """Under pytest-xdist (make test), hand the tests out in the order sorted below rather than
    xdist's own (it would move the multi-test groups ahead of everything else by size).

    Every Ray the suite starts keeps its files in a folder of this test run's (``RAY_TMPDIR``, set
    here unless set already; xdist's workers inherit it), not in /tmp/ray: a test's cluster
    writes its address there, and a sweep launched on the machine meanwhile without --address
    joined it (and died with it); a test's launch would likewise join a user's ``ray start``."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False
    if "RAY_TMPDIR" not in os.environ:  # short: Ray's socket paths have a length limit
        os.environ["RAY_TMPDIR"] = config._ray_tmpdir = tempfile.mkdtemp(prefix="rt", dir="/tmp")


def pytest_unconfigure(config):
    """The test run's Ray folder goes with the run that made it."""
    made = getattr(config, "_ray_tmpdir", None)
    if made:
        shutil.rmtree(made, ignore_errors=True)


# ----------------------------------------------------------------------------------------------
# xdist_group under pytest 9.2


def _groups_file(controller_pid: int) -> Path:
    return Path(tempfile.gettempdir()) / f"pytest-xdist-groups-{controller_pid}.json"


def _record_groups(config, items) -> None:
    """In an xdist worker: each test's xdist_group, for the controller's scheduler
    (:class:`_MarkedGroupScheduling`). pytest-xdist 3.8 names a grouped test ``NODEID@GROUP``
    through ``item._nodeid``, which pytest 9.2 no longer reads (``item.nodeid`` comes from
    ``item._id``): its loadgroup scheduler never sees a group and hands the tests of one group to
    both workers (each then runs the group's module-scoped sweep)."""
    if not hasattr(config, "workerinput") or config.getvalue("dist") != "no":
        return
    groups = {}
    for item in items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                        for m in item.iter_markers("xdist_group")})  # fmt: skip
        if names:
            groups[item.nodeid] = "_".join(names)
    path = _groups_file(os.getppid())  # the controller started this worker
    part = path.with_suffix(f".{os.getpid()}")
    part.write_text(json.dumps(groups))
    part.replace(path)  # whole, whichever worker writes last (they collect the same tests)


# pytest-xdist's hook, optional: a run without xdist (the GPU machine's image) still collects
@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup``: xdist's own scheduler, told each test's group (see
    :func:`_record_groups`)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class _MarkedGroupScheduling(LoadGroupScheduling):
        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:  # read once every worker has collected (and written it)
                path = _groups_file(os.getpid())
                self.groups = json.loads(path.read_text()) if path.exists() else {}
                path.unlink(missing_ok=True)
            return self.groups.get(nodeid) or super()._split_scope(nodeid)

    return _MarkedGroupScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    """The order the tests run in (and, under pytest-xdist, are handed to the two workers in):

    1. the multi-node cluster tests (test_cluster.py, one xdist_group): before any other test
       that starts Ray in this process. Ray 2.60 cannot join a ``ray.cluster_utils.Cluster`` from
       a process that already ran and shut down a local instance: the new GCS takes the old
       driver's exit for its own driver's and kills every actor it creates ("Actor may be already
       destroyed"). The reverse order works.
    2. the tests that do not use the shared ``local_ray``, in their files' order. (Before it, not
       after: in a run that put them after the shared-Ray sweeps, the two tests that send a real
       SIGINT in test_preemption_signals.py and test_wmt_fetch.py failed, SIGINT ignored in that
       worker; which earlier test leaves it so was not found.)
    3. the modules that use the shared ``local_ray``, one after another, so it starts once per
       worker; the xdist groups among them (tests that read one module-scoped sweep) first, so
       the longest units start while the other worker still has tests to take.
    """
    _mark_ray_and_training(items)
    _record_groups(config, items)
    _RAY.modules = {getattr(item, "module", None) for item in items if _uses_shared_ray(item)}
    items.sort(key=_run_order)


def _run_order(item: pytest.Item) -> tuple[int, int]:
    if item.nodeid.startswith("tests/sweeps/driver/test_cluster.py"):
        return 0, 0
    if getattr(item, "module", None) in _RAY.modules:
        return 2, 0 if item.get_closest_marker("xdist_group") else 1
    return 1, 0


#: test modules whose every test starts Ray (a local instance, a `ray start` head or a
#: ray.cluster_utils cluster) and runs sweeps through the launcher
RAY_MODULES = {
    "test_sweep",
    "test_experiment",
    "test_address",
    "test_storage_faults",
    "test_cluster",
    "test_slurm_real",
    "test_budget",
}
#: fixtures that start Ray, or that train models (module-scoped: the first test that uses one pays
#: for all, so every test that uses one is marked)
RAY_FIXTURES = {"local_ray", "cluster", "head", "surfaces", "lost_node"}
TRAINING_FIXTURES = {"copy_ckpts", "wmt_ckpt", "runs", "uninterrupted"}


def _mark_ray_and_training(items) -> None:
    """``ray`` and ``train`` markers, besides those written on the tests themselves, so that
    ``make test-fast`` (``-m "not slow and not ray and not train and not report"``) stays under a
    minute."""
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        module = getattr(getattr(item, "module", None), "__name__", "").rpartition(".")[2]
        if module in RAY_MODULES or fixtures & RAY_FIXTURES:
            item.add_marker(pytest.mark.ray)
        if fixtures & TRAINING_FIXTURES:
            item.add_marker(pytest.mark.train)


# ----------------------------------------------------------------------------------------------
# One local Ray, shared


class _SharedRay:
    """A private local Ray (never another engineer's, never a test cluster), started by the first
    test module that asks for it and kept while the next module asks for it too: starting one
    costs seconds, and the modules that run real sweeps come one after another."""

    #: seconds a module waits for the work the module before it left on the shared Ray to end
    SETTLE_S = 15.0

    def __init__(self) -> None:
        self.env_before: dict[str, str] | None = None
        self.modules: set = set()  # the test modules that use it
        self.last: str | None = None  # the module that used it last

    @property
    def running(self) -> bool:
        return self.env_before is not None

    def start(self, module: str | None = None):
        import ray

        if self.running and (held := self._still_held()):
            # a module that left Ray work running would starve this one for good (a timing batch
            # wants the whole node): said, and this module gets a Ray of its own
            warnings.warn(
                f"the shared Ray still had {held} {self.SETTLE_S:g} s after {self.last} ended: "
                f"started a new one for {module}",
                stacklevel=1,
            )
            self.stop()
        self.last = module
        if not self.running:
            self.env_before = dict(os.environ)
            os.environ.update(
                WANDB_MODE="offline", WANDB_SILENT="true", RAY_USAGE_STATS_ENABLED="0"
            )
            ray.init(
                address="local",
                num_cpus=2,
                include_dashboard=False,
                object_store_memory=80 * 2**20,
                log_to_driver=False,
            )
        return ray

    def _still_held(self) -> str:
        """What the Ray work an earlier module left still holds once :attr:`SETTLE_S` is over
        (CPUs and GPUs in use, the actors alive), or "" once every CPU and GPU is free."""
        import time

        import ray

        total = ray.cluster_resources()
        end = time.monotonic() + self.SETTLE_S
        while True:
            free = ray.available_resources()
            used = {
                key: total[key] - free.get(key, 0.0)
                for key in ("CPU", "GPU")
                if total.get(key, 0.0) - free.get(key, 0.0) > 1e-6
            }
            if not used or time.monotonic() > end:
                break
            time.sleep(0.25)
        if not used:
            return ""
        try:  # (Ray's own table: the state API needs the dashboard, which the tests leave out)
            from ray._private.state import state

            alive = sorted(
                str(actor.get("ActorClassName") or actor.get("Name"))
                for actor in state.actor_table(None).values()
                if actor.get("State") != "DEAD"
            )
        except Exception as exc:  # noqa: BLE001 -- a diagnosis only
            alive = [f"(actor table unreadable: {exc})"]
        held = ", ".join(f"{value:g} {key}" for key, value in used.items())
        return f"{held} held (actors alive: {', '.join(alive) or 'none, so a task holds it'})"

    def stop(self) -> None:
        if not self.running:
            return
        import ray

        ray.shutdown()
        # ray.init and the launcher set variables (RAY_AUTH_MODE, WANDB_MODE...) that would leak
        # into Ray instances later tests start in this process
        os.environ.clear()
        os.environ.update(self.env_before)
        self.env_before = None


_RAY = _SharedRay()


@pytest.fixture(scope="module")
def local_ray(request):
    """The shared local Ray (2 CPUs, W&B offline unless a spec says otherwise). What the module's
    launchers put in the environment (WANDB_MODE...) is taken out again after it, so each module
    starts from the environment the instance started with, whichever module ran before."""
    ray = _RAY.start(request.node.nodeid)
    env = dict(os.environ)
    yield ray
    os.environ.clear()
    os.environ.update(env)


def _uses_shared_ray(item: pytest.Item | None) -> bool:
    # a module that defines a ``local_ray`` of its own starts its own Ray: the shared one must be gone
    return (
        item is not None
        and "local_ray" in getattr(item, "fixturenames", ())
        and getattr(getattr(item, "module", None), "local_ray", local_ray) is local_ray
    )


@pytest.hookimpl(trylast=True)  # after the module's fixtures are torn down
def pytest_runtest_teardown(item, nextitem):
    """Shut the shared Ray down at the end of a module when the next module does not use it."""
    module = getattr(item, "module", None)
    next_module = getattr(nextitem, "module", None)
    if _RAY.running and (
        nextitem is None or (next_module is not module and next_module not in _RAY.modules)
    ):
        _RAY.stop()


def pytest_sessionfinish(session, exitstatus):
    _RAY.stop()  # a run cut short (-x, Ctrl-C) leaves no Ray behind either


# ----------------------------------------------------------------------------------------------
# A quiet Trainer


def _quiet_trainer(**kwargs: Any):
    """``pl.Trainer`` on one CPU device with no logger, no checkpoints, no progress bar and no
    model summary; ``kwargs`` add to or replace these."""
    import lightning.pytorch as pl

    settings: dict[str, Any] = dict(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    settings.update(kwargs)
    return pl.Trainer(**settings)


@pytest.fixture(scope="session")
def quiet_trainer():
    """``quiet_trainer(max_steps=3, ...)``: a Lightning Trainer that logs, saves and prints nothing
    (session-scoped, so module-scoped fixtures can use it too)."""
    return _quiet_trainer
