from __future__ import annotations

import pytest
from harness_contract.addresses import (
    DirectConversation,
    GroupConversation,
    canonicalize,
    check_known,
    is_address_syntax,
    is_agent_name,
)
from harness_contract.errors import SendError, SendErrorReason

INVALID = SendErrorReason.INVALID_ADDRESS
MEMBERSHIP = SendErrorReason.MEMBERSHIP_INVALID


def others(count: int) -> list[str]:
    return [f"agent-{index:02d}" for index in range(count)]


@pytest.mark.parametrize(
    "name", ["abc", "a" * 32, "a-b", "a1-b2-c3", "007", "bob", "gather-member-a"]
)
def test_valid_agent_names_are_accepted(name):
    assert is_agent_name(name)


@pytest.mark.parametrize(
    "name",
    ["ab", "a" * 33, "a--b", "-ab", "ab-", "Abc", "abé", "bob\n", " bob", "a_b", "", None, 5],
)
def test_invalid_agent_names_are_refused(name):
    assert not is_agent_name(name)


def test_a_direct_address_is_the_two_member_conversation():
    conversation = canonicalize("agent:bob", "alice")
    assert conversation == DirectConversation(local="alice", peer="bob")
    assert conversation.members == ("alice", "bob")
    assert conversation.address == "agent:bob"


@pytest.mark.parametrize("address", ["group:carol,bob", "group:bob,alice,carol"])
def test_a_group_in_any_order_canonicalizes_with_self_inserted(address):
    conversation = canonicalize(address, "alice")
    assert isinstance(conversation, GroupConversation)
    assert conversation.address == "group:alice,bob,carol"
    assert conversation.others == ("bob", "carol")


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("agent:alice", MEMBERSHIP),
        ("group:alice", MEMBERSHIP),
        ("group:bob", MEMBERSHIP),
        ("group:alice,bob", MEMBERSHIP),
        ("group:bob,bob,carol", MEMBERSHIP),
        ("group:alice,alice,bob,carol", MEMBERSHIP),
        ("group:", INVALID),
        ("group:bob,,carol", INVALID),
        ("group:bob,Carol", INVALID),
        ("group:bob, carol", INVALID),
        ("@bob", INVALID),
        ("Agent:bob", INVALID),
        (" agent:bob", INVALID),
        ("agent:bob ", INVALID),
        ("agent:", INVALID),
        ("agent:Bob", INVALID),
        ("bob", INVALID),
        ("", INVALID),
    ],
)
def test_address_refusals_follow_the_spec_table(address, reason):
    with pytest.raises(SendError) as raised:
        canonicalize(address, "alice")
    assert raised.value.send_reason is reason


def test_self_only_direct_address_says_so():
    with pytest.raises(SendError) as raised:
        canonicalize("agent:alice", "alice")
    assert raised.value.message == "send failed: the address names only you"


def test_a_group_of_two_other_agents_is_three_members_and_valid():
    assert len(canonicalize("group:" + ",".join(others(2)), "alice").members) == 3


def test_a_group_naming_one_other_agent_is_two_members_and_refused():
    with pytest.raises(SendError) as raised:
        canonicalize("group:" + ",".join(others(1)), "alice")
    assert raised.value.send_reason is MEMBERSHIP


def test_thirty_two_members_with_self_are_valid_and_thirty_three_are_not():
    assert len(canonicalize("group:" + ",".join(others(31)), "alice").members) == 32
    with_self = [*others(31), "alice"]
    assert len(canonicalize("group:" + ",".join(with_self), "alice").members) == 32
    with pytest.raises(SendError) as raised:
        canonicalize("group:" + ",".join(others(32)), "alice")
    assert raised.value.send_reason is MEMBERSHIP


def test_a_duplicate_is_refused_before_the_size_check():
    with pytest.raises(SendError) as raised:
        canonicalize("group:bob,bob", "alice")
    assert raised.value.send_reason is MEMBERSHIP


def test_the_first_unknown_member_in_name_order_decides():
    conversation = canonicalize("group:zed,carol,bob", "alice")
    known = {"bob"}
    with pytest.raises(SendError) as raised:
        check_known(conversation, known.__contains__)
    assert raised.value.send_reason is SendErrorReason.UNKNOWN_AGENT
    assert raised.value.detail == "agent:carol is not registered with the gateway"
    check_known(conversation, {"bob", "carol", "zed"}.__contains__)


def test_address_syntax_accepts_inputs_without_membership_rules():
    assert is_address_syntax("agent:alice")
    assert is_address_syntax("group:bob")
    assert is_address_syntax("group:bob,bob")
    assert not is_address_syntax("group:")
    assert not is_address_syntax("agent:B")
    assert not is_address_syntax(None)
