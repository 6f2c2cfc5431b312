from __future__ import annotations

from pathlib import Path

import pytest

from gateway.settings import (
    Settings,
    SettingsError,
    describe,
    load_settings,
    parse_duration,
    parse_size,
)


def test_defaults_are_the_embedded_mode_on_loopback():
    settings = load_settings(env={"HOME": "/home/x"})
    assert settings.listen == "127.0.0.1:7770"
    assert settings.metrics_listen == "127.0.0.1:9770"
    assert settings.data_dir == Path("/home/x/.local/state/harness-gateway")
    assert settings.embedded
    assert settings.reflection_enabled
    assert settings.stream_window == 256


def test_xdg_state_home_sets_the_data_directory():
    settings = load_settings(env={"XDG_STATE_HOME": "/state", "HOME": "/home/x"})
    assert settings.data_dir == Path("/state/harness-gateway")


def test_flags_win_over_variables_which_win_over_defaults():
    env = {"HARNESS_LISTEN": "0.0.0.0:1234", "HARNESS_COMMIT_DELAY": "5ms"}
    settings = load_settings(env=env, flags={"listen": "127.0.0.1:0"})
    assert settings.listen == "127.0.0.1:0"
    assert settings.commit_delay == pytest.approx(0.005)


def test_every_invalid_value_is_reported_at_once():
    env = {
        "HARNESS_LISTEN": "nope",
        "HARNESS_STREAM_WINDOW": "-1",
        "HARNESS_SEND_CERTIFY_TIMEOUT": "20m",
    }
    with pytest.raises(SettingsError) as raised:
        load_settings(env=env)
    assert len(raised.value.errors) == 3
    assert raised.value.errors[0].startswith("HARNESS_LISTEN:")


def test_metrics_can_be_turned_off():
    assert load_settings(env={"HARNESS_METRICS_LISTEN": "off"}).metrics_listen is None


@pytest.mark.parametrize(
    ("text", "seconds"), [("250ms", 0.25), ("2s", 2.0), ("15m", 900.0), ("1h", 3600.0), ("3", 3.0)]
)
def test_durations_take_units(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


def test_sizes_take_units_and_garbage_is_refused():
    assert parse_size("1MiB") == 1 << 20
    assert parse_size("64KiB") == 65536
    for text in ["1 MB", "-1", "x"]:
        with pytest.raises(ValueError):
            parse_size(text)


def test_describe_lists_every_setting_as_plain_values():
    described = describe(Settings(data_dir=Path("/d")))
    assert described["data_dir"] == "/d"
    assert "admin_token_file" in described
