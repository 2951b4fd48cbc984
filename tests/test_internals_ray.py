"""Ray's internals the project relies on (docs/internals.md, "Ray"), checked against the installed
Ray without starting it: the classes, attributes and texts are read from Ray's own modules and
binaries. A check that fails names the internal, Ray's version and the file that uses it."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from internals_check import internal, source, strings_in  # noqa: E402
from ray.tune.execution.tune_controller import TuneController  # noqa: E402
from ray.tune.experiment import Trial  # noqa: E402
from sweep_helpers import stub_trial  # noqa: E402


@internal("ray-movable-trial", "ray", "sweeps/schedulers/lost_nodes.py (MovableTrial, adopt)")
def test_a_trial_can_become_a_movable_trial_that_decides_its_own_failures():
    from sweeps.schedulers.lost_nodes import MovableTrial, adopt

    trial = stub_trial()
    adopt(trial)  # the class of a live object is swapped: Trial must keep no __slots__
    assert type(trial) is MovableTrial, "Trial's class could not be swapped"
    for name in ("last_result", "num_failures", "max_failures", "run_metadata", "should_recover"):
        assert hasattr(trial, name), f"Trial.{name} is gone"
    manager = trial.run_metadata.checkpoint_manager
    assert hasattr(manager, "latest_checkpoint_result"), (
        "no checkpoint_manager.latest_checkpoint_result"
    )
    assert callable(trial.invalidate_json_state) and callable(trial.run_metadata.invalidate_cache)
    # Tune counts the failure in handle_error, then asks should_recover: the override comes first
    body = source(TuneController._process_trial_failure)
    assert "trial.handle_error(" in body and "should_recover()" in body, (
        "TuneController._process_trial_failure no longer calls trial.handle_error, then should_recover"
    )
    assert body.index("trial.handle_error(") < body.index("should_recover()")


@internal(
    "ray-node-died-text",
    "ray",
    "sweeps/schedulers/lost_nodes.py (node_loss: _NODE_DIED, _NODE_END)",
)
def test_the_lost_node_patterns_match_the_words_rays_gcs_writes():
    from ray.exceptions import NodeDiedError, RayActorError, RayTaskError

    from sweeps.schedulers.lost_nodes import _NODE_DIED, _NODE_END

    gcs = Path(ray.__file__).parent / "core" / "src" / "ray" / "gcs" / "gcs_server"
    assert gcs.is_file(), f"{gcs} is not there to read the death causes from"
    died = strings_in(gcs, b"its node has died")
    ends = [s for s in strings_in(gcs, b"the actor's node was ") if "terminated" in s]
    assert died, "Ray's GCS no longer says 'its node has died' of an actor on a dead node"
    assert ends, "Ray's GCS no longer says how the actor's node was terminated"
    node = "6a4be082a2e7b9db0fd668c797ebbf055e7fc76b2ea6ef83f651e3c9"
    for text in died:
        found = _NODE_DIED.search(text + node)
        assert found and found.group("node") == node, f"_NODE_DIED does not read {text!r}"
    for text in ends:
        assert _NODE_END.search(text + "received SIGTERM"), f"_NODE_END does not read {text!r}"
    assert isinstance(RayActorError.preempted, property), "RayActorError.preempted is gone"
    assert issubclass(NodeDiedError, Exception)
    assert RayTaskError("f", "tb", ValueError("x")).cause.args == ("x",), "RayTaskError.cause"


@internal("ray-trial-states", "ray", "sweeps/driver/console.py, budget_clock.py, report/results.py")
def test_tunes_trial_states_are_the_words_the_code_compares():
    states = (Trial.PENDING, Trial.RUNNING, Trial.PAUSED, Trial.TERMINATED, Trial.ERROR)
    assert states == ("PENDING", "RUNNING", "PAUSED", "TERMINATED", "ERROR")


@internal(
    "ray-scheduler-controller",
    "ray",
    "sweeps/schedulers/config_rungs.py, pareto_rungs.py and per_unit.py",
)
def test_a_scheduler_can_pause_a_pending_trial_and_save_a_stopped_one():
    from ray.tune.execution.tune_controller import TrialRunnerWrapper
    from ray.tune.experiment import Trial

    assert "_set_trial_status" in vars(TuneController), "TuneController._set_trial_status is gone"
    assert "_mark_trial_to_checkpoint" in vars(TuneController), (
        "TuneController._mark_trial_to_checkpoint is gone"
    )
    assert list(__import__("inspect").signature(TuneController._set_trial_status).parameters) == [
        "self",
        "trial",
        "status",
    ]
    # schedulers get the controller wrapped; the code reaches the controller through the wrapper
    assert "self._tune_controller = tune_controller" in source(TrialRunnerWrapper.__init__)
    assert "getattr(self._tune_controller, attr)" in source(TrialRunnerWrapper.__getattr__)
    assert "choose_trial_to_run(self._wrapped())" in source(TuneController)
    # a held student gets its new config before it starts, as population-based training sets one
    assert "self.config = config" in source(Trial.set_config)
    # Ray 2.60 stops a trial without an actor and does not mark it for the saved state
    assert "def stop_trial" in source(TuneController)


@internal("ray-function-mixins", "ray", "sweeps/trial/trainable.py (run_trial.__mixins__)")
def test_a_function_trainables_mixins_become_base_classes():
    from ray.tune.trainable import util
    from ray.tune.trainable.function_trainable import wrap_function

    class Mixin:
        pass

    def trainable(config):
        pass

    trainable.__mixins__ = (Mixin,)
    assert issubclass(wrap_function(trainable), Mixin), "wrap_function ignores __mixins__"
    assert "__mixins__" in source(util.with_parameters), "tune.with_parameters drops __mixins__"


@internal("ray-train-thread", "ray", "sweeps/trial/lifecycle.py (FinishOnStop)")
def test_the_training_session_still_has_the_thread_and_locks_finish_on_stop_uses():
    from ray.train._internal import session as train_session
    from ray.tune.trainable.function_trainable import FunctionTrainable

    assert callable(train_session.get_session)
    body = source(train_session._TrainSession)
    for name in ("training_thread", "training_started", "stop_event", "continue_lock"):
        assert f"self.{name} =" in body, f"_TrainSession.{name} is gone"
    # why FinishOnStop waits: Tune's cleanup lets the thread go without waiting for it
    assert "finish(timeout=0)" in source(FunctionTrainable.cleanup)
    assert "TUNE_FUNCTION_THREAD_TIMEOUT_S" in source(FunctionTrainable.reset_config)


@internal(
    "ray-stop-systemexit", "ray", "sweeps/trial/fitting.py (fit_trial), sweeps/trial/callbacks.py"
)
def test_a_stopped_trial_leaves_tune_report_with_system_exit_0():
    from ray.train._internal import session as train_session

    body = source(train_session._TrainSession)
    at = body.find("if self.stop_event.is_set():")
    assert at >= 0 and "sys.exit(0)" in body[at : at + 200], (
        "tune.report no longer ends a stopped trial's thread with sys.exit(0)"
    )


@internal(
    "ray-checkpoint-manager-state",
    "ray",
    "sweeps/driver/resume_check.py (repoint_lost_checkpoints)",
)
def test_a_trials_saved_state_holds_its_checkpoint_manager_as_the_repair_reads_it():
    from ray.train import Checkpoint
    from ray.train._internal.session import _TrainingResult
    from ray.tune.utils.serialization import TuneFunctionDecoder, TuneFunctionEncoder

    _, run_metadata = (
        stub_trial().get_json_state()
    )  # what experiment_state's trial_data[i][1] holds
    meta = json.loads(run_metadata, cls=TuneFunctionDecoder, allow_cloudpickle=True)
    manager = meta["checkpoint_manager"]
    assert hasattr(manager, "_latest_checkpoint_result"), "no _latest_checkpoint_result"
    # a moved experiment: Tune re-roots the recorded checkpoint paths on restore
    from ray.tune.execution.tune_controller import TuneController
    from ray.tune.experiment import Trial

    assert "trial.set_storage(new_storage)" in source(TuneController._restore_trials)
    assert "original_storage.trial_fs_path, new_storage.trial_fs_path" in source(Trial.set_storage)
    assert isinstance(manager._checkpoint_results, list), "no _checkpoint_results list"
    result = _TrainingResult(Checkpoint(path="/nowhere"), {"step": 1})
    assert result.checkpoint.path == "/nowhere" and result.metrics == {"step": 1}
    json.dumps(meta, cls=TuneFunctionEncoder)  # written back the same way
    # a finished trial is told by its status in the entry's first part (_trial_status)
    from sweeps.driver.resume_check import _trial_status

    trial = stub_trial()
    trial.status = Trial.TERMINATED
    assert _trial_status(trial.get_json_state()) == "TERMINATED"


@internal(
    "ray-state-files",
    "ray",
    "sweeps/driver/resume_check.py (STATE_FILES, staging_folders, staged_for, restore_trial_files)",
)
def test_tunes_state_file_names_and_the_drivers_staging_folder(tmp_path):
    from ray.train import constants
    from ray.train._internal.storage import StorageContext
    from ray.tune.search.search_generator import SearchGenerator
    from ray.tune.search.searcher import Searcher

    from sweeps.driver.resume_check import STATE_FILES

    templates = (
        TuneController.CKPT_FILE_TMPL,
        SearchGenerator.CKPT_FILE_TMPL,
        Searcher.CKPT_FILE_TMPL,
    )
    assert tuple(t.format("*") for t in templates) == STATE_FILES
    # <RAY_TMPDIR or /tmp>/ray/session_*/artifacts/<timestamp>/<experiment>/driver_artifacts
    assert '"artifacts"' in source(constants._get_ray_train_session_dir)
    assert '"driver_artifacts"' in source(StorageContext)
    assert "self._timestamp, self.experiment_dir_name" in source(StorageContext._get_session_path)
    # each trial's log files in a folder of the trial's own folder name (restore_trial_files)
    staged = source(StorageContext.trial_driver_staging_path.fget)
    assert "Path(self.experiment_driver_staging_path, self.trial_dir_name)" in staged
    # a trial's saved state records the storage it wrote to, read without unpickling (staged_for)
    from sweeps.driver.resume_check import _recorded_storage

    trial = stub_trial()
    trial.storage = StorageContext(
        storage_path=str(tmp_path), experiment_dir_name="study", trial_dir_name="t1"
    )
    entry = trial.get_json_state()  # what experiment_state's trial_data[i] holds
    assert _recorded_storage(entry) == (str(tmp_path.resolve()), "study")


@internal("ray-result-grid-trials", "ray", "sweeps/report/results.py (trial_states, result_rows)")
def test_a_result_grid_keeps_tunes_trials_in_its_order():
    from ray.tune.result_grid import ResultGrid

    body = source(ResultGrid.__init__)
    assert "self._experiment_analysis = experiment_analysis" in body
    assert "for trial in self._experiment_analysis.trials" in body, (
        "the ResultGrid's results no longer follow the analysis' trials one to one"
    )


@internal(
    "ray-private-cluster",
    "ray",
    "sweeps/driver/cluster.py (check_ddp_dependencies, choose_address)",
)
def test_the_private_cluster_helpers_exist_with_their_signatures():
    from ray._private.services import find_bootstrap_address
    from ray._private.utils import get_dashboard_dependency_error

    assert list(inspect.signature(find_bootstrap_address).parameters) == ["temp_dir"]
    error = get_dashboard_dependency_error()
    assert error is None or isinstance(error, str | Exception)


@internal(
    "ray-logger-names",
    "ray",
    "sweeps/storage.py (ERROR_LOGGERS), sweeps/trial/lifecycle.py (QUIET_LOGGERS), "
    "sweeps/driver/console.py (ANALYSIS_LOGGER, RUN_LOGGER, ROUTINE, tune_reporter), "
    "sweeps/driver/cluster.py (LOCAL_START_LOGGERS)",
)
def test_the_loggers_the_code_filters_are_rays_module_loggers():
    import importlib

    from ray.tune.experimental import output

    from sweeps.driver.cluster import LOCAL_START_LOGGERS
    from sweeps.driver.console import (
        ANALYSIS_LOGGER,
        INTERRUPTED,
        NEW_OUTPUT_ENV,
        NOT_REPORTED,
        ROUTINE,
        RUN_LOGGER,
        STOP_SIGNAL,
    )
    from sweeps.storage import ERROR_LOGGERS
    from sweeps.trial.lifecycle import QUIET_LOGGERS

    names = [*ERROR_LOGGERS, ANALYSIS_LOGGER, RUN_LOGGER, *ROUTINE, *LOCAL_START_LOGGERS]
    names += [n for n in QUIET_LOGGERS if n.startswith("ray.")]
    for name, starts in ROUTINE.items():  # the words of the lines dropped
        assert all(start in source(importlib.import_module(name)) for start in starts), name
    # the console engine chosen by the variable (0: the legacy one, silent at verbose 0)
    assert f'os.environ.get("{NEW_OUTPUT_ENV}", "1") == "0"' in source(output.get_air_verbosity)
    for name in names:
        module = importlib.import_module(name)
        assert "getLogger(__name__)" in source(module), f"{name} logs under another name"
    assert "Trial task failed for trial" in source(TuneController), "Tune's trial-error log moved"
    analysis = source(importlib.import_module(ANALYSIS_LOGGER))
    assert '"Failed to fetch metrics for' in analysis and NOT_REPORTED in analysis
    assert f'f"{INTERRUPTED}, but' in source(importlib.import_module(RUN_LOGGER)), (
        "Tune's run loop no longer says how to resume a stopped run in the words filtered"
    )
    assert f'"{STOP_SIGNAL} (e.g. via SIGINT' in source(importlib.import_module(RUN_LOGGER)), (
        "Tune's SIGINT handler no longer warns in the words filtered"
    )


@internal("ray-trial-log-restore", "ray", "sweeps/driver/trial_logs.py, sweeps/trial/lifecycle.py")
def test_tune_restores_a_retried_trials_log_files_from_its_storage():
    from ray.train.context import TrainContext
    from ray.tune import Callback
    from ray.tune.logger.logger import LoggerCallback

    body = source(LoggerCallback._restore_from_remote)
    assert "trial.storage.trial_fs_path" in body and "trial.storage.storage_filesystem" in body
    assert "trial.local_path" in body
    assert callable(Callback.on_trial_recover) and callable(TrainContext.get_storage)


@internal("ray-csv-logger-continue", "ray", "sweeps/driver/trial_logs.py (ProgressCSV)")
def test_tunes_csv_logger_keeps_a_writer_per_trial_and_a_continue_flag():
    from ray.tune.logger import CSVLoggerCallback
    from ray.tune.utils.callback import _create_default_callbacks

    setup, log = source(CSVLoggerCallback._setup_trial), source(CSVLoggerCallback.log_trial_result)
    assert "self._trial_continue[trial]" in setup and "self._trial_files[trial]" in setup
    assert "if not self._trial_csv[trial]:" in log, "Tune no longer keeps the writer it finds"
    assert "if not self._trial_continue[trial]:" in log
    assert "isinstance(callback, CSVLoggerCallback)" in source(_create_default_callbacks)


@internal(
    "ray-sigint-stop", "ray", "sweeps/driver/preemption.py, budget_clock.py, sweeps/storage.py"
)
def test_tune_turns_the_first_sigint_into_a_saved_stop():
    from ray.tune import tune

    body = source(tune._setup_signal_catching)
    assert "signal.SIGINT, signal_interrupt_tune_run" in body, "Tune no longer catches SIGINT"
    assert "experiment_interrupted_event.set()" in body
    assert "signal.signal(signal.SIGINT, original_handler)" in body, (
        "a second SIGINT no longer stops at once"
    )
    assert "experiment_interrupted_event.is_set()" in source(tune.run)
    # ray.init takes SIGTERM (exit at once): the launcher takes it back after joining Ray
    assert "set_sigterm_handler(sigterm_handler)" in source(ray._private.worker.init)


@internal("ray-controller-steps", "ray", "sweeps/driver/budget_clock.py, sweeps/driver/console.py")
def test_callbacks_hear_every_controller_step_and_the_end_of_run_cleanup_is_short():
    body = source(TuneController.step)
    assert "self._callbacks.on_step_end(iteration=self._iteration, trials=self._trials)" in body
    # the actors of trials stopped at the end of a run get 5 s, then are killed
    # (sweeps/integrations/wandb_runs.py: close_cut_run closes the W&B runs they leave open)
    assert "time.monotonic() - start < 5" in source(TuneController._cleanup_trials)


@internal(
    "ray-max-pending-trials",
    "ray",
    "sweeps/search/compose.py and sweeps/stages/train.py (one_pending): TUNE_MAX_PENDING_TRIALS_PG;"
    " sweeps/schedulers/placement.py",
)
def test_the_pending_trials_setting_is_read_from_the_environment(monkeypatch):
    """Read when a run starts, over the limiter ``max_concurrent_trials`` puts around the searcher:
    a fused sweep's run places one trial at a time (without it, as many as the limit), and the
    setting is put back after the run."""
    import os
    from types import SimpleNamespace

    from ray.tune.execution import tune_controller
    from ray.tune.search import ConcurrencyLimiter, Searcher, SearchGenerator

    from sweeps.stages.train import PENDING_ENV, one_pending

    assert f'os.getenv("{PENDING_ENV}"' in source(tune_controller._get_max_pending_trials)
    # the scheduler's choice is staged first; the other pending trials only while fewer actors
    # than the setting wait for resources (sweeps.schedulers.placement keeps groups whole by it)
    adding = source(tune_controller.TuneController._maybe_add_actors)
    chosen = adding.index("self._scheduler_alg.choose_trial_to_run(")
    assert chosen < adding.index("num_pending_actors >= self._max_pending_trials")
    # the searcher is asked only while fewer trials are PENDING (a PAUSED one does not count),
    # and a scheduler may set a trial's status (placement holds the others PAUSED)
    asking = source(tune_controller.TuneController._maybe_update_trial_queue)
    assert "len(self._pending_trials) < self._max_pending_trials" in asking
    assert '"_set_trial_status"' in source(tune_controller.TuneController._wrapped)

    class Nothing(Searcher):
        def suggest(self, trial_id):
            return None

    run = SearchGenerator(ConcurrencyLimiter(Nothing(metric="m", mode="max"), max_concurrent=8))
    monkeypatch.delenv(PENDING_ENV, raising=False)
    assert tune_controller._get_max_pending_trials(run) == 8
    with one_pending(SimpleNamespace(fusion_roster="roster")):
        assert tune_controller._get_max_pending_trials(run) == 1
    with one_pending(SimpleNamespace(fusion_roster=None)):
        assert tune_controller._get_max_pending_trials(run) == 8
    assert PENDING_ENV not in os.environ


@internal("ray-no-prestart", "ray", "sweeps/driver/cluster.py (init_ray) and tests/conftest.py")
def test_the_raylet_still_has_the_prestart_flag_the_launcher_turns_off():
    raylet = Path(ray.__file__).parent / "core" / "src" / "ray" / "raylet" / "raylet"
    assert raylet.is_file(), f"{raylet} is not there to read Ray's config flags from"
    assert strings_in(raylet, b"prestart_worker_first_driver"), (
        "Ray's raylet no longer has the config flag prestart_worker_first_driver "
        "(RAY_prestart_worker_first_driver)"
    )


@internal("ray-color-prefix", "ray", "sweeps/stages/pipeline.py (plain_prefixes)")
def test_ray_reads_its_colour_switch_when_it_prints_a_process_line():
    import ray._private.worker as worker

    assert 'os.getenv("RAY_COLOR_PREFIX") == "0"' in source(worker.print_worker_logs), (
        "Ray no longer turns the process prefixes' colours off with RAY_COLOR_PREFIX=0"
    )


@internal("ray-sigterm-exit", "ray", "sweeps/trial/lifecycle.py (quiet_lost_exits)")
def test_a_ray_worker_exits_on_sigterm_by_raising_system_exit():
    import ray._private.worker as worker

    assert "raise_sys_exit_with_custom_error_message" in source(worker.Worker.main_loop), (
        "Ray's worker no longer exits on SIGTERM by raising SystemExit from its handler"
    )


@internal("ray-gcs-probe", "ray", "sweeps/driver/cluster.py (what_answers)")
def test_the_gcs_service_the_launcher_probes_is_generated_in_ray():
    from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

    assert "GetClusterId" in source(gcs_service_pb2_grpc.NodeInfoGcsServiceStub.__init__), (
        "Ray's generated NodeInfoGcsService stub has no GetClusterId"
    )
    gcs_service_pb2.GetClusterIdRequest().SerializeToString()  # a request with no fields
    from ray._private.authentication import authentication_token_setup

    assert authentication_token_setup.AUTH_MODE_ENV_VAR == "RAY_AUTH_MODE"


@internal("ray-gcs-reconnect", "ray", "sweeps/driver/gcs_watch.py (reconnect_timeout)")
def test_rays_wait_for_a_lost_gcs_is_the_config_entry_the_watch_reads():
    from pathlib import Path

    import ray._raylet

    binary = Path(ray._raylet.__file__).read_bytes()
    assert b"RAY_gcs_rpc_server_reconnect_timeout_s" in binary
    assert b"Failed to connect to GCS within " in binary


@internal("ray-unhandled-errors", "ray", "sweeps/driver/console.py (StoppedTrialErrors)")
def test_ray_says_an_unread_task_error_through_its_worker_modules_logger():
    import logging

    import ray._private.worker as worker

    said = source(worker._unhandled_error_handler)
    assert "logger.error(" in said and 'f"Unhandled error' in said
    assert worker.logger is logging.getLogger("ray._private.worker")


@internal(
    "ray-scheduler-state",
    "ray",
    "sweeps/search/base.py (save, restore), sweeps/schedulers/per_unit.py (PerUnitScheduler)",
)
def test_tune_saves_the_searcher_not_the_scheduler_and_pickles_both_in_one_tuner_file():
    from ray.tune.impl.tuner_internal import TunerInternal

    assert '"_scheduler_alg"' in source(TuneController.__getstate__), (
        "Tune's controller state no longer leaves the scheduler out"
    )
    assert "_search_alg.save_to_dir" in source(TuneController.save_to_dir)
    assert "pickle.dumps(self.__getstate__())" in source(TunerInternal), (
        "tuner.pkl is no longer one pickle of the Tuner's state"
    )
    assert "_tune_config" not in source(TunerInternal.__getstate__), (
        "the Tuner's pickled state may no longer hold its TuneConfig"
    )
