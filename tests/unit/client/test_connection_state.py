from __future__ import annotations

import logging

import pytest
from harness_client import ConnectionState
from harness_client._connection import _ConnectionStates


def test_a_listener_hears_each_change_once_and_nothing_after_it_unsubscribed():
    states = _ConnectionStates()
    heard: list[ConnectionState] = []
    unsubscribe = states.subscribe(heard.append)
    states.report(ConnectionState.READY)
    states.report(ConnectionState.READY)
    states.report(ConnectionState.RECONNECTING)
    unsubscribe()
    unsubscribe()
    states.report(ConnectionState.READY)
    assert heard == [ConnectionState.READY, ConnectionState.RECONNECTING]
    assert states.state is ConnectionState.READY


def test_closed_is_final():
    states = _ConnectionStates()
    heard: list[ConnectionState] = []
    states.subscribe(heard.append)
    states.report(ConnectionState.CLOSED)
    states.report(ConnectionState.CONNECTING)
    assert states.state is ConnectionState.CLOSED
    assert heard == [ConnectionState.CLOSED]


def test_a_listener_that_raises_is_logged_and_the_others_still_hear(
    caplog: pytest.LogCaptureFixture,
):
    states = _ConnectionStates()
    heard: list[ConnectionState] = []

    def broken(state: ConnectionState) -> None:
        raise RuntimeError("listener defect")

    states.subscribe(broken)
    states.subscribe(heard.append)
    with caplog.at_level(logging.ERROR, logger="harness_client._connection"):
        states.report(ConnectionState.READY)
    assert heard == [ConnectionState.READY]
    assert "listener failed" in caplog.text
