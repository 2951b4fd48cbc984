"""The record of how a sweep was launched (``launch.json`` in its folder: the ``--set`` overrides,
the profile, the sweep file's settings that plan the trials, the sweep's id and the versions of
the trials' code its runs trained with), written by every launch and read by
``--resume``, which continues the sweep with them (:func:`resume_launch`) and refuses a sweep file
that plans its trials otherwise (:func:`check_resumed_plan`). A damaged record (cut short by a
kill, emptied) is said in one line naming the file, never a traceback."""

from __future__ import annotations

import json
import shlex
import uuid
from pathlib import Path
from typing import Any

import yaml

from sweeps.layout import LAUNCH_FILE, recorded, write_atomic
from sweeps.spec.dotted import UNSET, dotted_differences, get_dotted, holding_key
from sweeps.spec.load import PLAN_KEYS, parse_overrides, profile_line, profile_overrides, read_yaml
from sweeps.spec.schema import SpecError


def save_launch(
    out_dir: Path,
    overrides: list[str],
    profile: str | None,
    planned: dict[str, Any] | None = None,
    profile_settings: dict[str, tuple[Any, str]] | None = None,
    resume: bool = False,
    code: str | None = None,
    description: str | None = None,
    gpu_name: str | None = None,
    warm: dict[str, Any] | None = None,
) -> Path:
    """Record how a sweep was started, so ``--resume`` continues it with the same settings: the
    overrides, the profile and the sweep file's settings that plan its trials (``planned``:
    :attr:`sweeps.spec.grid.Sweep.planned`); and what the profile set, in words
    (``profile_sets``: :func:`profile_line`), which results.md repeats; the sweep's id
    (``sweep_id``: :func:`sweep_id`), made by its first launch and kept by every resume; and the
    versions of the trials' code its runs trained with (``codes``: :func:`code_versions`; ``code``,
    this run's, is added where it differs from the last); the sweep file's ``description``, which
    results.md shows under its title; and the GPU the first launch's plan costed its arrangement
    from (``gpu_name``, "" for none: :func:`recorded_gpu_name`), kept by every resume; and what
    the first launch's warm start reused (``warm_start``: :meth:`~sweeps.plan.warm_start.WarmStart.
    to_record`), which every resume keeps: the trials it trains are those the first launch
    planned, whatever the earlier folder or the code holds now."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / LAUNCH_FILE
    record: dict[str, Any] = {"overrides": list(overrides), "profile": profile}
    if first := sweep_id(out_dir):  # a resume: the first launch's id
        record["sweep_id"] = first
    elif not resume and not path.exists():  # a new sweep (a resume keeps none where none was)
        record["sweep_id"] = uuid.uuid4().hex[:12]
    codes = code_versions(out_dir)
    if resume and not codes and path.exists():  # a sweep of a version that recorded none
        codes = [UNRECORDED]
    if code is not None and (not codes or codes[-1] != code):
        codes.append(code)
    if codes:
        record["codes"] = codes
    if planned is not None:
        record["planned"] = planned
    if description:
        record["description"] = description
    first_gpu = recorded_gpu_name(out_dir) if resume else None
    if first_gpu is not None or gpu_name is not None:
        record["gpu_name"] = first_gpu if first_gpu is not None else gpu_name
    if resume and path.exists():  # a resume keeps the first launch's, and none where none was
        warm = recorded_warm_start(out_dir)
    if warm is not None:
        record["warm_start"] = warm
    if profile_settings or overrides:
        record["profile_sets"] = profile_line(profile, profile_settings or {}, overrides)
    # in one step: a launch killed while writing leaves the old record whole, never half of one
    write_atomic(path, json.dumps(record, indent=2, default=str) + "\n")
    return path


def recorded_gpu_name(out_dir: Path) -> str | None:
    """The GPU the sweep's first launch planned its GPU arrangement for (its name as
    ``nvidia-smi`` gives it; "" where that launch saw none), which a resume plans for again, on
    whichever machine it runs: the arrangement decides whether trials train fused, and Tune
    refuses a resume whose trainable changed. None without a record of it."""
    found = recorded(out_dir).get("gpu_name")
    return found if isinstance(found, str) else None


def first_launch_plan(out_dir: Path, resume: bool) -> tuple[str | None, dict[str, Any] | None]:
    """What a resume plans as its first launch did (:func:`sweeps.plan.sweep_plan.build_plan`'s
    ``gpu_name`` and ``first_warm``): the GPU it costed its arrangement for, and what its warm
    start reused; (None, None) for a launch that is no resume."""
    if not resume:
        return None, None
    return recorded_gpu_name(out_dir), recorded_warm_start(out_dir)


def recorded_warm_start(out_dir: Path) -> dict[str, Any] | None:
    """What the sweep's first launch's warm start reused, as launch.json records it (None without a
    record of it: a sweep without ``warm_start``, or of an older version)."""
    found = recorded(out_dir).get("warm_start")
    return found if isinstance(found, dict) else None


def sweep_id(out_dir: Path) -> str | None:
    """The id the sweep's first launch recorded in launch.json (every trial's W&B run carries it
    in its config, ``sweep_id``, which tells this sweep's runs from those of another run of a
    sweep of the same name in the same W&B group); None without one (a sweep from an older
    version, or no readable record)."""
    found = recorded(out_dir).get("sweep_id")
    return found if isinstance(found, str) and found else None


def recorded_flags(out_dir: Path) -> str:
    """The first run's ``--profile`` and ``--set`` flags as launch.json records them, quoted for a
    shell (``--profile cpu --set 'seeds=[0]'``): what a command printed for a new sweep that must
    plan its trials as this one did (a warm start from it) repeats; "" without a record."""
    record = recorded(out_dir)
    parts = ["--profile", str(record["profile"])] if record.get("profile") else []
    for override in record.get("overrides") or []:
        parts += ["--set", str(override)]
    return " ".join(shlex.quote(p) for p in parts)


#: launch.json's ``codes`` entry for the runs of a sweep whose version recorded no code version
UNRECORDED = "unrecorded"


def code_versions(out_dir: Path) -> list[str]:
    """The versions of the trials' code (:func:`sweeps.plan.warm_start.code_version`) the sweep's
    runs trained with, in order, as launch.json records them ([] for a sweep from an older
    version, or no readable record)."""
    found = recorded(out_dir).get("codes")
    return [c for c in found if isinstance(c, str)] if isinstance(found, list) else []


def resume_launch(
    out_dir: Path,
    overrides: list[str],
    profile: str | None,
    source: str,
    planned: dict[str, Any] | None = None,
) -> tuple[list[str], str | None]:
    """The first run's overrides and profile (``--smoke`` is profile smoke), for ``--resume``.
    New ``--set`` values of the settings that plan the trials (:data:`PLAN_KEYS`) may repeat them
    but not change or add to them (the trials already run were planned without); raises
    SpecError saying which. Other settings (a budget, ``failure``, ``timing``) may be given:
    they replace the recorded ones. The sweep file's settings that plan the trials (``planned``)
    must be the first run's. Without a record (a sweep from an older version) the given ones
    stand."""
    path = out_dir / LAUNCH_FILE
    if not path.exists():
        return overrides, profile
    first = read_launch(path, source)
    if planned is not None and "planned" in first:
        _check_plan_unchanged(first["planned"], planned, path, source)
    before, now = parse_overrides(first["overrides"], source), parse_overrides(overrides, source)
    # settings outside the plan may change (a larger budget continues a sweep whose budget ran
    # out), and the new values replace the recorded ones
    free = {k for k in now if k.split(".")[0] not in PLAN_KEYS}
    # a --set of the value the first run planned with (its own --set, its profile's or its
    # file's) repeats it
    first_values = {k: _first_value(first, before, k, source) for k in now if k not in free}
    changed = [k for k, (value, _) in first_values.items() if value is UNSET or value != now[k]]
    if changed:
        was = ", ".join(
            f"{k}={value!r}{where}" if value is not UNSET else f"{k} unset"
            for k in changed
            for value, where in [first_values[k]]
        )
        raise SpecError(
            f"--set {changed[0]}",
            f"--resume continues the first run with its own overrides (the first run's: {was}; "
            f"recorded in "
            f"{path}); drop the --set to continue, or start a new sweep with another --output "
            f"{_plan_note()}; --set warm_start={out_dir} there keeps this sweep's finished "
            f"trials (one whose plan, seed and code are unchanged is reused, not trained again)",
            source,
        )
    if profile is not None and profile != (used := first.get("profile")):
        raise SpecError(
            "--profile",
            (
                f"the first run used profile {used!r}, not {profile!r} (recorded in {path}); "
                f"resume it with --profile {used} or with no --profile"
                if used is not None
                else f"the first run used no profile, not {profile!r} (recorded in {path}); "
                f"resume it with no --profile"
            ),
            source,
        )
    kept = [o for o in first["overrides"] if next(iter(parse_overrides([o], source))) not in free]
    new = [o for o in overrides if next(iter(parse_overrides([o], source))) in free]
    return kept + new, first.get("profile")


def _first_value(first: dict, before: dict[str, Any], key: str, source: str) -> tuple[Any, str]:
    """The value the first run (its record ``first``, its ``--set`` values ``before``) planned
    ``key`` with, :data:`UNSET` where none, and where that value came from, in words (nothing
    for its own ``--set``)."""
    if key in before:
        return before[key], ""
    value = get_dotted(first.get("planned"), key, UNSET)  # the file's, with the profile's
    if value is UNSET:
        return UNSET, ""
    used = first.get("profile")
    if used is not None:
        try:  # the profile's settings, as the sweep file (its plan the first run's) declares them
            raw = read_yaml(Path(source).read_text(encoding="utf-8"), source)
            profiled = profile_overrides(raw if isinstance(raw, dict) else {}, used, source)
        except (OSError, ValueError, yaml.YAMLError, SpecError):
            profiled = profile_overrides({}, used, source) if used == "smoke" else {}
        if holding_key(key, profiled) is not None:
            return value, f" from profile {used}"
        if any(k.startswith(f"{key}.") for k in profiled):
            return value, f" from the sweep file and profile {used}"
    return value, " from the sweep file"


def check_resumed_plan(out_dir: Path, planned: dict[str, Any], source: str) -> None:
    """For ``--resume``, once the sweep is loaded with the first run's overrides and profile
    (:func:`resume_launch`): its file plans the trials as at the first run (raises SpecError
    saying what changed). Without a record of the first run's plan, nothing to check."""
    path = out_dir / LAUNCH_FILE
    if path.exists() and "planned" in (first := read_launch(path, source)):
        _check_plan_unchanged(first["planned"], planned, path, source)


def _check_plan_unchanged(before: dict, now: dict, path: Path, source: str) -> None:
    """The sweep file a resume reads plans the trials as the first run's did: the trials already
    run were planned from the first, and the resumed ones would be planned from the edited one,
    under the same sweep's name and in one results.csv."""
    now = json.loads(json.dumps(now, default=str))  # as the record holds it (YAML dates as text)
    changed = dotted_differences(before, now)
    if not changed:
        return
    listed = "; ".join(
        f"{key} was {_shown(was)}, is {_shown(is_)}" for key, was, is_ in changed[:5]
    )
    more = f" (and {len(changed) - 5} more)" if len(changed) > 5 else ""
    raise SpecError(
        "--resume",
        f"the sweep file plans its trials otherwise than at the first run: {listed}{more}. The "
        f"trials already run were planned from the first run's file (its settings recorded in "
        f"{path}, under `planned`); put those values back to continue, or start a new sweep with "
        f"another --output {_plan_note()}; --set warm_start={path.parent} there keeps this "
        "sweep's finished trials (one whose plan, seed and code are unchanged is reused)",
        source,
    )


def _plan_note() -> str:
    return (
        f"({', '.join(PLAN_KEYS)} must stay as they were; the rest may change, and a "
        "storage.path must change with --output where one is set)"
    )


def _shown(value: Any) -> str:
    return "unset" if value is UNSET else json.dumps(value, default=str)


def read_launch(path: Path, source: str) -> dict[str, Any]:
    """The launch record at ``path`` (:func:`save_launch`'s), checked: a file that is not JSON
    (cut short), not a mapping, or lacks the overrides or holds them in another shape is refused
    in one line naming it (SpecError), before anything of the sweep is read from it."""
    fix = (
        "it cannot say how the sweep was started: restore it from a backup, or start the sweep "
        "anew in another --output (or after removing the sweep's folder)"
    )
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SpecError("--resume", f"cannot read {path} ({exc.strerror or exc})", source) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise SpecError("--resume", f"{path} is damaged (not JSON: {exc}); {fix}", source) from None
    overrides = record.get("overrides") if isinstance(record, dict) else None
    if not isinstance(overrides, list) or not all(isinstance(o, str) for o in overrides):
        what = "no list of --set overrides" if isinstance(record, dict) else "not a mapping"
        raise SpecError("--resume", f"{path} is damaged ({what}); {fix}", source)
    if not isinstance(record.get("profile"), str | None) or not isinstance(
        record.get("planned", {}), dict
    ):
        raise SpecError(
            "--resume",
            f"{path} is damaged (its profile or plan is of the wrong kind); {fix}",
            source,
        )
    return record
