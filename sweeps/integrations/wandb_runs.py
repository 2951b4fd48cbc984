"""A sweep's W&B runs after training: the decode-timing stage's figures added to each trial's run,
and the offline runs checked before the upload command is printed.

A trial's W&B run is written by the trial's own process and closed when the trial ends; its
isolated ``decode_seconds`` is measured after the whole Tune run. Online, the run is reopened by
id (``resume="must"``) and its summary updated. Offline, reopening would start a second run folder
for the same id (``offline-run-<time>-<id>``, with only the new summary in it), so the summary
update is written into the run's own transaction log instead, before its exit record: one folder
per run, read whole by ``wandb leet inspect`` and uploaded whole by ``wandb sync``.

The transaction log (``run-<id>.wandb``) is wandb's append-only record file: a 7-byte header
(``:W&B``, magic ``0xBEE1``, version) and then ``wandb_internal_pb2.Record`` protobufs in
LevelDB's log framing -- 32 KiB blocks, each record chunk behind a 7-byte header (CRC-32 of type
and data, length, chunk type: full, first, middle, last).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import Any

from sweeps.errors import RunLogError  # noqa: F401 (raised here; importable from here too)
from sweeps.layout import write_atomic

HEADER = struct.Struct("<4sHB")  # ident, magic, version
IDENT, MAGIC = b":W&B", 0xBEE1
CHUNK = struct.Struct("<IHB")  # crc32, length, type
BLOCK = 32768
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def run_log(run_dir: str | Path) -> Path:
    """The ``run-<id>.wandb`` file of an offline run folder."""
    found = sorted(Path(run_dir).glob("run-*.wandb"))
    if len(found) != 1:
        raise RunLogError(f"{run_dir}: expected one run-<id>.wandb file, found {len(found)}")
    return found[0]


def read_chunks(data: bytes) -> tuple[bytes, list[bytes]]:
    """The file header and each record's payload, checked chunk by chunk."""
    if len(data) < HEADER.size:
        raise RunLogError(f"{len(data)} bytes: shorter than the file header")
    ident, magic, _ = HEADER.unpack_from(data)
    if ident != IDENT or magic != MAGIC:
        raise RunLogError("not a W&B transaction log (bad header)")
    records: list[bytes] = []
    pos, partial = HEADER.size, None
    while pos < len(data):
        room = BLOCK - pos % BLOCK
        if room < CHUNK.size:  # a block's tail too short for a chunk header is padding
            pos += room
            continue
        if pos + CHUNK.size > len(data):
            raise RunLogError(f"truncated chunk header at byte {pos}")
        crc, length, kind = CHUNK.unpack_from(data, pos)
        if length == 0 and kind == 0:  # zero padding to the block's end
            pos += room
            continue
        body = data[pos + CHUNK.size : pos + CHUNK.size + length]
        if len(body) != length:
            raise RunLogError(f"truncated record at byte {pos} ({len(body)} of {length} bytes)")
        if zlib.crc32(body, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF != crc:
            raise RunLogError(f"checksum mismatch at byte {pos}")
        pos += CHUNK.size + length
        if kind == FULL:
            records.append(body)
        elif kind == FIRST:
            partial = body
        elif kind in (MIDDLE, LAST) and partial is not None:
            partial += body
            if kind == LAST:
                records.append(partial)
                partial = None
        else:
            raise RunLogError(f"unexpected chunk type {kind} at byte {pos}")
    if partial is not None:
        raise RunLogError("the last record is cut short")
    return data[: HEADER.size], records


def write_chunks(header: bytes, records: Iterable[bytes]) -> bytes:
    """The inverse of :func:`read_chunks`: the same framing wandb writes."""
    out = bytearray(header)
    for record in records:
        rest, first = memoryview(record), True
        while True:
            room = BLOCK - len(out) % BLOCK
            if room < CHUNK.size:
                out += b"\0" * room
                continue
            take = min(len(rest), room - CHUNK.size)
            last = take == len(rest)
            kind = FULL if first and last else FIRST if first else LAST if last else MIDDLE
            body = bytes(rest[:take])
            out += (
                CHUNK.pack(zlib.crc32(body, zlib.crc32(bytes([kind]))) & 0xFFFFFFFF, take, kind)
                + body
            )
            rest, first = rest[take:], False
            if last:
                break
    return bytes(out)


def read_records(path: str | Path) -> list[Any]:
    """The ``Record`` protobufs of a ``.wandb`` file, in order."""
    return _parse(read_chunks(Path(path).read_bytes())[1])


def _parse(chunks: Iterable[bytes]) -> list[Any]:
    from wandb.proto import wandb_internal_pb2 as pb

    records = []
    for raw in chunks:
        record = pb.Record()
        record.ParseFromString(raw)
        records.append(record)
    return records


def run_is_empty(run_dir: str | Path) -> bool:
    """Whether an offline run folder holds nothing logged: no ``run-<id>.wandb``, or one that ends
    within its file header (a trial stopped while W&B was starting). Such a folder has nothing to
    upload or close, and nothing to say about the trial."""
    found = sorted(Path(run_dir).glob("run-*.wandb"))
    if not found:
        return True
    try:
        return len(found) == 1 and found[0].stat().st_size <= HEADER.size
    except OSError:
        return False


def run_problem(run_dir: str | Path) -> str | None:
    """Why an offline run folder would not upload whole (unreadable log, or no exit record: the
    process died before the run was finished), or None when it is complete."""
    try:
        records = read_records(run_log(run_dir))
    except (OSError, RunLogError) as exc:
        return str(exc)
    if not any(r.WhichOneof("record_type") == "exit" for r in records):
        return "the run was never finished (no exit record)"
    return None


def logged_keys(records: Iterable[Any]) -> set[str]:
    """The keys a run's records logged (its history) or put in its summary."""
    keys: set[str] = set()
    for record in records:
        kind = record.WhichOneof("record_type")
        items = (
            record.history.item
            if kind == "history"
            else (record.summary.update if kind == "summary" else ())
        )
        keys |= {item.key or ".".join(item.nested_key) for item in items}
    return keys


def folder_keys(run_dir: str | Path) -> set[str]:
    """:func:`logged_keys` of an offline run folder; none where its log cannot be read."""
    try:
        return logged_keys(_parse(read_chunks(run_log(run_dir).read_bytes())[1]))
    except (OSError, RunLogError):
        return set()


def summary_values(records: Iterable[Any]) -> dict[str, str]:
    """The values the run's summary records set, by key, as JSON text (the last one written)."""
    held: dict[str, str] = {}
    for record in records:
        if record.WhichOneof("record_type") == "summary":
            for item in record.summary.update:
                held[item.key or ".".join(item.nested_key)] = item.value_json
            for item in record.summary.remove:
                held.pop(item.key or ".".join(item.nested_key), None)
    return held


def add_offline_summary(
    run_dir: str | Path, values: Mapping[str, Any], earlier: Collection[str] = ()
) -> Path:
    """Write ``values`` into the summary of a finished offline run: a summary record inserted
    before its exit record (later records renumbered), the file replaced atomically. A None for a
    key the run never logged is left out: it would add a key the run does not have (a copy
    task's ``val/sacrebleu``, a non-student's ``train/distill``); ``earlier``: the keys the run's
    earlier folders logged (one run once uploaded: a None there clears what they left, such as
    a first attempt's ``error``). Values the summary already holds are not written again (a
    resume of a finished sweep publishes the same figures)."""
    import json

    from wandb.proto import wandb_internal_pb2 as pb

    path = run_log(run_dir)
    header, chunks = read_chunks(path.read_bytes())
    records = _parse(chunks)
    logged = logged_keys(records) | set(earlier)
    values = {k: v for k, v in values.items() if v is not None or k in logged}
    held = summary_values(records)  # a resume publishes the same figures again: written once
    values = {k: v for k, v in values.items() if held.get(k) != json.dumps(v)}
    exits = [i for i, r in enumerate(records) if r.WhichOneof("record_type") == "exit"]
    if not exits:
        raise RunLogError(
            f"{path}: the run was never finished (no exit record); its summary is not updated"
        )
    if not values:
        return path
    at = exits[-1]
    update = pb.Record(
        num=records[at].num,
        summary=pb.SummaryRecord(
            update=[pb.SummaryItem(key=k, value_json=json.dumps(v)) for k, v in values.items()]
        ),
    )
    for r in records[at:]:
        if r.num:
            r.num += 1
    records.insert(at, update)
    return write_atomic(path, write_chunks(header, (r.SerializeToString() for r in records)))


def close_cut_run(run_dir: str | Path) -> bool:
    """Close an offline run part whose process was killed before ``wandb.finish`` (no exit record):
    an exit record (status 0) appended after its last record, the file replaced atomically, its
    history up to the kill kept. For trials stopped from outside (a preemption, a budget, Ctrl-C):
    Tune gives a stopping trial 5 s at the end of a run before it kills the actor, too little on a
    busy machine to close W&B, and the trial's run goes on under its id when the sweep resumes.
    Returns whether the part was closed (False: complete already, unreadable, or without a log:
    a trial stopped while W&B was starting leaves a run folder its process never wrote a log
    into, with nothing to close)."""
    from wandb.proto import wandb_internal_pb2 as pb

    try:
        path = run_log(run_dir)
        header, chunks = read_chunks(path.read_bytes())
    except (OSError, RunLogError):
        return False
    records = _parse(chunks)
    if not records or any(r.WhichOneof("record_type") == "exit" for r in records):
        return False
    end = pb.Record(num=max(r.num for r in records) + 1, exit=pb.RunExitRecord(exit_code=0))
    records.append(end)
    write_atomic(path, write_chunks(header, (r.SerializeToString() for r in records)))
    return True


def close_superseded_parts(wandb_dir: str | Path) -> int:
    """Close (:func:`close_cut_run`) each offline run part that a later part of the same run id
    follows: its process was gone when the later one began (a launcher killed, a lost head or
    node, a retried trial) and never wrote its exit record, so ``wandb sync`` would leave its
    history out of the run. The newest part of each run is left as it is. Returns how many were
    closed."""
    parts: dict[str, list[Path]] = {}
    for folder in sorted(Path(wandb_dir).glob("offline-run-*-*")):
        if not run_is_empty(folder):
            parts.setdefault(folder.name.rsplit("-", 1)[1], []).append(folder)
    return sum(close_cut_run(folder) for found in parts.values() for folder in found[:-1])


def offline_run_dirs(wandb_dir: str | Path, run_id: str) -> list[Path]:
    """The offline run folders of one run id, oldest first (a retried trial resumes its run in a
    new folder), less those with nothing logged (:func:`run_is_empty`)."""
    found = sorted(Path(wandb_dir).glob(f"offline-run-*-{run_id}"))
    return [folder for folder in found if not run_is_empty(folder)]


def open_failed_run(arguments: Mapping[str, Any], summary: Mapping[str, Any]) -> str:
    """Open a run with ``wandb.init``'s ``arguments`` (a trial's own:
    :func:`sweeps.trial.wandb_run.run_arguments`), write ``summary`` and finish it failed (exit
    code 1): the run of a trial that failed before it opened one. Returns its id."""
    import wandb

    run = wandb.init(**arguments, settings=wandb.Settings(silent=True, x_disable_stats=True))
    run.summary.update({k: v for k, v in summary.items() if v is not None})
    run.finish(exit_code=1)
    return run.id


def add_run_summary(
    mode: str,
    wandb_dir: str | Path,
    run_id: str,
    values: Mapping[str, Any],
    project: str | None = None,
    entity: str | None = None,
) -> str:
    """Add ``values`` to a finished run's summary: online by reopening it by id, offline in its
    newest run folder. Returns where it went; raises ``RunLogError`` when there is no such run."""
    if mode == "offline":
        folders = offline_run_dirs(Path(wandb_dir) / "wandb", run_id)
        if not folders:
            raise RunLogError(f"no offline W&B run {run_id} under {wandb_dir}/wandb")
        earlier = set().union(*(folder_keys(folder) for folder in folders[:-1]))
        return str(add_offline_summary(folders[-1], values, earlier))
    if mode != "online":
        return ""
    import wandb

    run = wandb.init(
        project=project,
        entity=entity,
        id=run_id,
        resume="must",
        dir=str(wandb_dir),
        settings=wandb.Settings(silent=True, x_disable_stats=True),
    )
    run.summary.update({k: v for k, v in values.items() if v is not None or k in run.summary})
    run.finish()
    return run.url or run_id
