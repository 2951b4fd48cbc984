"""W&B's side: :mod:`.wandb_env` (online, offline or disabled, decided once) and
:mod:`.wandb_runs` (reading and completing the offline ``.wandb`` run files)."""
