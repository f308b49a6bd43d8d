"""Pure tests of the coordinator's lifecycle (actors/core/lease.py, `CoordinatorLifecycle`): the
decisions of D5 (a lapse taken back, or a step down), K3 and K4 (a store that went back is
written back from memory), K8 (the first look of a store lost with the coordinator) and K10
(`WriteHealth`: readiness does not flap), as transitions, with no I/O and the clock passed in.
The shell that runs them (actors/app.py) is covered by the process tests (test_store_went_back,
test_coordinator_outage, test_readyz_stall)."""

from __future__ import annotations

import pytest

from rsc.actors.core.lease import (
    CoordinatorLifecycle,
    LapseVerdict,
    Next,
    OutageEnded,
    OutageLasts,
    OutageStarted,
    Renewal,
    WriteHealth,
    instance_host_pid,
    instance_id,
    looks_for_lost_store,
    writes_store_id,
)
from rsc.actors.core.records import PrefixSnapshot

OWN = "host-a-4242-abcd1234"
LEASE_MS = 3000  # the coordinator lease: three ticks
MEMBER_TTL_MS = 10_000


def started(epoch: int = 1, at: float = 0.0) -> CoordinatorLifecycle:
    life = CoordinatorLifecycle(own_id=OWN, lease_ms=LEASE_MS, member_lease_ttl_ms=MEMBER_TTL_MS)
    assert not life.lease_taken(epoch, at, others_ran=False)
    return life


def memory() -> dict[str, PrefixSnapshot]:
    return {"orders": PrefixSnapshot()}


# --- D5: each tick's renewal ---------------------------------------------------------------


def test_d5_a_renewal_that_found_the_lease_ours_checks_the_store_then_holds():
    life = started()
    assert life.renewal(1000, Renewal.RENEWED) is Next.CHECK_STORE
    assert life.store_checked(None) is Next.HELD
    assert life.continuity is not None and life.continuity.expiry_allowed(1500)


def test_d4_a_failed_or_stalled_renewal_learns_nothing_and_waits_for_the_next_tick():
    life = started()
    assert life.renewal(1000, Renewal.FAILED) is Next.FAILED
    assert life.continuity is not None and life.continuity.broken is None
    assert life.continuity.holds(2999) and not life.continuity.holds(3000)


@pytest.mark.parametrize("outcome", [Renewal.LAPSED, Renewal.TAKEN])
def test_d5_a_renewal_that_found_the_lease_lapsed_or_taken_asks_what_the_store_holds(outcome):
    life = started()
    assert life.renewal(1000, outcome) is Next.READ_LAPSE_FACTS


def test_d5_a_renewal_after_a_gap_past_the_lease_is_a_lapse():
    life = started()
    assert life.renewal(LEASE_MS, Renewal.RENEWED) is Next.READ_LAPSE_FACTS


def test_d5_a_plain_lapse_is_taken_back_and_expiry_waits_one_member_lease():
    life = started()
    life.renewal(1000, Renewal.LAPSED)
    assert life.lapse_found(LapseVerdict.TAKE_BACK) is Next.RETAKE
    assert life.retaken(True, 1200) is Next.CHECK_STORE
    assert life.taken_back == "the renewal found the lease lapsed"
    assert life.store_checked(None) is Next.HELD
    lease = life.continuity
    assert lease is not None and lease.holds(1300)
    assert not lease.expiry_allowed(1200 + MEMBER_TTL_MS - 1)  # fresh leases (H12)


def test_d5_a_lapse_that_cannot_be_taken_back_steps_down_and_restores_from_redis():
    life = started()
    life.renewal(1000, Renewal.LAPSED)
    life.lapse_found(LapseVerdict.TAKE_BACK)
    assert life.retaken(False, 1200) is Next.STEP_DOWN
    end = life.epoch_ended(1300, memory)
    assert end.verdict is LapseVerdict.TAKE_BACK and not end.writes_back
    assert end.reason == "the renewal found the lease lapsed"
    assert end.then.endswith("restoring every prefix under a new coordinator epoch")
    assert end.readiness == "the coordinator lease lapsed (the renewal found the lease lapsed)"


def test_d5_another_coordinator_steps_this_one_down_without_a_write_back():
    life = started(epoch=3)
    life.renewal(1000, Renewal.TAKEN)
    assert life.lapse_found(LapseVerdict.STEP_DOWN) is Next.STEP_DOWN
    end = life.epoch_ended(1100, memory)
    assert (end.epoch, end.verdict, end.writes_back) == (3, LapseVerdict.STEP_DOWN, False)
    assert life.went_back is None


def test_d5_a_fenced_write_ends_the_epoch_as_a_step_down():
    life = started()
    life.fenced("fenced by coordinator epoch 4")
    end = life.epoch_ended(100, memory)
    assert (end.reason, end.verdict, end.writes_back) == (
        "fenced by coordinator epoch 4", LapseVerdict.STEP_DOWN, False)


def test_d5_an_epoch_that_ended_without_a_word_says_its_lease_lapsed():
    life = started()
    assert life.epoch_ended(100, None).reason == "the lease lapsed"
    life = started()
    end = life.epoch_ended(LEASE_MS + 10, None)
    assert end.reason.startswith("no renewal for 3010 ms") and end.verdict is LapseVerdict.STEP_DOWN


# --- K3, K4: a store that went back --------------------------------------------------------


def test_k3_a_check_that_finds_lost_writes_ends_the_epoch_with_a_write_back():
    life = started(epoch=2)
    life.renewal(1000, Renewal.RENEWED)
    assert life.store_checked("the marker rsc:store-mark is missing") is Next.STEP_DOWN
    end = life.epoch_ended(1100, memory)
    assert end.verdict is LapseVerdict.STORE_WENT_BACK and end.writes_back
    assert end.reason == "the store went back: the marker rsc:store-mark is missing"
    assert end.readiness.startswith("the store went back (") and "writing it back" in end.readiness
    went_back = life.went_back
    assert went_back is not None and went_back.epoch == 2 and set(went_back.memory) == {"orders"}


def test_k3_a_lapse_whose_stored_epoch_is_lower_writes_back():
    life = started(epoch=5)
    life.renewal(1000, Renewal.LAPSED)
    assert life.lapse_found(LapseVerdict.STORE_WENT_BACK) is Next.STEP_DOWN
    assert life.epoch_ended(1100, memory).writes_back


def test_k3_an_epoch_that_served_no_prefixes_has_nothing_to_write_back():
    life = started()
    life.store_checked("the epoch key is missing")
    end = life.epoch_ended(100, None)
    assert end.verdict is LapseVerdict.STORE_WENT_BACK and not end.writes_back


def test_k3_a_write_back_that_failed_is_tried_again_and_keeps_what_memory_held():
    life = started(epoch=2)
    life.store_checked("lost")
    life.epoch_ended(100, memory)
    assert not life.lease_taken(3, 200, others_ran=False)  # the write-back epoch
    assert life.rewrite_failed("Redis is loading")
    end = life.epoch_ended(300, lambda: {})
    assert end.writes_back and end.reason == "the rewrite failed: Redis is loading"
    assert life.went_back is not None and set(life.went_back.memory) == {"orders"}  # kept
    life.lease_taken(4, 400, others_ran=False)
    life.served_epoch()
    assert life.went_back is None and not life.writes_back


def test_k3_a_failed_start_is_not_a_write_back_to_try_again():
    life = started()
    assert not life.rewrite_failed("cannot use Redis")  # raised: exit 1 at start


def test_k3_another_coordinator_that_held_the_lease_meanwhile_drops_the_write_back():
    life = started(epoch=2)
    life.store_checked("lost")
    life.epoch_ended(100, memory)
    assert life.lease_taken(7, 200, others_ran=True)
    assert life.went_back is None and not life.writes_back


# --- D5: a waiting coordinator ------------------------------------------------------------


def test_d5_a_lease_key_still_naming_this_process_is_nobodys():
    life = started()
    assert life.look(OWN) is None and life.look("other-1-x") == "other-1-x"


def test_d3_redis_unreachable_at_start_exits_but_later_outages_are_waited_out():
    life = CoordinatorLifecycle(own_id=OWN, lease_ms=LEASE_MS, member_lease_ttl_ms=MEMBER_TTL_MS)
    assert life.look_failed(looked=False)  # never answered: exit 1
    assert not life.look_failed(looked=True)
    life.lease_taken(1, 0, others_ran=False)
    life.served_epoch()
    assert not life.look_failed(looked=False)


def test_k4_a_write_back_pending_waits_out_a_redis_restarting_even_at_start():
    life = started()
    life.store_checked("lost")
    life.epoch_ended(100, memory)
    assert not life.look_failed(looked=False)


# --- K8 -----------------------------------------------------------------------------------


def test_k8_only_an_epoch_knowing_no_store_id_and_writing_nothing_back_looks_for_a_lost_store():
    assert looks_for_lost_store(store_id=None, from_clients=False, writes_back=False)
    assert not looks_for_lost_store(store_id="abc", from_clients=False, writes_back=False)
    assert not looks_for_lost_store(store_id=None, from_clients=True, writes_back=False)
    assert not looks_for_lost_store(store_id=None, from_clients=False, writes_back=True)


def test_k8_the_store_id_waits_for_the_clients_only_while_none_was_presented():
    assert not writes_store_id(store_id=None, from_clients=True)
    assert writes_store_id(store_id="abc", from_clients=True)
    assert writes_store_id(store_id=None, from_clients=False)


# --- K10 ----------------------------------------------------------------------------------


def test_k10_an_outage_is_said_once_reminded_and_ended_after_the_latch():
    health = WriteHealth(reminder_s=10, latch_s=10)
    assert health.failed(0, "down") == OutageStarted("down") and not health.healthy
    assert health.failed(1, "down") is None
    assert health.succeeded(2) is None and not health.healthy  # within the latch
    assert health.failed(11, "down") == OutageLasts(11.0, 3, "down")
    assert health.succeeded(12) is None
    assert health.settle(20.9) is None
    assert health.settle(21) == OutageEnded(11.0, 3) and health.healthy
    assert health.settle(40) is None


def test_k10_a_store_failing_every_other_second_is_one_outage():
    health = WriteHealth(reminder_s=10, latch_s=10)
    notices = []
    for second in range(30):
        notices.append(health.failed(second, "x") if second % 2 == 0 else health.succeeded(second))
    said = [notice for notice in notices if notice is not None]
    assert said == [OutageStarted("x"), OutageLasts(10.0, 6, "x"), OutageLasts(20.0, 11, "x")]


# --- the instance id ----------------------------------------------------------------------


def test_the_instance_id_names_its_host_and_pid_however_many_dashes_the_host_has():
    value = instance_id("vm-19005", 4242, "d7d921da")
    assert value == "vm-19005-4242-d7d921da"
    assert instance_host_pid(value) == ("vm-19005", 4242)
    assert instance_host_pid("not-an-id") is None
    assert instance_host_pid("plain") is None
