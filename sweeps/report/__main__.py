"""``python -m sweeps.report DIR [--wandb ...]``: rebuild a sweep's results.md and plots
(:mod:`sweeps.report.local`)."""

from sweeps.report.local import main

main()
