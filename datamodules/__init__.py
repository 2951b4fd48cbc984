"""LightningDataModules serving batches per docs/CONTRACTS.md. Needs only torch and lightning."""
from .copy_task import CopyTaskDataModule

__all__ = ["CopyTaskDataModule"]
from .wmt17 import WMT17DataModule  # noqa: E402

__all__ += ["WMT17DataModule"]
