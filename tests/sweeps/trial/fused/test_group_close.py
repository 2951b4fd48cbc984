"""When a fused group whose training is over ends its process (``seconds_to_close``): not while a
member's trial may still ask it for something. Tune ends a member's trial on its final report (ASHA's
``max_t``) while the trial's process still asks the group for its heatmaps; a group that ended then
left that trial's W&B run without them (``ActorDiedError`` in the run's output.log)."""

from __future__ import annotations

from types import SimpleNamespace

from sweeps.trial.fused.group_close import UNRELEASED_GRACE_S, seconds_to_close


def members(*released: bool) -> dict[int, SimpleNamespace]:
    return {j: SimpleNamespace(released=r) for j, r in enumerate(released)}


def test_a_group_ends_at_once_when_every_member_released_it():
    assert seconds_to_close(members(True, True), set(), 2, {}, now=10.0) == 0.0
    # ended by Tune and released: nothing to wait for either
    assert seconds_to_close(members(True, True), {0, 1}, 2, {}, now=10.0) == 0.0


def test_a_group_waits_for_a_member_that_has_not_joined_or_still_runs():
    assert seconds_to_close(members(True), set(), 2, {}, now=10.0) is None
    assert seconds_to_close(members(True, False), set(), 2, {}, now=10.0) is None
    # a member that never joined and that Tune has ended is not waited for
    assert seconds_to_close(members(True), {1}, 2, {}, now=10.0) == 0.0


def test_a_member_ended_by_tune_but_not_released_keeps_the_group_for_the_grace():
    """Member 1's final report ended its trial; its process has not asked for its heatmaps yet."""
    since = {1: 100.0}
    assert seconds_to_close(members(True, False), {1}, 2, since, now=100.0) == UNRELEASED_GRACE_S
    assert (
        seconds_to_close(members(True, False), {1}, 2, since, now=130.0) == UNRELEASED_GRACE_S - 30
    )
    # past the grace its process is taken for gone
    assert (
        seconds_to_close(members(True, False), {1}, 2, since, now=100.0 + UNRELEASED_GRACE_S) <= 0
    )
    # and its release ends the wait at once
    assert seconds_to_close(members(True, True), {1}, 2, since, now=101.0) == 0.0


def test_the_states_go_only_once_no_member_will_resume_from_them():
    """A Ctrl-C just as a group published its members' final reports: one member's trial had
    handed its own to Tune, the other's was stopped first. The group took both as done and
    removed its states, and on --resume the second member trained again from step 0."""
    from sweeps.trial.fused.group_close import states_spent

    def member(taken=False, left=False, final=True):
        return SimpleNamespace(taken=taken, left=left, final=final, released=taken or left)

    stopped_before_handing = {0: member(taken=True), 1: member(left=True)}
    assert not states_spent(stopped_before_handing, set(), 2)
    assert states_spent({0: member(taken=True), 1: member(taken=True)}, set(), 2)
    # a member a scheduler stopped (Tune ended it): it will not resume either
    assert states_spent({0: member(taken=True), 1: member(left=True, final=False)}, {1}, 2)
    assert not states_spent({0: member(taken=True)}, set(), 2)  # one never joined
