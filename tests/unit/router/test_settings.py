from __future__ import annotations

import pytest

from gateway.router import RingSettings


def test_the_default_ring_settings_are_the_spec_bounds():
    assert RingSettings() == RingSettings(
        max_entries=4_096,
        max_bytes=64 * 1024 * 1024,
        batch_max_entries=256,
        batch_max_bytes=4 * 1024 * 1024,
    )


@pytest.mark.parametrize(
    "field", ["max_entries", "max_bytes", "batch_max_entries", "batch_max_bytes"]
)
def test_a_ring_setting_below_one_is_refused(field):
    with pytest.raises(ValueError, match=field):
        RingSettings(**{field: 0})
