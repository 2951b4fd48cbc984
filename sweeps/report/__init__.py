"""After the run: :mod:`.results` (rows and results.csv), :mod:`.summary` (the summary rule),
:mod:`.markdown` and :mod:`.local` (results.md and its plots), :mod:`.findings` (intervals over
seeds, paired bootstrap), :mod:`.plots`, :mod:`.heatmaps` and :mod:`.wandb_report` (the W&B
Report). ``python -m sweeps.report DIR`` rebuilds a sweep's page from its results.csv."""
