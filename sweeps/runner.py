"""Turn a validated :class:`~sweeps.spec.Sweep` into Ray Tune runs, and their results into rows.

Without nuisance ``parameters`` the whole grid is one Tune experiment (a ``grid_search`` over the
resolved trial plans), so cells run concurrently. With them, each (cell, seed) is its own Optuna
study -- Optuna's searcher cannot take a grid -- run one after another under
``<storage>/<name>/studies/``, with the Optuna journal on the driver's disk so studies resume.
"""
from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional
from urllib.parse import urlparse

from .spec import Sweep, TrialPlan

def plan_key(plan: TrialPlan) -> str:
    """The trial's label in Tune's tables and W&B: ``attention=memory K=16 seed=0``."""
    return f"{plan.cell.name} seed={plan.seed}"


def plan_space(plans: list[TrialPlan]) -> dict[str, Any]:
    """Every plan under its label; a trial's ``config["cell"]`` picks one. Keeping the plans out of
    the varying parameter keeps Tune's tables and trial folder names short and readable."""
    return {plan_key(p): p.config() for p in plans}


def trial_dirname(trial) -> str:
    label = re.sub(r"[^A-Za-z0-9_.=-]+", "_", str(trial.config.get("cell", "")))[:80]
    return f"{trial.trial_id}_{label}"


class LaunchError(RuntimeError):
    """A problem outside the spec (cluster, credentials, storage): message says what to do."""


# ----------------------------------------------------------------------------------------------
# Ray and W&B set-up


def check_address(address: str, timeout: float = 5.0) -> None:
    """Fail fast with a clear message when a cluster address can't be reached."""
    if address in ("auto", "local"):
        return
    parsed = urlparse(address if "://" in address else f"ray://{address}")
    host, port = parsed.hostname, parsed.port
    if not host or not port:
        raise LaunchError(f"--address {address!r}: expected HOST:PORT, ray://HOST:10001 or auto")
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        raise LaunchError(
            f"cannot reach the Ray cluster at {address} ({exc.strerror or exc}). Is the head node up "
            f"(`ray status` on it), is the port open from here, and is it the GCS port (6379) or the "
            f"Ray Client port (ray://HOST:10001)? Leave out --address to run on a local Ray instance."
        ) from None


def check_ddp_dependencies() -> None:
    """DDP trials run Ray Train V2 inside Tune, which needs the dashboard's state API
    (``ray[default]``): without it the worker placement-group cleaner hangs the sweep."""
    from ray._private.utils import get_dashboard_dependency_error

    err = get_dashboard_dependency_error()
    if err is not None:
        raise LaunchError(
            f"resources.workers > 1 (DDP trials) needs ray[default] on every node, not only ray[tune] "
            f"({err}). Install it with `pip install \"ray[default]=={_ray_version()}\"`, or set resources.workers: 1."
        )


def _ray_version() -> str:
    import ray

    return ray.__version__


def init_ray(
    address: Optional[str], runtime_env: dict[str, Any], num_cpus: Optional[int] = None, dashboard: bool = False
) -> None:
    """Connect to ``address`` or start a local Ray. ``dashboard``: start the local instance with
    its dashboard (Ray Train V2, used by DDP trials, needs it)."""
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if dashboard:
        check_ddp_dependencies()
    if address is not None:
        check_address(address)
    if ray.is_initialized():
        return
    if address is None:
        cpus = num_cpus or os.cpu_count() or 1
        ray.init(
            address="local",  # a new instance, even when a `ray start` cluster runs on this machine
            num_cpus=cpus,
            include_dashboard=dashboard,
            runtime_env=runtime_env,
            object_store_memory=min(2 * 2**30, max(78 * 2**20, cpus * 256 * 2**20)),
            log_to_driver=True,
        )
        return
    try:
        ray.init(address=address, runtime_env=runtime_env)
    except ConnectionError as exc:
        raise LaunchError(
            f"no Ray cluster at {address}: {exc}. Start one (`ray start --head`, see cluster/README.md) "
            f"or leave out --address for a local instance."
        ) from None


# ----------------------------------------------------------------------------------------------
# Clusters: storage every node can reach, and resources the cluster can give


# Filesystems that live on one machine's disk or memory: a storage path on one of them is not seen
# by the other nodes. Anything else (nfs, nfs4, lustre, gpfs, beegfs, cephfs, fuse.* mounts of a
# bucket...) is taken to be shared.
NODE_LOCAL_FILESYSTEMS = frozenset(
    {"ext2", "ext3", "ext4", "xfs", "btrfs", "zfs", "tmpfs", "overlay", "f2fs", "vfat", "ramfs", "apfs"}
)


def filesystem_type(path: str) -> Optional[str]:
    """Type of the filesystem holding ``path`` (from /proc/mounts), or None where unknown."""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return None
    target = Path(path).expanduser().resolve()
    best, best_type = -1, None
    for line in mounts:
        parts = line.split()
        if len(parts) < 3:
            continue
        mount = parts[1].replace("\\040", " ")
        if (target == Path(mount) or Path(mount) in target.parents) and len(mount) > best:
            best, best_type = len(mount), parts[2]
    return best_type


def storage_problem(storage: str, node_hosts: set[str], driver_host: str, fstype: Optional[str]) -> Optional[str]:
    """Why ``storage`` can't hold a sweep on these nodes, or None when it can.

    A local path is fine while every node runs on the driver's host; with nodes on other hosts it
    has to be a shared filesystem (mounted at the same path everywhere) or a bucket.
    """
    if "://" in storage and not storage.startswith("file://"):
        return None
    others = sorted(h for h in node_hosts if h != driver_host)
    if not others:
        return None
    if fstype is None or fstype not in NODE_LOCAL_FILESYSTEMS:
        return None
    return (
        f"storage path {storage} is on this machine's local disk ({fstype}), but the cluster has nodes "
        f"on {len(others)} other host(s) ({', '.join(others[:3])}{', ...' if len(others) > 3 else ''}); "
        f"their checkpoints would not reach it and a trial moved to another node could not resume. "
        f"Set storage.path to a bucket (s3://BUCKET/sweeps, gs://BUCKET/sweeps) or to a shared "
        f"filesystem mounted at the same path on every node, e.g. --set storage.path=/shared/sweeps "
        f"(see cluster/README.md)."
    )


def check_cluster(sweep: Sweep, paths: Paths, address: Optional[str]) -> None:
    """Fit the sweep to the Ray it is connected to; call after :func:`init_ray`.

    - storage: fails with :class:`LaunchError` when a multi-host cluster can't share it;
    - no GPU on a local machine: trials fall back to CPU (``resources.gpu`` set to 0);
      on a cluster without GPUs a warning only (an autoscaler may still add GPU nodes);
    - DDP trials: Tune sees only each trial's driver, so unless the spec caps it,
      ``max_concurrent_trials`` is set to what the cluster's CPUs and GPUs hold at once.
    """
    import ray

    if not (address or "").startswith("ray://"):  # through Ray Client, Tune runs on the head, not here
        alive = [n for n in ray.nodes() if n.get("Alive")]
        hosts = {n["NodeManagerAddress"] for n in alive}
        driver_node = ray.get_runtime_context().get_node_id()
        driver_host = next((n["NodeManagerAddress"] for n in alive if n["NodeID"] == driver_node), "")
        local_path = paths.storage.removeprefix("file://")
        problem = storage_problem(paths.storage, hosts, driver_host, filesystem_type(local_path))
        if problem:
            raise LaunchError(problem)

    r = sweep.spec.resources
    total = ray.cluster_resources()
    gpus = float(total.get("GPU", 0))
    if r.gpu and not gpus:
        if address is None:
            print(f"no GPU visible: trials run on CPU (resources.gpu {r.gpu:g} -> 0)")
            r.gpu = 0.0
        else:
            print(
                f"warning: the cluster has no GPU now; trials asking for resources.gpu={r.gpu:g} wait "
                f"until GPU nodes join (an autoscaler adds them), or run with --set resources.gpu=0"
            )
    if r.workers > 1 and sweep.spec.max_concurrent_trials is None:
        per_trial_cpu = 1 + r.workers * r.cpu  # the trial's driver + its workers
        fits = int(float(total.get("CPU", 0)) // per_trial_cpu)
        if r.gpu and gpus:
            fits = min(fits, int(gpus // (r.workers * r.gpu)))
        sweep.spec.max_concurrent_trials = max(1, fits)
        print(
            f"DDP trials ({r.workers} workers each): at most {sweep.spec.max_concurrent_trials} at a time on "
            f"this cluster (set max_concurrent_trials to change it, e.g. on an autoscaling cluster)"
        )


def wandb_has_credentials() -> bool:
    """True when W&B can go online: an API key in the environment or in W&B's own login (netrc)."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        import netrc

        host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname
        return netrc.netrc().authenticators(host) is not None
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False


def resolve_wandb_mode(mode: str) -> str:
    env = os.environ.get("WANDB_MODE")
    if env in ("offline", "disabled", "online") and mode == "auto":
        return env
    if mode == "auto":
        return "online" if wandb_has_credentials() else "offline"
    if mode == "online" and not wandb_has_credentials():
        raise LaunchError(
            "wandb.mode is online but no W&B credentials were found: `export WANDB_API_KEY=...` or "
            "`wandb login` (never put the key in the sweep file), or use wandb.mode: offline"
        )
    return mode


# ----------------------------------------------------------------------------------------------
# Tune


@dataclass
class Paths:
    output: Path  # local folder for results, W&B files and the Optuna journal
    storage: str  # Ray Tune storage root (local path or s3:// gs://)

    def experiment(self, name: str) -> str:
        return self.storage.rstrip("/") + "/" + name


def sweep_settings(sweep: Sweep, paths: Paths, wandb_mode: str) -> dict[str, Any]:
    spec = sweep.spec
    out = paths.output / sweep.name
    return {
        "name": sweep.name,
        "has_search": sweep.has_search,
        "resources": spec.resources.model_dump(),
        "wandb": {**spec.wandb.model_dump(), "mode": wandb_mode},
        "wandb_dir": str(out),
        "chaos_step": spec.chaos.fail_once_at_step,
        "chaos_dir": str(out / "chaos"),
        "metric": spec.metric.name,
        # DDP trials: Ray Train run folders (train-<trial id>), where a retried trial finds its checkpoints
        "train_storage": paths.experiment(sweep.name) + "/ddp",
        "keep_checkpoints": spec.storage.keep_checkpoints,
    }


def trial_resources(sweep: Sweep) -> dict[str, float]:
    """What Tune reserves per trial: ``cpu`` and a (fractional) ``gpu``. For DDP trials
    (``workers`` > 1) only the trial's driver, one CPU: Ray Train V2 reserves the workers in a
    placement group of its own (a bundle per worker, see :mod:`sweeps.ddp`), so reserving them
    here as well would hold every worker's resources twice."""
    r = sweep.spec.resources
    if r.workers > 1:
        return {"cpu": 1}
    res = {"cpu": r.cpu}
    if r.gpu:
        res["gpu"] = r.gpu
    return res


def make_scheduler(sweep: Sweep, with_metric: bool = False):
    """FIFO or ASHA. ``with_metric``: give ASHA the metric itself (when an Optuna searcher, not
    ``TuneConfig``, holds it: Tune refuses the metric in two places)."""
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler

    et = sweep.spec.early_terminate
    if et.type == "asha":
        max_t = et.max_t or max(et.grace_period, _reports_per_trial(sweep))
        metric = {"metric": sweep.spec.metric.name, "mode": sweep.spec.metric.mode} if with_metric else {}
        return ASHAScheduler(
            **metric,
            time_attr="training_iteration",
            max_t=max_t,
            grace_period=min(et.grace_period, max_t),
            reduction_factor=et.reduction_factor,
        )
    return FIFOScheduler()


def _reports_per_trial(sweep: Sweep) -> int:
    t = sweep.spec.trainer
    if isinstance(t.val_check_interval, int) and t.val_check_interval > 0:
        return max(1, t.max_steps // t.val_check_interval)
    return 100


def make_run_config(sweep: Sweep, paths: Paths, name: str, verbose: int):
    from ray import tune

    spec = sweep.spec
    return tune.RunConfig(
        name=name,
        storage_path=paths.storage,
        failure_config=tune.FailureConfig(max_failures=spec.failure.max_failures),
        checkpoint_config=tune.CheckpointConfig(num_to_keep=spec.storage.keep_checkpoints),
        verbose=verbose,
    )


def optuna_space(sweep: Sweep) -> dict[str, Any]:
    import optuna.distributions as od

    space = {}
    for key, p in sweep.spec.parameters.items():
        dist = p.resolved_distribution()
        if dist == "categorical":
            space[key] = od.CategoricalDistribution(p.values)
        elif dist == "int_uniform":
            space[key] = od.IntDistribution(int(p.min), int(p.max))
        elif dist == "log_uniform_values":
            space[key] = od.FloatDistribution(p.min, p.max, log=True)
        else:
            space[key] = od.FloatDistribution(p.min, p.max)
    return space


def run_tune(sweep: Sweep, paths: Paths, settings: dict[str, Any], resume: bool, verbose: int = 1) -> list:
    """Run (or resume) every Tune experiment of the sweep; returns ``[(plan_or_None, ResultGrid)]``."""
    from ray import tune

    from .trial import run_trial

    spec = sweep.spec
    trainable = tune.with_resources(run_trial, trial_resources(sweep))
    outcomes = []
    if not sweep.has_search:
        name = sweep.name
        param_space = {
            "cell": tune.grid_search([plan_key(p) for p in sweep.plans]),
            "plans": plan_space(sweep.plans),
            "sweep": settings,
        }
        tuner = _tuner_or_restore(
            paths.experiment(name), resume, trainable, param_space,
            tune.TuneConfig(
                metric=spec.metric.name,
                mode=spec.metric.mode,
                scheduler=make_scheduler(sweep),
                max_concurrent_trials=spec.max_concurrent_trials,
                trial_dirname_creator=trial_dirname,
            ),
            make_run_config(sweep, paths, name, verbose),
        )
        outcomes.append((None, _fit(tuner, paths.experiment(name), trainable)))
        return outcomes

    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend
    from ray.tune.search.optuna import OptunaSearch

    journal = paths.output / sweep.name / "optuna.journal"
    journal.parent.mkdir(parents=True, exist_ok=True)
    storage = JournalStorage(JournalFileBackend(str(journal)))
    for plan in sweep.plans:
        study = f"{plan.cell.slug}-seed{plan.seed}"
        name = f"{sweep.name}/studies/{study}"
        sampler = (
            optuna.samplers.TPESampler(seed=spec.search.seed + plan.seed)
            if spec.search.sampler == "tpe"
            else optuna.samplers.RandomSampler(seed=spec.search.seed + plan.seed)
        )
        searcher = OptunaSearch(
            space=optuna_space(sweep),
            metric=spec.metric.name,
            mode=spec.metric.mode,
            sampler=sampler,
            study_name=f"{sweep.name}/{study}",
            storage=storage,
        )
        tuner = _tuner_or_restore(
            paths.experiment(name), resume, trainable,
            {"cell": plan_key(plan), "plans": plan_space([plan]), "sweep": settings},
            tune.TuneConfig(
                search_alg=searcher,
                scheduler=make_scheduler(sweep, with_metric=True),
                num_samples=spec.num_samples,
                max_concurrent_trials=spec.max_concurrent_trials,
                trial_dirname_creator=trial_dirname,
            ),
            make_run_config(sweep, paths, name, verbose),
        )
        outcomes.append((plan, _fit(tuner, paths.experiment(name), trainable)))
    return outcomes


def _fit(tuner, path: str, trainable):
    """Run the experiment, then read its results back from storage: after a SIGINT, Tune returns
    normally and only the saved state says which trials are unfinished (PENDING)."""
    from ray import tune

    tuner.fit()
    return tune.Tuner.restore(path, trainable=trainable).get_results()


def _tuner_or_restore(path: str, resume: bool, trainable, param_space, tune_config, run_config):
    from ray import tune

    if resume and tune.Tuner.can_restore(path):
        print(f"resuming {path}: finished trials are kept, unfinished and errored ones continue from their checkpoints")
        return tune.Tuner.restore(path, trainable=trainable, resume_unfinished=True, resume_errored=True, param_space=param_space)
    if not resume and _exists(path):
        raise LaunchError(
            f"{path} already holds a sweep of this name. Continue it with --resume, or pick another "
            f"--output (or storage.path), or delete the folder to start again."
        )
    return tune.Tuner(trainable, param_space=param_space, tune_config=tune_config, run_config=run_config)


def _exists(path: str) -> bool:
    if "://" in path:
        from ray import tune

        return tune.Tuner.can_restore(path)
    return Path(path).exists() and any(Path(path).iterdir())


def wandb_sync_hint(out_dir: Path) -> Optional[str]:
    runs = sorted((out_dir / "wandb").glob("offline-run-*"))
    if not runs:
        return None
    return f"wandb sync --include-offline {out_dir / 'wandb'}/offline-run-*"
