"""The string formats of collectives.md §6.5, judged exactly as every party must."""

from __future__ import annotations

import pytest
from harness_contract.formats import FORMATS, is_leap_year, matches_format

ECMASCRIPT_WHITESPACE = (
    "\u0009\u000a\u000b\u000c\u000d\u0020\u00a0\u1680"
    "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)


def test_the_four_formats_are_named_in_the_order_the_refusal_text_names_them():
    assert FORMATS == ("email", "uri", "date", "date-time")


def test_an_unknown_format_name_is_a_programming_error():
    with pytest.raises(ValueError, match="phone"):
        matches_format("phone", "+1 555")


# --- date ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "2024-02-29",
        "2000-02-29",
        "2023-01-31",
        "2023-04-30",
        "2023-12-31",
        "0000-02-29",
        "9999-12-31",
    ],
)
def test_a_real_calendar_day_is_a_date(value):
    assert matches_format("date", value)


@pytest.mark.parametrize(
    "value",
    [
        "2023-02-29",
        "1900-02-29",
        "2100-02-29",
        "2024-02-30",
        "2024-04-31",
        "2024-13-01",
        "2024-00-10",
        "2024-01-00",
        "2024-2-01",
        "24-02-01",
        "2024/02/01",
        "2024-02-01\n",
        "\n2024-02-01",
        " 2024-02-01",
        "2024-02-01T00:00:00Z",
        "٢٠٢٤-٠٢-٠١",
        "２０２４-０２-０１",
        "",
    ],
)
def test_anything_else_is_not_a_date(value):
    assert not matches_format("date", value)


def test_leap_years_follow_the_gregorian_rule():
    assert [is_leap_year(year) for year in (1600, 1700, 1900, 2000, 2023, 2024)] == [
        True,
        False,
        False,
        True,
        False,
        True,
    ]


# --- date-time -------------------------------------------------------------------------


@pytest.mark.parametrize("separator", ["T", "t", *ECMASCRIPT_WHITESPACE])
def test_a_date_time_separates_date_and_time_with_t_or_one_ecmascript_whitespace(separator):
    assert matches_format("date-time", f"2024-02-01{separator}10:00:00Z")


@pytest.mark.parametrize(
    "separator",
    ["", "  ", "Tt", "_", "\u0085", "\u180e", "\u200b", "\u2060", "\u3164", "x"],
)
def test_a_date_time_refuses_any_other_separator(separator):
    assert not matches_format("date-time", f"2024-02-01{separator}10:00:00Z")


@pytest.mark.parametrize(
    "value",
    [
        "2024-02-01T10:00:00Z",
        "2024-02-01T10:00:00z",
        "2024-02-01t10:00:00.5+01:30",
        "2024-02-01 10:00:00-0130",
        "2024-02-01T10:00:00+01",
        "2024-02-01T10:00:00.123456789-23:59",
        "2024-02-01T00:00:00+00:00",
        "2024-02-01T23:59:59Z",
        "2024-02-29T12:00:00Z",
    ],
)
def test_a_date_time_with_a_zone_is_accepted(value):
    assert matches_format("date-time", value)


@pytest.mark.parametrize(
    "value",
    [
        "2024-02-01T10:00:00",
        "2024-02-01T10:00Z",
        "2024-02-01T10:00:00.Z",
        "2024-02-01T24:00:00Z",
        "2024-02-01T23:60:00Z",
        "2024-02-01T10:00:00+24:00",
        "2024-02-01T10:00:00+01:60",
        "2024-02-01T10:00:00+1",
        "2024-02-01T10:00:00+013",
        "2024-02-01T10:00:00+01:3",
        "2024-02-01T10:00:00\u221201:00",
        "2024-02-01T10:00:00Z\n",
        "2023-02-29T10:00:00Z",
        "2024-02-01",
        "2024-02-01T１0:00:00Z",
    ],
)
def test_a_date_time_without_a_zone_or_out_of_range_is_refused(value):
    assert not matches_format("date-time", value)


@pytest.mark.parametrize(
    "value",
    [
        "2024-02-01T23:59:60Z",
        "2024-02-01T23:59:60.5Z",
        "2024-02-01T22:59:60-01:00",
        "2024-02-01T00:59:60+01:00",
        "2024-02-01T00:29:60+00:30",
        "2024-02-01T21:30:60-0229",
        "2024-02-01T23:59:60+00",
    ],
)
def test_a_leap_second_is_accepted_when_the_time_in_utc_is_23_59(value):
    assert matches_format("date-time", value)


@pytest.mark.parametrize(
    "value",
    [
        "2024-02-01T10:59:60Z",
        "2024-02-01T23:58:60Z",
        "2024-02-01T23:59:61Z",
        "2024-02-01T23:59:60-00:01",
        "2024-02-01T23:59:60+01:00",
        "2024-02-01T24:00:60+00:01",
    ],
)
def test_a_leap_second_is_refused_at_any_other_utc_minute(value):
    assert not matches_format("date-time", value)


# --- email -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "a.b@example.com",
        "user+tag@sub.example.org",
        "A@EXAMPLE.COM",
        "!#$%&'*+/=?^_`{|}~-@example.com",
        "a@ex-ample.com",
        "a@1.2",
        "x@a-b-c.d-e",
    ],
)
def test_a_dot_atom_at_a_dotted_host_is_an_email(value):
    assert matches_format("email", value)


@pytest.mark.parametrize(
    "value",
    [
        "a@example",
        ".a@example.com",
        "a.@example.com",
        "a..b@example.com",
        "a@-example.com",
        "a@example-.com",
        "a@example..com",
        "a@.example.com",
        "a@example.com.",
        "a b@example.com",
        "a@example.com\n",
        "ü@example.com",
        "a@exämple.com",
        "\u212a@example.com",
        "a@b_c.com",
        "@example.com",
        "a@",
        '"a"@example.com',
        "a@[127.0.0.1]",
    ],
)
def test_anything_else_is_not_an_email(value):
    assert not matches_format("email", value)


# --- uri -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        "https://user@[::1]:8080/a?b#c",
        "urn:example:x",
        "HTTPS://EXAMPLE.COM",
        "https://a%20b",
        "https://example.com/%7Euser/%e2%82%ac",
        "http://[2001:db8::1]/",
        "http://[2001:db8::192.0.2.1]/",
        "http://[::ffff:1.2.3.4]",
        "http://[1:2:3:4:5:6:7:8]",
        "http://[::]",
        "http://[v1.fe:80]/",
        "http://1.2.3.4:80/",
        "http://example.com:/",
        "mailto:a@example.com",
        "file:///etc/hosts",
        "a+b.c-d:rootless/path",
        "tag:/absolute",
        "http:/[::1]/single-slash-before-an-authority",
        "https://example.com/?q=a/b?c#frag/ment?x",
        "x://",
    ],
)
def test_an_rfc_3986_absolute_uri_is_a_uri(value):
    assert matches_format("uri", value)


@pytest.mark.parametrize(
    "value",
    [
        "example.com",
        "https://a b",
        "https://%zz",
        "https://a%2",
        "a:",
        "1http://x",
        "+x:y",
        "http://example.com/\n",
        "http://example.com/ä",
        "http://[1:2:3:4:5:6:7:8:9]",
        "http://[::1",
        "http://[g::1]/",
        "http://[v.x]/",
        "http://example.com/#a#b",
        "\u212aa:b",
        "",
    ],
)
def test_anything_else_is_not_a_uri(value):
    assert not matches_format("uri", value)


def test_an_authority_after_a_single_slash_also_reads_a_bad_port_as_a_path():
    # §6.5 admits an authority after a single `/` (as ajv-formats does), so `//host:port`
    # also parses as an empty authority followed by the path `/host:port`.
    assert matches_format("uri", "http://example.com:port")
    assert not matches_format("uri", "http://[::1]:port")


@pytest.mark.parametrize(
    ("fmt", "value"),
    [
        ("email", "a@" + "a" * 100_000 + "!"),
        ("email", "a" * 100_000),
        ("email", "a@" + "a-" * 50_000),
        ("email", "a@" + "a." * 50_000 + "!"),
        ("uri", "http://" + "a" * 100_000 + " "),
        ("uri", "http://" + "a:" * 50_000 + " "),
        ("uri", "a:" + "/" * 100_000 + " "),
        ("date-time", "2024-02-01T10:00:00." + "1" * 100_000),
    ],
)
def test_long_hostile_strings_are_refused_without_catastrophic_backtracking(fmt, value):
    assert not matches_format(fmt, value)
