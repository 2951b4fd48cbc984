"""What the launch's stages run on: Ray, the console, the budget, preemption, the checks before
``--resume``, the trials' logs, the MPS daemon."""
