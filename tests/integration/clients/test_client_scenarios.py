"""The shared client scenarios (`clients/scenarios.txt`), run by the Python client.

Every Harness Gateway client passes the same list against a real gateway; this module is
the Python side, `clients/node/test/scenarios.test.ts` the TypeScript one, and
`tests/unit/test_client_scenarios_listed.py` keeps both equal to the list: one
`test_<id with - replaced by _>` per scenario, nothing else named `test_*`.

Each test starts a real gateway in this process on port 0 and talks to it only through the
public `harness_client` API (the agents are registered over `ManagementService`, as an
operator would). Every wait is bounded by `BOUND`; "never arrives" is proved by a later
marker arriving first, never by waiting and hoping.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import harness_client
import pytest

from gateway.testing import run_gateway
from tests.integration.clients import client_scenarios as scenarios
from tests.integration.clients.client_scenarios import Setting

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def setting() -> AsyncIterator[Setting]:
    async with run_gateway() as gateway, AsyncExitStack() as stack:
        management = await stack.enter_async_context(
            await harness_client.connect_management(
                gateway.address, admin_token=gateway.admin_token
            )
        )
        yield Setting(gateway=gateway, management=management, stack=stack)


async def test_direct_send(setting: Setting) -> None:
    await scenarios.scenario_direct_send(setting)


async def test_group_send(setting: Setting) -> None:
    await scenarios.scenario_group_send(setting)


async def test_stream_and_acknowledge(setting: Setting) -> None:
    await scenarios.scenario_stream_and_acknowledge(setting)


async def test_reconnect_replay(setting: Setting) -> None:
    await scenarios.scenario_reconnect_replay(setting)


async def test_gather_answers(setting: Setting) -> None:
    await scenarios.scenario_gather_answers(setting)


async def test_all_gather_answers(setting: Setting) -> None:
    await scenarios.scenario_all_gather_answers(setting)


async def test_send_error_reasons(setting: Setting) -> None:
    await scenarios.scenario_send_error_reasons(setting)


async def test_collective_error_kinds(setting: Setting) -> None:
    await scenarios.scenario_collective_error_kinds(setting)


async def test_own_question(setting: Setting) -> None:
    await scenarios.scenario_own_question(setting)


async def test_oversized_message(setting: Setting) -> None:
    await scenarios.scenario_oversized_message(setting)


async def test_listen_error_reason(setting: Setting) -> None:
    await scenarios.scenario_listen_error_reason(setting)


async def test_acknowledge_error_reason(setting: Setting) -> None:
    await scenarios.scenario_acknowledge_error_reason(setting)


async def test_message_text_error(setting: Setting) -> None:
    await scenarios.scenario_message_text_error(setting)


async def test_authentication_error(setting: Setting) -> None:
    await scenarios.scenario_authentication_error(setting)


async def test_connect_unreachable(setting: Setting) -> None:
    await scenarios.scenario_connect_unreachable(setting)


async def test_idempotent_send(setting: Setting) -> None:
    await scenarios.scenario_idempotent_send(setting)


async def test_read_send(setting: Setting) -> None:
    await scenarios.scenario_read_send(setting)
