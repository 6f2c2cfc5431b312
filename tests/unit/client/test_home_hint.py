"""The seam for following a cluster replica's `harness-home` hint (`_channel.py`)."""

from __future__ import annotations

from harness_client._channel import home_hint


def test_the_home_hint_is_read_from_initial_metadata_as_host_and_port():
    assert home_hint((("harness-stream", "open"), ("harness-home", "10.0.0.7:7770"))) == (
        "10.0.0.7:7770"
    )
    assert home_hint((("harness-home", "replica-2.harness:7770"),)) == "replica-2.harness:7770"
    assert home_hint((("harness-home", "[::1]:7770"),)) == "[::1]:7770"
    assert home_hint((("harness-stream", "open"),)) is None
    assert home_hint(None) is None
    for malformed in ("replica-2", ":7770", "replica-2:http", "replica-2:0", "replica-2:70000"):
        assert home_hint((("harness-home", malformed),)) is None
