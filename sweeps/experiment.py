"""The Tune experiment of a study: the param space, the trainable (single-process or DDP), the
scheduler, and running or resuming it.

Without nuisance ``parameters`` the whole grid is one Tune experiment (a ``grid_search`` over the
resolved trial plans), so cells run concurrently. With them, each (cell, seed) is its own Optuna
study -- Optuna's searcher cannot take a grid -- run one after another under
``<storage>/<name>/studies/``, with the Optuna journal on the driver's disk so studies resume.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from .cluster import ClusterFit, LaunchError, Paths
from .settings import Resources, TrialSettings, WandbSettings
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


def make_settings(sweep: Sweep, paths: Paths, wandb_mode: str, fit: ClusterFit) -> TrialSettings:
    spec = sweep.spec
    out = paths.output / sweep.name
    wb = spec.wandb
    return TrialSettings(
        name=sweep.name,
        metric=spec.metric.name,
        resources=Resources(cpu=spec.resources.cpu, gpu=fit.gpu, workers=spec.resources.workers),
        wandb=WandbSettings(
            project=wb.project, entity=wb.entity, group=wb.group, tags=tuple(wb.tags),
            mode=wandb_mode, log_heatmaps=wb.log_heatmaps,
        ),
        wandb_dir=str(out),
        chaos_dir=str(out / "chaos"),
        # DDP trials: Ray Train run folders (train-<trial id>), where a retried trial finds its checkpoints
        train_storage=paths.experiment(sweep.name) + "/ddp",
        keep_checkpoints=spec.storage.keep_checkpoints,
        chaos_step=spec.chaos.fail_once_at_step,
        chaos_before_report=spec.chaos.fail_before_first_report,
        has_search=sweep.has_search,
    )


def trial_resources(settings: TrialSettings) -> dict[str, float]:
    """What Tune reserves per trial: ``cpu`` and a (fractional) ``gpu``. For DDP trials
    (``workers`` > 1) only the trial's driver, one CPU: Ray Train V2 reserves the workers in a
    placement group of its own (a bundle per worker, see :mod:`sweeps.ddp`), so reserving them
    here as well would hold every worker's resources twice."""
    r = settings.resources
    if r.workers > 1:
        return {"cpu": 1}
    res = {"cpu": r.cpu}
    if r.gpu:
        res["gpu"] = r.gpu
    return res


def make_trainable(settings: TrialSettings):
    """The trainable this study's trials run: single-process or DDP, with its resources and the
    study-wide settings bound (stored once in Ray's object store, not in every trial's config)."""
    from ray import tune

    if settings.resources.workers > 1:
        from .ddp import run_ddp_trial as fn
    else:
        from .trial import run_trial as fn
    return tune.with_resources(tune.with_parameters(fn, settings=settings), trial_resources(settings))


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


def run_tune(sweep: Sweep, paths: Paths, settings: TrialSettings, fit: ClusterFit, resume: bool, verbose: int = 1) -> list:
    """Run (or resume) every Tune experiment of the sweep; returns ``[(plan_or_None, ResultGrid)]``."""
    from ray import tune

    spec = sweep.spec
    trainable = make_trainable(settings)
    outcomes = []
    if not sweep.has_search:
        name = sweep.name
        param_space = {
            "cell": tune.grid_search([plan_key(p) for p in sweep.plans]),
            "plans": plan_space(sweep.plans),
        }
        tuner = _tuner_or_restore(
            paths.experiment(name), resume, trainable, param_space,
            tune.TuneConfig(
                metric=spec.metric.name,
                mode=spec.metric.mode,
                scheduler=make_scheduler(sweep),
                max_concurrent_trials=fit.max_concurrent_trials,
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
            {"cell": plan_key(plan), "plans": plan_space([plan])},
            tune.TuneConfig(
                search_alg=searcher,
                scheduler=make_scheduler(sweep, with_metric=True),
                num_samples=spec.num_samples,
                max_concurrent_trials=fit.max_concurrent_trials,
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


