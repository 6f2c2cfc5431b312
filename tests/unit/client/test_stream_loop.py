from __future__ import annotations

from harness_client._stream import _ReplayFilter


def test_the_replay_filter_passes_a_token_once():
    replay = _ReplayFilter()
    assert replay.first_time("a")
    assert not replay.first_time("a")
    assert replay.first_time("b")


def test_the_replay_filter_is_bounded_and_forgets_the_oldest_first():
    replay = _ReplayFilter(capacity=2)
    for token in ("a", "b", "c"):
        assert replay.first_time(token)
    assert replay.first_time("a")  # forgotten, so it passes again
    assert not replay.first_time("c")
