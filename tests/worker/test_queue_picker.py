"""scheduling.QueuePicker: queues share claims by weight, usage decays, ties rotate."""

from __future__ import annotations

from collections import Counter

import pytest

from django_iq.scheduling import USAGE_HALF_LIFE_SECONDS, QueuePicker


def picker() -> QueuePicker:
    # A fixed clock (now=0.0 on every call) so usage only decays when a test moves time.
    return QueuePicker(_decayed_at=0.0)


def serve(p: QueuePicker, weights: dict[str, int], rounds: int) -> Counter[str]:
    """Claim from the first queue offered ``rounds`` times, each claim costing one second."""
    served: Counter[str] = Counter()
    for _ in range(rounds):
        first = p.order(weights, now=0.0)[0]
        p.record(first, 1.0)
        served[first] += 1
    return served


def test_queues_are_served_in_proportion_to_their_weights() -> None:
    served = serve(picker(), {"emails": 2, "default": 1, "reports": 1}, rounds=400)

    assert served["emails"] == pytest.approx(200, abs=2)
    assert served["default"] == pytest.approx(100, abs=2)
    assert served["reports"] == pytest.approx(100, abs=2)


def test_a_queue_with_less_usage_per_weight_comes_first() -> None:
    p = picker()
    p.record("a", 10.0)
    p.record("b", 4.0)

    # a: 10 / 5 = 2 per unit of weight; b: 4 / 1 = 4; c has none.
    assert p.order({"a": 5, "b": 1, "c": 1}, now=0.0) == ["c", "a", "b"]


def test_usage_halves_every_half_life() -> None:
    p = picker()
    p.record("a", 8.0)

    p.order({"a": 1}, now=USAGE_HALF_LIFE_SECONDS)
    assert p.usage["a"] == pytest.approx(4.0)

    p.order({"a": 1}, now=3 * USAGE_HALF_LIFE_SECONDS)
    assert p.usage["a"] == pytest.approx(1.0)


def test_usage_that_has_decayed_to_nothing_is_forgotten() -> None:
    p = picker()
    p.record("a", 1.0)

    p.order({"a": 1}, now=30 * USAGE_HALF_LIFE_SECONDS)

    assert "a" not in p.usage


def test_a_clock_that_goes_backwards_does_not_decay() -> None:
    p = QueuePicker(_decayed_at=100.0)
    p.record("a", 2.0)

    p.order({"a": 1}, now=50.0)

    assert p.usage["a"] == 2.0


def test_ties_rotate_so_no_queue_is_always_asked_first() -> None:
    p = picker()
    weights = {"a": 1, "b": 1, "c": 1}

    orders = [p.order(weights, now=0.0) for _ in range(4)]

    assert orders == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]


def test_a_zero_weight_counts_as_one() -> None:
    p = picker()
    p.record("a", 1.0)
    p.record("b", 2.0)

    assert p.order({"a": 0, "b": 1}, now=0.0)[0] == "a"


def test_no_queues_gives_an_empty_order() -> None:
    assert picker().order({}, now=0.0) == []
