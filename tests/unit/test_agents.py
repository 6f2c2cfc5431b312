"""`AgentDirectory`: registration, hosting, and the token rules."""

from __future__ import annotations

import pytest

from gateway.clock import FakeClock
from gateway.endpoint.api import AuthFailure, ManagementError, ManagementErrorReason
from gateway.endpoint.runtime import AgentRuntime
from tests.unit.directory_support import ADMIN_TOKEN, directory


async def test_a_registered_agent_is_hosted_and_its_token_authenticates_to_its_runtime():
    async with directory() as built:
        registered = await built.agents.register("alice")
        assert registered.address == "agent:alice"
        runtime = await built.agents.authenticate(registered.token)
        assert isinstance(runtime, AgentRuntime)
        assert runtime is built.hosted.runtime("alice")
        assert built.hosted.by_id(registered.agent_id) is runtime
        assert (built.hosted.count, built.hosted.names()) == (1, ["alice"])


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("Not A Name", ManagementErrorReason.INVALID_NAME),
        ("alice", ManagementErrorReason.NAME_TAKEN),
    ],
)
async def test_registering_a_bad_or_taken_name_is_refused_with_its_reason(name, reason):
    async with directory() as built:
        await built.agents.register("alice")
        with pytest.raises(ManagementError) as raised:
            await built.agents.register(name)
        assert raised.value.reason is reason
        assert built.hosted.count == 1


async def test_rotating_revokes_the_old_token_and_the_new_one_authenticates():
    async with directory() as built:
        old = (await built.agents.register("alice")).token
        assert isinstance(await built.agents.authenticate(old), AgentRuntime)
        new = await built.agents.rotate_token("alice")
        assert await built.agents.authenticate(old) is AuthFailure.REVOKED
        assert isinstance(await built.agents.authenticate(new), AgentRuntime)
        await built.agents.revoke_token("alice")
        assert await built.agents.authenticate(new) is AuthFailure.REVOKED


async def test_the_admin_token_is_the_wrong_role_for_an_agent_and_others_are_unknown():
    async with directory() as built:
        assert built.agents.is_admin(ADMIN_TOKEN)
        assert not built.agents.is_admin(ADMIN_TOKEN + "x")
        assert await built.agents.authenticate(ADMIN_TOKEN) is AuthFailure.WRONG_ROLE
        assert await built.agents.authenticate("nope") is AuthFailure.UNKNOWN


async def test_an_agent_not_hosted_here_is_not_found():
    async with directory() as built:
        with pytest.raises(ManagementError) as raised:
            built.hosted.runtime("nobody")
        assert raised.value.reason is ManagementErrorReason.NOT_FOUND
        assert raised.value.detail == "agent:nobody is not hosted here"
        with pytest.raises(ManagementError):
            await built.agents.rotate_token("nobody")


async def test_a_restored_directory_hosts_every_stored_agent_and_keeps_its_tokens():
    async with directory() as first:
        token = (await first.agents.register("alice")).token
        store = first.store
    # `directory` closes the runtimes, not the store: the second one starts from its rows.
    async with directory(store) as second:
        await second.agents.restore()
        assert second.hosted.names() == ["alice"]
        assert isinstance(await second.agents.authenticate(token), AgentRuntime)


async def test_registration_is_stamped_by_the_directory_s_clock():
    clock = FakeClock(wall=1_800_000_000.0)  # 2027-01-15T08:00:00Z
    async with directory(clock=clock) as built:
        await built.agents.register("alice")
        [identity] = await built.store.identities()
        assert identity.created_at == "2027-01-15T08:00:00Z"
