"""``python -m sweeps.heatmaps CKPT --output DIR``: attention heatmaps of a checkpoint, kept at
this name for the documented command; the code is :mod:`sweeps.report.heatmaps`."""

from sweeps.report.heatmaps import main

if __name__ == "__main__":
    main()
