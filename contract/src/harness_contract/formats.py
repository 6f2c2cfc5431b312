"""The string formats a form field may require of an answer (collectives.md §6.5).

Every party (the answering member, the requester, every all_gather member) judges one
answer with these same rules, so they are written out here rather than taken from a JSON
Schema library. Matching is anchored at both ends (`re.fullmatch`, never `$`, so a
trailing newline fails), digits are ASCII digits, and letters match case-insensitively
(ASCII only: `re.ASCII` keeps `[a-z]` from matching look-alikes such as U+212A KELVIN SIGN).
Nothing here raises except `matches_format` for a format name it does not know.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Final

FORMATS: Final = ("email", "uri", "date", "date-time")
"""The format names a form-mode string field may carry, in the order the texts name them."""

_FLAGS: Final = re.IGNORECASE | re.ASCII
"""Case-insensitive ASCII letters; `\\d` and `\\s` are never used, digits are `[0-9]`."""

# --- date and date-time ----------------------------------------------------------------

_DATE: Final = r"([0-9]{4})-([0-9]{2})-([0-9]{2})"

_DATE_TIME_SEPARATOR: Final = (
    "[t\u0009-\u000d\u0020\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff]"
)
"""`T`, `t`, or one ECMAScript whitespace character (the set JavaScript's `\\s` matches)."""

_TIME: Final = (
    r"([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.[0-9]+)?"
    r"(?:z|([+-])([0-9]{2})(?::?([0-9]{2}))?)"
)
"""`hh:mm:ss(.fraction)?` then `Z`, `±hh`, `±hhmm` or `±hh:mm`."""

DATE_PATTERN: Final = re.compile(_DATE, _FLAGS)
"""A full-date, `YYYY-MM-DD`; the calendar check is separate."""

DATE_TIME_PATTERN: Final = re.compile(_DATE + _DATE_TIME_SEPARATOR + _TIME, _FLAGS)
"""A full-date, one separator and a full-time with its zone; range checks are separate."""

_DAYS_IN_MONTH: Final = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
"""Days in each month of a common year, January first."""

_MINUTES_PER_DAY: Final = 24 * 60
"""Minutes in a day, for shifting a clock reading to UTC across midnight."""

_LAST_MINUTE_OF_DAY: Final = 23 * 60 + 59
"""23:59 as minutes since midnight: the only UTC minute a leap second may fall in."""

_LEAP_SECOND: Final = 60
"""The second number that only a leap second may carry."""

# --- email -----------------------------------------------------------------------------

_ATOM: Final = r"[a-z0-9!#$%&'*+/=?^_`{|}~-]+"
_HOST_LABEL: Final = r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?"

EMAIL_PATTERN: Final = re.compile(
    rf"{_ATOM}(?:\.{_ATOM})*@(?:{_HOST_LABEL}\.)+{_HOST_LABEL}", _FLAGS
)
"""A dot-atom local part `@` a host of two or more labels (letters, digits, inner hyphens)."""

# --- uri (RFC 3986 absolute URI) -------------------------------------------------------

_HEX: Final = "[0-9a-f]"
_PCT_ENCODED: Final = f"%{_HEX}{{2}}"
_UNRESERVED: Final = r"a-z0-9\-._~"
_SUB_DELIMS: Final = "!$&'()*+,;="
_DEC_OCTET: Final = "(?:25[0-5]|2[0-4][0-9]|[01]?[0-9][0-9]?)"
_IPV4: Final = rf"(?:{_DEC_OCTET}\.){{3}}{_DEC_OCTET}"
_H16: Final = f"{_HEX}{{1,4}}"
_LS32: Final = f"(?:{_H16}:{_H16}|{_IPV4})"
_IPV6: Final = "|".join(
    (
        f"(?:{_H16}:){{6}}{_LS32}",
        f"::(?:{_H16}:){{5}}{_LS32}",
        f"(?:{_H16})?::(?:{_H16}:){{4}}{_LS32}",
        f"(?:(?:{_H16}:){{0,1}}{_H16})?::(?:{_H16}:){{3}}{_LS32}",
        f"(?:(?:{_H16}:){{0,2}}{_H16})?::(?:{_H16}:){{2}}{_LS32}",
        f"(?:(?:{_H16}:){{0,3}}{_H16})?::{_H16}:{_LS32}",
        f"(?:(?:{_H16}:){{0,4}}{_H16})?::{_LS32}",
        f"(?:(?:{_H16}:){{0,5}}{_H16})?::{_H16}",
        f"(?:(?:{_H16}:){{0,6}}{_H16})?::",
    )
)
_IPVFUTURE: Final = rf"v{_HEX}+\.[{_UNRESERVED}{_SUB_DELIMS}:]+"
_HOST: Final = (
    rf"(?:\[(?:{_IPV6}|{_IPVFUTURE})\]|{_IPV4}|(?:[{_UNRESERVED}{_SUB_DELIMS}]|{_PCT_ENCODED})*)"
)
_USERINFO: Final = rf"(?:[{_UNRESERVED}{_SUB_DELIMS}:]|{_PCT_ENCODED})*"
_PCHAR: Final = rf"(?:[{_UNRESERVED}{_SUB_DELIMS}:@]|{_PCT_ENCODED})"
_SEGMENTS: Final = rf"(?:/{_PCHAR}*)*"
_HIER_PART: Final = "|".join(
    (
        # `//` authority then path; a single `/` before an authority is admitted too,
        # as the reference validator (ajv-formats) admits it.
        rf"/?/(?:{_USERINFO}@)?{_HOST}(?::[0-9]*)?{_SEGMENTS}",
        rf"/(?:{_PCHAR}+{_SEGMENTS})?",
        rf"{_PCHAR}+{_SEGMENTS}",
    )
)
_QUERY_OR_FRAGMENT: Final = rf"(?:[{_UNRESERVED}{_SUB_DELIMS}:@/?]|{_PCT_ENCODED})*"

URI_PATTERN: Final = re.compile(
    rf"[a-z][a-z0-9+.\-]*:(?:{_HIER_PART})(?:\?{_QUERY_OR_FRAGMENT})?(?:#{_QUERY_OR_FRAGMENT})?",
    _FLAGS,
)
"""An RFC 3986 absolute URI: scheme, `:`, hier-part, `?query`, `#fragment`."""


def matches_format(fmt: str, value: str) -> bool:
    """Whether `value` is in the format `fmt` ("email", "uri", "date" or "date-time").

    Raises `ValueError` for any other format name; an admitted schema never carries one.
    """
    match fmt:
        case "email":
            return EMAIL_PATTERN.fullmatch(value) is not None
        case "uri":
            return URI_PATTERN.fullmatch(value) is not None
        case "date":
            return is_date(value)
        case "date-time":
            return is_date_time(value)
        case _:
            raise ValueError(f"unknown format {fmt!r}")


def is_date(value: str) -> bool:
    """`YYYY-MM-DD` naming a real day of the proleptic Gregorian calendar."""
    match = DATE_PATTERN.fullmatch(value)
    return match is not None and _is_calendar_day(
        int(match[1], 10), int(match[2], 10), int(match[3], 10)
    )


def is_date_time(value: str) -> bool:
    """A date, one separator, a time and a zone, with a leap second only at 23:59 UTC."""
    match = DATE_TIME_PATTERN.fullmatch(value)
    if match is None:
        return False
    year, month, day, hour, minute, second = (int(match[group], 10) for group in range(1, 7))
    sign = -1 if match[7] == "-" else 1
    offset_hour = int(match[8], 10) if match[8] is not None else 0
    offset_minute = int(match[9], 10) if match[9] is not None else 0
    if not _is_calendar_day(year, month, day):
        return False
    if hour > 23 or minute > 59 or offset_hour > 23 or offset_minute > 59:
        return False
    if second < _LEAP_SECOND:
        return True
    if second > _LEAP_SECOND:
        return False
    utc_minutes = (hour * 60 + minute - sign * (offset_hour * 60 + offset_minute)) % (
        _MINUTES_PER_DAY
    )
    return utc_minutes == _LAST_MINUTE_OF_DAY


def is_leap_year(year: int) -> bool:
    """Gregorian leap years: every fourth year, except centuries not divisible by 400."""
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def _is_calendar_day(year: int, month: int, day: int) -> bool:
    if not 1 <= month <= len(_DAYS_IN_MONTH):
        return False
    days = 29 if month == 2 and is_leap_year(year) else _DAYS_IN_MONTH[month - 1]
    return 1 <= day <= days


def utc_millis_text(epoch_ms: int) -> str:
    """`2025-01-02T03:04:05.678Z`: RFC 3339 in UTC with milliseconds, the form of every time
    the gateway writes for people and models (an export line's time, a firewall's until)."""
    at = dt.datetime.fromtimestamp(epoch_ms // 1000, dt.UTC)
    return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{epoch_ms % 1000:03d}Z"
