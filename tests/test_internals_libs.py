"""Lightning's, torch's, Optuna's, sacrebleu's and Python's internals the project relies on
(docs/internals.md), checked against the installed libraries in seconds: a failure names the
library, its installed version and the version the code was written against. Ray's are in
tests/test_internals_ray.py; W&B's and the list itself in tests/test_internals.py."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

import pytest
from internals_check import internal, source

# ---- Lightning ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_fit(tmp_path_factory):
    """Two training steps of a one-layer model on the project's resumable loader (CPU, quiet),
    then a checkpoint and a SystemExit(0) from a callback, as Tune stops a trial. Returns (the
    SystemExit or None, the checkpoint's dict, the Trainer)."""
    pl = pytest.importorskip("lightning.pytorch")
    import torch
    from torch.utils.data import TensorDataset

    from datamodules.resumable import ResumableDataLoader

    class Tiny(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).sum()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    class StopAfterTwo(pl.Callback):  # as the project's report callback stops a trial
        def on_train_batch_end(self, trainer, *args) -> None:
            if trainer.global_step == 2:
                trainer.save_checkpoint(tmp / "at2.ckpt")
                raise SystemExit(0)

    tmp = tmp_path_factory.mktemp("tiny_fit")
    loader = ResumableDataLoader(TensorDataset(torch.randn(16, 2)), batch_size=2)
    trainer = pl.Trainer(
        accelerator="cpu",
        max_steps=10,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        use_distributed_sampler=False,
        default_root_dir=tmp,
        callbacks=[StopAfterTwo()],
    )
    stop = None
    try:
        trainer.fit(Tiny(), train_dataloaders=loader)
    except SystemExit as exc:
        stop = exc
    return stop, torch.load(tmp / "at2.ckpt", weights_only=False), trainer


@internal(
    "lightning-system-exit",
    "lightning",
    "sweeps/trial/fitting.py (fit_trial), sweeps/trial/callbacks.py",
)
def test_a_system_exit_inside_fit_leaves_fit_as_it_came(tiny_fit):
    stop, _, _ = tiny_fit
    assert isinstance(stop, SystemExit) and stop.code == 0, f"trainer.fit turned it into {stop!r}"


@internal(
    "lightning-stateful-loader", "lightning", "datamodules/resumable.py (ResumableDataLoader)"
)
def test_the_fit_loop_saves_the_loaders_state_and_draws_no_batch_ahead(tiny_fit):
    _, ckpt, _ = tiny_fit
    states = ckpt["loops"]["fit_loop"]["state_dict"].get("combined_loader")
    # two steps trained, the third batch not drawn yet: Lightning fetched nothing ahead
    assert states == [{"epoch": 0, "batches": 2}], f"the checkpoint holds {states}"
    from lightning.pytorch.loops.fit_loop import _FitLoop

    assert "_load_state_dicts(" in source(_FitLoop), "the loader's state is not loaded on resume"


@internal(
    "lightning-loop-progress",
    "lightning",
    "datamodules/resumable.py (_start_the_next_epoch_whole)",
)
def test_the_epoch_loop_keeps_a_finished_epochs_batch_count_and_resets_it_as_the_project_does(
    tiny_fit,
):
    """The counters the project reads and zeroes exist, and Lightning's own reset still zeroes
    them for the during-fit case only (the case the project completes)."""
    _, _, trainer = tiny_fit
    fit = trainer.fit_loop
    loop = fit.epoch_loop
    for counts in (fit.epoch_progress.total, loop.batch_progress.current):
        assert all(hasattr(counts, n) for n in ("ready", "completed")), counts
    for progress in (
        loop.batch_progress,
        loop.scheduler_progress,
        loop.automatic_optimization.optim_progress,
    ):
        assert callable(progress.reset_on_run), progress
    assert callable(loop.val_loop.batch_progress.total.reset)
    from lightning.pytorch.loops.training_epoch_loop import _TrainingEpochLoop

    body = source(_TrainingEpochLoop.reset)
    assert "if self.restarted_on_train_batch_end:" in body and "reset_on_run()" in body


@internal("lightning-sampler-epoch", "lightning", "datamodules/resumable.py (_epoch_holders)")
def test_lightning_sets_the_epoch_on_the_sampler_and_the_batch_samplers_sampler():
    pytest.importorskip("lightning")
    from lightning.fabric.utilities.data import _set_sampler_epoch

    body = source(_set_sampler_epoch)
    assert 'getattr(dataloader, "sampler", None)' in body
    assert 'getattr(batch_sampler, "sampler", None)' in body


@internal("lightning-accelerator-connector", "lightning", "datamodules/wmt17.py (_check_trainer)")
def test_the_trainer_says_whether_it_will_replace_the_sampler(tiny_fit):
    _, _, trainer = tiny_fit
    assert trainer._accelerator_connector.use_distributed_sampler is False


@internal(
    "lightning-restricted-classmethod",
    "lightning",
    "datamodules/checkpoint_files.py (LoadsCheckpointFiles)",
)
def test_load_from_checkpoint_gives_the_undecorated_method_as_its_func():
    pl = pytest.importorskip("lightning.pytorch")

    for cls in (pl.LightningModule, pl.LightningDataModule):
        method = cls.__dict__["load_from_checkpoint"].__func__
        assert cls.load_from_checkpoint.__func__ is method, cls
        assert list(inspect.signature(method).parameters)[:2] == ["cls", "checkpoint_path"], cls


@internal("lightning-wandb-init", "lightning", "sweeps/trial/wandb_logger.py (lightning_logger)")
def test_the_wandb_loggers_init_arguments_are_a_dict_it_passes_to_wandb_init(tmp_path):
    pytest.importorskip("wandb")
    from lightning.pytorch.loggers import WandbLogger

    logger = WandbLogger(project="p", save_dir=str(tmp_path), offline=True)
    assert isinstance(logger._wandb_init, dict) and logger._wandb_init["project"] == "p"
    assert "anonymous" in logger._wandb_init, "the key the project removes is no longer set"
    assert "wandb.init(**self._wandb_init)" in source(WandbLogger.experiment.fget)


@internal("lightning-wandb-steps", "lightning", "sweeps/trial/wandb_run.py (MemberRun)")
def test_the_wandb_logger_still_steps_every_metric_by_trainer_global_step():
    from lightning.pytorch.loggers import WandbLogger

    opened = source(WandbLogger.experiment.fget)
    assert 'define_metric("trainer/global_step")' in opened, "WandbLogger's x-axis metric moved"
    assert 'define_metric("*", step_metric="trainer/global_step", step_sync=True)' in opened, (
        "WandbLogger no longer steps every metric by trainer/global_step"
    )
    assert '"trainer/global_step": step' in source(WandbLogger.log_metrics), (
        "WandbLogger.log_metrics no longer writes the step into the row"
    )


@internal("lightning-short-epoch-warning", "lightning", "sweeps/trial/lifecycle.py (quiet_logs)")
def test_an_epoch_shorter_than_the_logging_interval_is_not_warned_about_in_a_trial():
    """The warning's words are read from Lightning's source: a change of them fails here rather
    than the filter missing it."""
    import inspect
    import re
    import warnings

    from lightning.pytorch.loops import fit_loop
    from lightning.pytorch.utilities.warnings import PossibleUserWarning

    from sweeps.trial.lifecycle import quiet_logs

    (said,) = re.findall(
        r'f"(The number of training batches \(\{self\.max_batches\}\)[^"]*)"',
        inspect.getsource(fit_loop),
    )
    message = said.replace("{self.max_batches}", "19")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_logs()
        warnings.warn(message, PossibleUserWarning, stacklevel=1)
        warnings.warn("The number of validation batches is odd", PossibleUserWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["The number of validation batches is odd"]


@internal(
    "lightning-eval-log-step", "lightning", "sweeps/trial/wandb_run.py (log_reported_training)"
)
def test_a_reports_training_loss_is_logged_at_the_step_of_its_validation(tmp_path):
    """Lightning logs a validation's metrics at the step before global_step (the last batch's
    index); log_reported_training puts the reported training loss there, beside them."""
    import csv

    pl = pytest.importorskip("lightning.pytorch")
    from lightning.pytorch.loggers import CSVLogger

    from datamodules import CopyTaskDataModule
    from lightning_modules import Seq2SeqModule
    from sweeps.trial.wandb_run import log_reported_training

    class Report(pl.Callback):
        def on_validation_end(self, trainer, module) -> None:
            if not trainer.sanity_checking:
                metrics = {"train/loss": float(trainer.callback_metrics["train/loss"])}
                log_reported_training(trainer.loggers, metrics, trainer.global_step)

    dm = CopyTaskDataModule(vocab_size=6, max_length=4, train_size=32, val_size=8, batch_size=8)
    model = Seq2SeqModule(dm.src_vocab_size, dm.tgt_vocab_size, attention="none", preset="tiny")
    pl.Trainer(
        max_steps=4, val_check_interval=2, logger=CSVLogger(tmp_path), callbacks=[Report()],
        log_every_n_steps=50, enable_progress_bar=False, enable_model_summary=False,
        enable_checkpointing=False, accelerator="cpu",
    ).fit(model, datamodule=dm)  # fmt: skip
    (metrics,) = tmp_path.glob("**/metrics.csv")
    rows = list(csv.DictReader(metrics.open()))
    validated = [r["step"] for r in rows if r.get("val/bleu")]
    reported = [r["step"] for r in rows if r.get("train/loss")]
    assert validated == ["1", "3"] and reported == validated, (validated, reported)


@internal(
    "lightning-cpu-float16",
    "lightning",
    "sweeps/spec/gpu.py (FLOAT16_MIXED), sweeps/trial/fitting.py (check_cpu_precision)",
)
def test_a_cpu_trainer_trains_float16_mixed_precision_as_bf16_mixed():
    pl = pytest.importorskip("lightning.pytorch")

    for asked in ("16-mixed", "16"):
        trainer = pl.Trainer(
            accelerator="cpu", devices=1, precision=asked, logger=False,
            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        )  # fmt: skip
        assert trainer.precision == "bf16-mixed", (asked, trainer.precision)


@internal("lightning-logger-names", "lightning", "sweeps/trial/lifecycle.py (QUIET_LOGGERS)")
def test_lightnings_banners_come_from_the_loggers_the_code_quiets():
    import importlib

    from sweeps.trial.lifecycle import QUIET_LOGGERS

    for name in (n for n in QUIET_LOGGERS if n.startswith("lightning.")):
        assert "rank_zero_module.log = logging.getLogger(__name__)" in source(
            importlib.import_module(name)
        ), f"{name} no longer logs the rank-zero banners"


# ---- torch --------------------------------------------------------------------------------------


@internal(
    "torch-index-sampler", "torch", "datamodules/resumable.py (ResumableDataLoader._index_sampler)"
)
def test_a_loaders_iterator_takes_its_batches_from_the_index_sampler():
    import torch
    from torch.utils.data import TensorDataset
    from torch.utils.data.dataloader import _BaseDataLoaderIter

    from datamodules.resumable import ResumableDataLoader

    assert "loader._index_sampler" in source(_BaseDataLoaderIter.__init__)
    assert "iter(self._index_sampler)" in source(_BaseDataLoaderIter._reset), (
        "a persistent iterator no longer iterates its own index sampler again each epoch"
    )
    loader = ResumableDataLoader(TensorDataset(torch.arange(8.0)), batch_size=2)
    loader.load_state_dict({"epoch": 0, "batches": 3})
    assert len(list(loader)) == 1, "the overridden _index_sampler did not skip the batches"
    assert len(list(loader)) == 4, "the epoch after the resumed one skipped batches too"


# ---- Optuna -------------------------------------------------------------------------------------


@internal("optuna-skipped-tell", "optuna", "sweeps/driver/console.py (OPTUNA_TELL_LOGGER)")
def test_optunas_line_for_a_trial_told_twice_comes_from_its_tell_modules_logger():
    import importlib

    from sweeps.driver.console import OPTUNA_SKIPPED, OPTUNA_TELL_LOGGER

    module = importlib.import_module(OPTUNA_TELL_LOGGER)
    assert "get_logger(__name__)" in source(module), "Optuna's tell logs under another name"
    assert f'f"{OPTUNA_SKIPPED} {{' in source(module), "Optuna's tell says it otherwise"


@pytest.fixture
def journal_study(tmp_path):
    optuna = pytest.importorskip("optuna")
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    path = tmp_path / "optuna.journal"
    storage = JournalStorage(JournalFileBackend(str(path)))
    return optuna.create_study(study_name="s/u", storage=storage), storage, path


@internal(
    "optuna-trial-id",
    "optuna",
    "sweeps/search/per_unit.py, over_seeds.py, moo.py, journal.py",
)
def test_a_trial_knows_its_storage_id(journal_study):
    study, storage, _ = journal_study
    trial = study.ask({})
    assert isinstance(trial._trial_id, int)
    assert storage.get_trial(trial._trial_id).number == trial.number
    assert study.trials[0]._trial_id == trial._trial_id


@internal(
    "optuna-storage-calls",
    "optuna",
    "sweeps/search/journal.py (per_unit.py, over_seeds.py, moo.py)",
)
def test_the_storage_records_values_by_trial_id_and_refuses_a_finished_trial(journal_study):
    study, storage, _ = journal_study
    trial = study.ask({})
    storage.set_trial_intermediate_value(trial._trial_id, 3, 0.5)
    storage.set_trial_user_attr(trial._trial_id, "ray_trial_id", "abc")
    frozen = storage.get_trial(trial._trial_id)
    assert frozen.intermediate_values == {3: 0.5} and frozen.user_attrs["ray_trial_id"] == "abc"
    study.tell(trial, 1.0)
    with pytest.raises(RuntimeError):  # what the searcher catches: "already finished"
        storage.set_trial_user_attr(trial._trial_id, "late", 1)


@internal("optuna-distribution-contains", "optuna", "sweeps/plan/warm_start.py (fits)")
def test_a_distribution_says_whether_a_value_is_inside_it():
    pytest.importorskip("optuna")
    from optuna.distributions import CategoricalDistribution, FloatDistribution

    space = FloatDistribution(0.001, 0.1, log=True)
    assert space._contains(space.to_internal_repr(0.01)) and not space._contains(0.5)
    choice = CategoricalDistribution(["a", "b"])
    assert choice._contains(choice.to_internal_repr("b"))


@internal("optuna-journal-lines", "optuna", "sweeps/driver/resume_check.py (repair_journal)")
def test_every_journal_line_is_a_json_record_with_an_op_code(journal_study):
    study, _, path = journal_study
    study.tell(study.ask({}), 1.0)
    lines = path.read_bytes().splitlines()
    assert lines and all("op_code" in json.loads(line) for line in lines)


@internal("optuna-journal-cut-line", "optuna", "sweeps/plan/warm_start.py (plan_warm_start)")
def test_a_journal_whose_last_line_is_cut_short_is_read_without_it(journal_study):
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    study, _, path = journal_study
    for value in (1.0, 2.0):
        study.tell(study.ask({}), value)
    path.write_bytes(path.read_bytes()[:-10])  # the last record (the second tell) cut short
    again = optuna.load_study(
        study_name="s/u", storage=JournalStorage(JournalFileBackend(str(path)))
    )
    states = [t.state for t in again.trials]
    assert states == [optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.RUNNING], states


# ---- sacrebleu ----------------------------------------------------------------------------------


@internal("sacrebleu-paired-bootstrap", "sacrebleu", "sweeps/report/stats.py (paired_bootstrap)")
def test_the_difference_is_resampled_with_the_paired_tests_own_draws():
    pytest.importorskip("sacrebleu")
    import numpy as np
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    refs = [f"the cat {i} sat on the mat {i % 3}" for i in range(30)]
    base = [r if i % 3 else r.replace("cat", "dog") for i, r in enumerate(refs)]
    system = [r if i % 4 else r.replace("mat", "rug") for i, r in enumerate(refs)]
    metric, n = BLEU(tokenize="none"), 200
    test = PairedTest(
        [("baseline", base), ("system", system)],
        {"BLEU": metric},
        [refs],
        test_type="bs",
        n_samples=n,
    )
    _, scores = test()
    idx = np.random.default_rng(test._seed).choice(len(system), size=(n, len(system)), replace=True)
    stats = np.array(metric._extract_corpus_statistics(system, [refs]), dtype="float64")
    ours = np.mean([metric._compute_score_from_stats(stats[i].sum(0)).score for i in idx])
    assert abs(ours - scores["BLEU"][1].mean) < 1e-6, (
        f"resampled mean {ours} is not the paired test's {scores['BLEU'][1].mean}: its draws changed"
    )


# ---- Python -------------------------------------------------------------------------------------


@internal("python-run-exitfuncs", "python", "sweeps/launch.py (exit_quickly)")
def test_the_exit_handlers_can_be_run_before_os_exit():
    code = "import atexit, os; atexit.register(print, 'ran'); atexit._run_exitfuncs(); os._exit(0)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["ran"], done.stderr


# ---- pytest-xdist ---------------------------------------------------------------------------------


@internal(
    "xdist-group-scope",
    "pytest-xdist",
    "tests/conftest.py (pytest_xdist_make_scheduler, _record_groups)",
)
def test_loadgroup_scheduling_asks_split_scope_for_each_tests_scope():
    """conftest's scheduler overrides ``_split_scope``: the scope (the group) of each test must
    still come from it, or the groups silently stop holding (each sweep then runs per worker)."""
    from xdist.scheduler import LoadGroupScheduling
    from xdist.scheduler.loadscope import LoadScopeScheduling

    assert issubclass(LoadGroupScheduling, LoadScopeScheduling)
    assert "self._split_scope(nodeid)" in source(LoadScopeScheduling)
    assert LoadGroupScheduling._split_scope(None, "a.py::t@g") == "g"  # (self unused)
