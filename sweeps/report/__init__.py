"""After the run: :mod:`.results` (rows and results.csv), :mod:`.summary` (the summary rule),
:mod:`.markdown`, :mod:`.page` and :mod:`.local` (results.md and its plots), :mod:`.findings`
(intervals over seeds, paired bootstrap), :mod:`.plots`, :mod:`.heatmaps`, :mod:`.wandb_report`
(the W&B Report) and :mod:`.sweep_runs` (the sweep's W&B runs it is built over).
``python -m sweeps.report DIR`` rebuilds a sweep's page from its results.csv."""
