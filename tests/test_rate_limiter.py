"""Specifications for ``workbench.replay.RateLimiter``: samples trained per item inserted, held
between two bounds after a warm-up (Reverb's ``SampleToInsertRatio``, Cassirer et al. 2021).

One behaviour per test, on hand-computed numbers:

* warm-up: nothing is sampled before ``min_inserts`` items; the insert that ends the warm-up counts
  whole, the inserts before it not at all;
* upper bound: a batch of ``n`` may be drawn only while ``sampled + n <= max_ratio * counted``;
* lower bound: inserts wait once the learner owes more than ``slack`` samples below
  ``min_ratio * counted``;
* ``batches_allowed``: whole batches within the upper bound, the remainder carried;
* ``state_dict`` round trip; bad arguments raise ValueError naming the field.
"""

from __future__ import annotations

import math

import pytest

from workbench.replay import RateLimiter

# --- warm-up ------------------------------------------------------------------------------------


def test_nothing_is_sampled_before_min_inserts():
    limiter = RateLimiter(max_ratio=4.0, min_inserts=100)
    limiter.insert(60)
    limiter.insert(39)  # 99 < 100
    assert not limiter.warmed_up
    assert not limiter.can_sample(1)
    assert limiter.batches_allowed(1) == 0
    assert (limiter.inserted, limiter.counted, limiter.sampled) == (99, 0, 0)


def test_the_insert_that_ends_the_warm_up_counts_whole():
    limiter = RateLimiter(max_ratio=4.0, min_inserts=100)
    limiter.insert(60)  # warm-up: not counted
    limiter.insert(50)  # 110 >= 100: all 50 count, not only the 10 past min_inserts
    assert limiter.warmed_up
    assert (limiter.inserted, limiter.counted) == (110, 50)
    # 4 samples per counted item: 200, not 4 * 110 = 440 (no burst owed for the warm-up data)
    assert limiter.can_sample(200) and not limiter.can_sample(201)
    limiter.insert(5)  # after the warm-up every insert counts
    assert (limiter.inserted, limiter.counted) == (115, 55)


def test_an_insert_that_reaches_min_inserts_exactly_ends_the_warm_up():
    limiter = RateLimiter(max_ratio=1.0, min_inserts=100)
    limiter.insert(100)
    assert limiter.warmed_up and limiter.counted == 100
    assert limiter.can_sample(100) and not limiter.can_sample(101)


# --- upper bound --------------------------------------------------------------------------------


def test_upper_bound_sampled_plus_the_batch_within_max_ratio_times_counted():
    limiter = RateLimiter(max_ratio=2.0)
    limiter.insert(10)  # 2 * 10 = 20 samples allowed
    assert limiter.can_sample(20) and not limiter.can_sample(21)
    limiter.sample(16)
    assert limiter.can_sample(4) and not limiter.can_sample(5)  # 16 + 4 = 20 <= 20 < 16 + 5
    limiter.sample(4)
    assert not limiter.can_sample(1)
    limiter.insert(1)  # 2 more
    assert limiter.can_sample(2) and not limiter.can_sample(3)


def test_without_max_ratio_sampling_is_bounded_only_by_the_warm_up():
    limiter = RateLimiter(min_inserts=10)
    limiter.insert(9)
    assert not limiter.can_sample(1)
    limiter.insert(1)
    limiter.sample(10_000)
    assert limiter.can_sample(10_000)


# --- lower bound --------------------------------------------------------------------------------


def test_lower_bound_inserts_wait_once_the_learner_owes_more_than_slack():
    limiter = RateLimiter(min_ratio=0.5, slack=4)
    limiter.insert(8)  # owes 0.5 * 8 = 4 samples: exactly the slack (0 + 4 >= 4)
    assert limiter.can_insert()
    limiter.insert(2)  # owes 5: 0 + 4 < 5
    assert not limiter.can_insert()
    limiter.sample(1)  # 1 + 4 >= 5
    assert limiter.can_insert()


def test_without_slack_the_learner_must_keep_min_ratio_exactly():
    limiter = RateLimiter(min_ratio=1.0, max_ratio=2.0)
    limiter.insert(3)
    assert not limiter.can_insert()  # 0 < 3
    limiter.sample(2)
    assert not limiter.can_insert()  # 2 < 3
    limiter.sample(1)
    assert limiter.can_insert()  # 3 >= 3


def test_inserts_never_wait_during_the_warm_up_or_without_min_ratio():
    warming = RateLimiter(min_ratio=1.0, min_inserts=20)
    warming.insert(19)  # owes nothing yet: the ratio counts from the end of the warm-up
    assert warming.can_insert()
    warming.insert(1)  # the warm-up ends: 20 counted, 0 sampled
    assert not warming.can_insert()
    unbounded = RateLimiter(max_ratio=1.0)
    unbounded.insert(1_000)
    assert unbounded.can_insert()


def test_pending_items_count_as_inserted_so_a_producers_queue_cannot_outrun_the_learner():
    limiter = RateLimiter(min_ratio=1.0, max_ratio=1.0, slack=4)
    limiter.insert(4)
    assert limiter.can_insert()  # owes 4: within the slack
    assert limiter.can_insert(pending=0) and not limiter.can_insert(pending=1)  # 0 + 4 < 5
    limiter.sample(3)
    assert limiter.can_insert(pending=3) and not limiter.can_insert(pending=4)  # 3 + 4 < 8


def test_pending_items_that_would_end_the_warm_up_count_as_its_last_insert():
    limiter = RateLimiter(min_ratio=1.0, min_inserts=20, slack=2)
    limiter.insert(15)
    assert limiter.can_insert(pending=4)  # 19 < 20: still warming up
    assert limiter.can_insert(pending=5) is False  # ends it: 5 counted, 0 + 2 < 5
    limiter.insert(4)
    assert limiter.can_insert(pending=2)  # 2 counted (the warm-up data not): 0 + 2 >= 2
    assert not limiter.can_insert(pending=3)


# --- batches_allowed ----------------------------------------------------------------------------


def test_batches_allowed_are_whole_batches_within_the_upper_bound_remainder_carried():
    limiter = RateLimiter(max_ratio=8.0)
    limiter.insert(15)  # 120 samples: 3 batches of 32 (96), 24 left over
    assert limiter.batches_allowed(32) == 3
    limiter.sample(3 * 32)
    assert limiter.batches_allowed(32) == 0  # 24 < 32
    limiter.insert(15)  # 240 - 96 = 144: 4 batches (the 24 carried)
    assert limiter.batches_allowed(32) == 4
    assert limiter.batches_allowed(1) == 144


def test_batches_allowed_are_zero_during_the_warm_up_and_never_negative():
    limiter = RateLimiter(max_ratio=1.0, min_inserts=10)
    limiter.insert(5)
    assert limiter.batches_allowed(1) == 0
    limiter.insert(5)  # 10 counted
    limiter.sample(15)  # past the bound (sample() records, it does not refuse)
    assert limiter.batches_allowed(1) == 0


def test_batches_allowed_needs_a_max_ratio():
    limiter = RateLimiter(min_ratio=1.0)
    limiter.insert(10)
    with pytest.raises(ValueError, match="max_ratio"):
        limiter.batches_allowed(4)


# --- checkpoints ----------------------------------------------------------------------------------


def test_state_dict_round_trip_restores_the_counters_and_the_answers():
    limiter = RateLimiter(max_ratio=4.0, min_ratio=2.0, min_inserts=10, slack=8)
    limiter.insert(6)
    limiter.insert(7)  # ends the warm-up: 13 inserted, 7 counted
    limiter.sample(8)
    state = limiter.state_dict()
    assert state == {"inserted": 13, "counted": 7, "sampled": 8}

    restored = RateLimiter(max_ratio=4.0, min_ratio=2.0, min_inserts=10, slack=8)
    restored.load_state_dict(dict(state))
    assert restored.state_dict() == state
    assert restored.warmed_up
    # 4 * 7 = 28 samples allowed, 8 drawn: 20 more; 8 + 8 >= 2 * 7 = 14: inserts go on.
    assert restored.can_sample(20) and not restored.can_sample(21)
    assert restored.batches_allowed(5) == limiter.batches_allowed(5) == 4
    assert restored.can_insert() and limiter.can_insert()


# --- arguments ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "arguments, field",
    [
        ({"max_ratio": 0.0}, "max_ratio"),
        ({"max_ratio": -1.0}, "max_ratio"),
        ({"max_ratio": math.inf}, "max_ratio"),
        ({"max_ratio": math.nan}, "max_ratio"),
        ({"min_ratio": 0.0}, "min_ratio"),
        ({"min_ratio": math.nan}, "min_ratio"),
        ({"min_ratio": 2.0, "max_ratio": 1.0}, "min_ratio=2.0 > max_ratio=1.0"),
        ({"min_inserts": -1}, "min_inserts"),
        ({"min_inserts": 1.5}, "min_inserts"),
        ({"min_inserts": True}, "min_inserts"),
        ({"slack": -1.0}, "slack"),
        ({"slack": math.nan}, "slack"),
    ],
)
def test_bad_arguments_raise_value_error_naming_the_field(arguments, field):
    with pytest.raises(ValueError, match=field):
        RateLimiter(**arguments)
