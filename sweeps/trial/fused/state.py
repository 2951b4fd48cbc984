"""A fused group's resume state, kept beside the sweep's experiment (``<experiment>/fused/<group>/``)
on the same storage as the trials' checkpoints (a local folder, NFS or a bucket), so a group that
restarts on another node (a lost node, a preempted sweep resumed) finds it.

At each validation the group writes one state before it publishes the members' reports: the fused
model and each member's Adam state, where each member's data loader stands, the RNG states and
what each member's report counts (convergence streaks, training time). A state is written to a
temporary name and moved into place: a reader sees a whole state or none. Its file name says its
step and the members it holds (``state-000000400-m0.1.2.pt``), so a restart picks a state without
reading the others.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from typing import Any

#: states kept per group: a restart goes back to the step every returning member reached
KEEP_STATES = 3
_NAME = re.compile(r"state-(?P<step>\d{9})-m(?P<members>[\d.]+)\.pt")


@dataclass(frozen=True)
class GroupSetup:
    """What the first member trial tells the roster to build its group with."""

    name: str
    size: int
    roster: str  # the roster actor's name
    filesystem: Any  # Tune's storage filesystem (pyarrow), where the group's states go
    folder: str  # the group's state folder on it
    threads: int  # torch threads: one trial's CPUs
    gpu_ids: tuple[str, ...] = ()  # the GPU Ray gave the first member, if any
    stop_when: Any = None  # the sweep's StopWhenSpec


def group_folder(experiment_path: str, group: str) -> str:
    """The group's folder under the experiment's (its name made safe for any filesystem)."""
    safe = re.sub(r"[^A-Za-z0-9_.=-]+", "_", group)
    return f"{experiment_path.rstrip('/')}/fused/{safe}"


@dataclass(frozen=True)
class StateFile:
    path: str
    step: int
    members: tuple[int, ...]


class GroupStore:
    """The states of one group on a ``pyarrow.fs`` filesystem (Tune's storage filesystem)."""

    def __init__(self, filesystem: Any, folder: str, keep: int = KEEP_STATES) -> None:
        self.fs = filesystem
        self.folder = folder
        self.keep = keep

    def save(self, step: int, members: list[int], state: dict[str, Any]) -> str:
        """Write ``state`` for ``step`` (``members``: the group's member indices it holds) and
        delete all but the newest :data:`KEEP_STATES`; returns its path."""
        import torch

        buffer = io.BytesIO()
        torch.save(state, buffer)
        self.fs.create_dir(self.folder, recursive=True)
        name = f"state-{step:09d}-m{'.'.join(str(m) for m in sorted(members))}.pt"
        final, partial = f"{self.folder}/{name}", f"{self.folder}/.{name}.partial"
        with self.fs.open_output_stream(partial) as f:
            f.write(buffer.getvalue())
        self.fs.move(partial, final)
        for old in self.states()[: -self.keep]:
            self.fs.delete_file(old.path)
        return final

    def remove(self) -> None:
        """Delete the group's folder (every member finished or was stopped for good)."""
        try:
            self.fs.delete_dir(self.folder)
        except OSError:
            pass  # already gone, or a storage that refuses: the states only take room

    def states(self) -> list[StateFile]:
        """The group's states, oldest first."""
        import pyarrow.fs

        try:
            infos = self.fs.get_file_info(
                pyarrow.fs.FileSelector(self.folder, allow_not_found=True)
            )
        except OSError:
            return []
        found = []
        for info in infos:
            m = _NAME.fullmatch(info.base_name)
            if m and info.type == pyarrow.fs.FileType.File:
                members = tuple(int(x) for x in m.group("members").split("."))
                found.append(StateFile(info.path, int(m.group("step")), members))
        return sorted(found, key=lambda s: s.step)

    def load(self, at_most: int, members: set[int]) -> tuple[StateFile, dict[str, Any]] | None:
        """The newest state at or before step ``at_most`` that holds every one of ``members``,
        read; None when there is none (the group starts from step 0)."""
        import torch

        for candidate in reversed(self.states()):
            if candidate.step > at_most or not members <= set(candidate.members):
                continue
            with self.fs.open_input_stream(candidate.path) as f:
                data = f.read()
            return candidate, torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)
        return None
