"""The worker: what runs inside a Ray trial. :mod:`.trainable` (one process) and :mod:`.ddp`
(Ray Train workers) share :mod:`.fitting` (seed, data, module, restore, Trainer arguments, fit),
:mod:`.callbacks` (the report to Ray, fault injection, stopping) and :mod:`.checkpoints`;
:mod:`.settings` is what every trial of a sweep shares, :mod:`.stop_when` the rule that ends a
converged trial, :mod:`.wandb_logger` the trial's W&B run, :mod:`.phases` where a trial's wall
time went; the datamodule and module come from the resolved config through :mod:`sweeps.build`."""
