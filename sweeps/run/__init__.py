"""The driver: what runs in the launching process. :mod:`.pipeline` runs the stages of a launch
(:mod:`.stages`, then :mod:`.finish`) over its state (:mod:`.launch_state`), each a point where a
stop (:mod:`.preemption`) and the budget (:mod:`.budget`) are checked;
:mod:`.experiment` builds the one Tune experiment of a sweep, with :mod:`.searcher` (Optuna, one
study per unit), :mod:`.schedulers` (early stopping within a unit), :mod:`.packing` (longest
trials first) and :mod:`.console` (the progress line); :mod:`.cluster` joins or starts Ray and
checks resources and storage; :mod:`.resume_check` repairs what a crash left before ``--resume``."""
