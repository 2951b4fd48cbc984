"""What a file handed to ``load_from_checkpoint`` (of ``Seq2SeqModule`` and of both datamodules)
is, when it is no Lightning checkpoint: one line naming the file, what it is and what to pass
instead (:class:`LoadsCheckpointFiles`, the classes' common base).

torch's own errors on such a file say little of it: ``KeyError: '101'`` for a text file,
``EOFError`` with no message for an empty one, ``KeyError: 'pytorch-lightning_version'`` for a
``state_dict`` saved with ``torch.save``, a 600-character advice on ``weights_only`` for a
requirements file, "[enforce fail at inline_container.cc...]" for a zip archive torch did not
write, ``IsADirectoryError`` for a sweep trial's checkpoint folder.

Only what the file itself shows is said; anything else (a real checkpoint of another model, a
state dict whose shapes differ) keeps Lightning's own error. One more thing is said for the
datamodules (:func:`datamodule_settings_problem`): a checkpoint that stores no datamodule settings
(Lightning built a default-configured datamodule from it), or another datamodule's (Lightning
dropped the settings the class does not take and failed on what was left, or not at all).
"""

from __future__ import annotations

import functools
import inspect
import os
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.core.datamodule import LightningDataModule

from . import TASKS, datamodule_class

#: the Lightning checkpoint file in a sweep trial's checkpoint folder (``sweeps.layout``'s
#: ``CHECKPOINT_FILE``, the same name)
TRIAL_CHECKPOINT_FILE = "checkpoint.ckpt"

#: what every message ends with: where a checkpoint comes from
WHAT_TO_PASS = (
    "pass a Lightning checkpoint (a .ckpt file written by Trainer.save_checkpoint or "
    "ModelCheckpoint; a sweep's: results.csv's checkpoint column)"
)

#: the keys every checkpoint Lightning writes holds (``hyper_parameters`` only where the module
#: saved some: without it a checkpoint is still Lightning's, and its error is Lightning's own)
LIGHTNING_KEYS = ("pytorch-lightning_version", "state_dict")

#: where the two files torch.save writes begin: a zip archive (torch 1.6 on) or a pickle
ZIP_MAGIC, PICKLE_MAGIC = b"PK\x03\x04", b"\x80"


class CheckpointError(ValueError):
    """A file handed to ``load_from_checkpoint`` that is no Lightning checkpoint (one line)."""


def _torchscript_on_the_stack() -> bool:
    """Whether a frame of ``torch.jit`` calls: Lightning lets TorchScript call
    ``load_from_checkpoint`` on an instance (pytorch/pytorch#67146), so this does too."""
    frame = inspect.currentframe()
    while frame is not None:
        if os.path.join("torch", "jit") in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False


class class_only(classmethod):
    """A classmethod that raises ``TypeError`` when called on an instance, as Lightning's
    ``load_from_checkpoint`` does, without its cost: Lightning's decorator calls
    ``inspect.stack()`` on every call, from the class too, which reads the source of every frame
    on the stack and looks each file's module up among every loaded one (10-20 ms a call under
    pytest, twice per load through this base). This one walks the frames only for a call on an
    instance, the one it refuses."""

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        bound = super().__get__(instance, owner)
        if instance is None:
            return bound
        method = self.__func__

        @functools.wraps(method)
        def refuse(*args: Any, **kwargs: Any) -> Any:
            if _torchscript_on_the_stack():
                return bound(*args, **kwargs)
            raise TypeError(
                f"The classmethod `{type(instance).__name__}.{method.__name__}` cannot be called "
                "on an instance. Please call it on the class type and make sure the return value "
                "is used."
            )

        return refuse


class LoadsCheckpointFiles:
    """A base, before ``LightningModule`` or ``LightningDataModule``, whose ``load_from_checkpoint``
    is Lightning's with two additions: a file that is no Lightning checkpoint (a folder, an empty
    or text file, a ``state_dict`` saved with ``torch.save``, a checkpoint cut short on disk)
    raises :class:`CheckpointError`, one line naming the file, what it is and what to pass, in
    place of torch's error on its bytes; and a datamodule loaded from a checkpoint that stores no
    datamodule settings, or another datamodule's, raises :class:`CheckpointError` saying which
    (:func:`datamodule_settings_problem`; checked for a checkpoint given as a local file).
    Lightning's arguments pass through as they are; like Lightning's, it is called on the class,
    not on an instance."""

    @class_only
    def load_from_checkpoint(cls, checkpoint_path: Any, *args: Any, **kwargs: Any) -> Any:
        hparams_file = args[1] if len(args) > 1 else kwargs.get("hparams_file")
        if issubclass(cls, LightningDataModule) and hparams_file is None:  # a file's settings win
            stored = stored_datamodule_settings(checkpoint_path, kwargs.get("weights_only"))
            problem = None if stored is None else datamodule_settings_problem(cls, stored)
            if problem is not None:
                raise CheckpointError(f"{checkpoint_path}: {problem}")
        # Lightning's method itself (``__func__``), past its wrapper's inspect.stack() check: the
        # call on an instance that check refuses was refused above, by class_only
        try:
            return super().load_from_checkpoint.__func__(cls, checkpoint_path, *args, **kwargs)
        except Exception as exc:
            problem = checkpoint_problem(checkpoint_path)
            if problem is None:
                raise
            raise CheckpointError(problem) from exc


def stored_datamodule_settings(
    path: object, weights_only: bool | None = None
) -> Mapping[str, Any] | None:
    """The datamodule settings a Lightning checkpoint file stores ({} where it stores none); None
    where ``path`` is not a local file that loads as a Lightning checkpoint (a stream, a remote
    path, a file that is none: left to the loading and its errors). The tensors are memory-mapped,
    not read."""
    if not isinstance(path, (str, os.PathLike)) or "://" in str(path) or not Path(path).is_file():
        return None
    try:
        held = torch.load(
            path,
            map_location="cpu",
            weights_only=True if weights_only is None else weights_only,
            mmap=True,
        )
    except Exception:  # noqa: BLE001 -- not a checkpoint torch reads this way: the load says why
        return None
    if not isinstance(held, dict) or any(key not in held for key in LIGHTNING_KEYS):
        return None
    settings = held.get(LightningDataModule.CHECKPOINT_HYPER_PARAMS_KEY)
    return dict(settings) if isinstance(settings, Mapping) else {}


def _init_parameters(cls: type) -> set[str]:
    return set(inspect.signature(cls.__init__).parameters) - {"self"}


def datamodule_settings_problem(cls: type, settings: Mapping[str, Any]) -> str | None:
    """What is wrong with loading datamodule ``cls`` from a checkpoint storing ``settings``, in
    one line ending with the fix; None when nothing is.

    No settings: the model was fit without a datamodule (``trainer.fit(model, dataloaders)``), and
    Lightning would build ``cls`` with its defaults, whatever data the model was trained on.
    Another datamodule's settings: those of the project's datamodule whose parameters take more of
    them than ``cls``'s do (a copy-task checkpoint loaded as WMT failed on a range check of the
    settings the two share)."""
    name = cls.__name__
    if not settings:
        return (
            f"the checkpoint stores no datamodule settings (the model was fit without a "
            f"datamodule, e.g. trainer.fit(model, train_dataloaders=...)), so {name}."
            "load_from_checkpoint would build one with its defaults, not the data the model was "
            f"trained on; build the datamodule yourself with the settings it was trained with, "
            f"{name}(...)"
        )
    keys = set(settings)
    foreign = sorted(keys - _init_parameters(cls))
    if not foreign:  # all of them cls's: the other classes are not imported
        return None
    best, best_count = None, len(keys) - len(foreign)
    for task in TASKS:
        other = datamodule_class(task)
        count = len(keys & _init_parameters(other))
        if other is not cls and count > best_count:
            best, best_count = other, count
    if best is None:  # no other class takes more of them: Lightning drops what cls does not take
        return None
    return (
        f"the checkpoint's datamodule settings are {best.__name__}'s, not {name}'s ({name} takes "
        f"no {', '.join(foreign)}); load them with {best.__name__}.load_from_checkpoint(path)"
    )


def checkpoint_problem(path: object) -> str | None:
    """Why ``path``, which did not load as a Lightning checkpoint, is none, in one line ending with
    what to pass; None where the file does not show it (a stream, a remote path, a missing file,
    or a real checkpoint that failed for another reason)."""
    if not isinstance(path, (str, os.PathLike)) or "://" in str(path):
        return None
    file = Path(path)
    if file.is_dir():
        inner = file / TRIAL_CHECKPOINT_FILE
        if inner.is_file():
            return f"{file}: a folder, not a checkpoint file; its checkpoint is {inner}"
        return f"{file}: a folder, not a checkpoint file; {WHAT_TO_PASS}"
    if not file.is_file():
        return None
    what = _what_the_file_is(file)
    return None if what is None else f"{file}: {what}; {WHAT_TO_PASS}"


def _what_the_file_is(file: Path) -> str | None:
    with open(file, "rb") as f:
        head = f.read(4)
    if not head:
        return "an empty file (cut short on disk, or never written)"
    if head == ZIP_MAGIC:
        if not zipfile.is_zipfile(file):
            return (
                "cut short or damaged on disk (a full disk, a copy or a kill while it was written)"
            )
        with zipfile.ZipFile(file) as archive:
            names = archive.namelist()
        if not any(name == "data.pkl" or name.endswith("/data.pkl") for name in names):
            return "a zip archive, but not one torch.save wrote"
    elif not head.startswith(PICKLE_MAGIC):
        return "not a file torch.save wrote"
    return _what_torch_reads(file)


def _what_torch_reads(file: Path) -> str | None:
    """What a file torch.save wrote holds, where that is no Lightning checkpoint (None: a dict
    with Lightning's keys, or a file only a full unpickling reads: left to the error raised)."""
    try:  # weights_only: nothing in the file runs
        held = torch.load(file, map_location="cpu", weights_only=True)
    except Exception:  # noqa: BLE001 -- a pickled class, or damage: the first error says more
        return None
    if not isinstance(held, dict):
        return f"a torch file holding a {type(held).__name__}, not a Lightning checkpoint"
    missing = [key for key in LIGHTNING_KEYS if key not in held]
    if not missing:
        return None
    return (
        f"a torch file, but not a Lightning checkpoint (it has no {', '.join(map(repr, missing))}: "
        "a state_dict or other object saved with torch.save; such a state_dict loads with "
        "load_state_dict into a module built with the same settings)"
    )
