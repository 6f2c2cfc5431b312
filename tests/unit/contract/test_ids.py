from __future__ import annotations

import pytest
from harness_contract.ids import (
    HashId,
    RandomId,
    agent_id_order_key,
    b64,
    collective_id,
    is_collective_id,
    is_nonce,
    mint_collective,
    unb64,
)

ZERO = "agt_AAAAAAAAAAAAAAAAAAAAAA"
SEVEN_F = "agt_f39_f39_f39_f39_f39_fw"
F_B = "agt_-_v7-_v7-_v7-_v7-_v7-w"
BYTES_0_31 = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8"


@pytest.mark.parametrize(
    ("requester", "nonce", "expected"),
    [
        ("agent:alice", "A" * 43, "col_b11I-g07E7R7dmBozmpbVeRn6xlpSwbAmunn4s9nWsc"),
        ("agent:alice", BYTES_0_31, "col_ib8MKCc83fw3KizAZOr5mv0M-iMaM-TJP0uy81tVKtE"),
        ("agent:bob", BYTES_0_31, "col_Rhr5lOgrT37Jhpdr-n3b4Wo5t1ft9TXpk3qm6QK0b9o"),
    ],
)
def test_collective_id_derives_the_published_vectors(requester, nonce, expected):
    assert collective_id(requester, nonce) == expected
    assert is_collective_id(expected)


def test_a_minted_collective_id_derives_from_its_nonce_and_requester():
    nonce, operation_id = mint_collective("agent:alice")
    assert is_nonce(nonce)
    assert operation_id == collective_id("agent:alice", nonce)
    assert operation_id != collective_id("agent:bob", nonce)


def test_agent_ids_order_by_their_bytes_not_their_text():
    assert sorted([F_B, SEVEN_F, ZERO], key=agent_id_order_key) == [ZERO, SEVEN_F, F_B]
    assert sorted([F_B, SEVEN_F, ZERO]) == [F_B, ZERO, SEVEN_F]


def test_conversation_id_of_the_byte_ordered_identity_matches_the_vector():
    identity = {
        "kind": "conversation_identity",
        "memberAgentIds": [ZERO, SEVEN_F, F_B],
        "version": "harness/1",
    }
    assert HashId.CONVERSATION.of(identity) == "cnv_qF0CzgWIvDEnr30lD2k820Oo1Hx_7hHXB5jv02vC5bQ"
    assert HashId.CONVERSATION.is_valid(HashId.CONVERSATION.of(identity))


@pytest.mark.parametrize("kind", list(RandomId))
def test_minted_identifiers_decode_to_their_size_and_are_distinct(kind):
    first, second = kind.mint(), kind.mint()
    assert first != second
    assert len(first) == kind.text_length
    decoded = kind.decode(first)
    assert decoded is not None
    assert len(decoded) == kind.size


def test_identifier_lengths_match_the_spec_table():
    assert RandomId.AGENT.text_length == 4 + 22
    assert RandomId.POST.text_length == 4 + 43
    assert RandomId.DELIVERY.text_length == 4 + 43
    assert RandomId.NONCE.text_length == 43


@pytest.mark.parametrize(
    "text",
    [
        "agt_AAAAAAAAAAAAAAAAAAAAAB",  # non-zero trailing bits: does not re-encode
        "agt_AAAAAAAAAAAAAAAAAAAAA",  # short
        "agt_AAAAAAAAAAAAAAAAAAAAAAA",  # long
        "pst_AAAAAAAAAAAAAAAAAAAAAA",  # wrong prefix
        "agt_AAAAAAAAAAAAAAAAAAAA+/",  # standard alphabet, not url-safe
        "agt_AAAAAAAAAAAAAAAAAAAA==",  # padding
        "",
        None,
        17,
    ],
)
def test_agent_id_decoder_rejects_non_canonical_texts(text):
    assert RandomId.AGENT.decode(text) is None


def test_unpadded_base64url_round_trips_and_rejects_trailing_bits():
    for size in range(40):
        data = bytes(range(size))
        assert unb64(b64(data)) == data
    assert unb64("AB") is None  # 'B' leaves non-zero trailing bits for one byte
    assert unb64("AA") == b"\x00"
    assert unb64("A") is None
    assert unb64("A A") is None


def test_collective_id_validation_rejects_wrong_shapes():
    assert not is_collective_id("col_x")
    assert not is_collective_id("cnv_" + "A" * 43)
    assert not is_collective_id(None)
    assert not is_nonce("A" * 42)
    assert not is_nonce("A" * 42 + "=")
