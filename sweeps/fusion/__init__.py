"""Fused trials: trials whose models share every shape train as one model with a leading member
dimension, each member still a trial of its own everywhere a user looks.

- :mod:`.plan`: which trials fuse, decided before Ray starts from the resolved plans (and what
  ``--dry-run`` prints about it);
- :mod:`.searcher`: hands a group's members to Tune one after another (Optuna's samples of a group
  asked together);
- :mod:`.member`: the thin trainable of a member trial: it joins its group, passes each report
  the group publishes for it to ``tune.report`` and keeps its W&B run;
- :mod:`.group`: the Ray actor that trains a group (one per group, on its first member's node);
- :mod:`.steps`: what the actor does at a validation: each member validated, checkpointed and
  reported as an unfused trial would be;
- :mod:`.state`: the group's resume state beside the experiment;
- :mod:`.roster`: the driver's record of the members Tune has ended, which groups wait on.
"""
