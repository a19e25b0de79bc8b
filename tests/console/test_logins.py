"""Login codes, sessions and who may call what: plain data, no server."""

from __future__ import annotations

from services.console.logins import Access, Logins, access
from services.console.timeline import page_size, sequence


def test_a_code_is_redeemed_once_and_not_after_it_expires() -> None:
    logins = Logins()
    code = logins.issue(now=0.0)
    session = logins.redeem(code, now=1.0)
    assert session is not None and session != code
    assert logins.valid(session, now=2.0)
    assert logins.redeem(code, now=2.0) is None, "single use"
    late = logins.issue(now=0.0)
    assert logins.redeem(late, now=601.0) is None, "expired after 10 minutes"
    assert logins.redeem("", now=0.0) is None and logins.redeem("guess", now=0.0) is None


def test_a_session_expires_and_ends_on_logout() -> None:
    logins = Logins(session_ttl=100.0)
    session = logins.redeem(logins.issue(now=0.0), now=0.0)
    assert logins.valid(session, now=99.0) and not logins.valid(session, now=100.0)
    other = logins.redeem(logins.issue(now=0.0), now=0.0)
    logins.end(other)
    assert not logins.valid(other, now=1.0) and not logins.valid(None, now=1.0)


def test_unredeemed_codes_are_bounded() -> None:
    logins = Logins()
    first = logins.issue(now=0.0)
    for _ in range(100):
        logins.issue(now=0.0)
    assert len(logins.codes) == 64 and logins.redeem(first, now=0.0) is None


def test_the_token_may_do_anything_a_session_changes_only_with_the_console_header() -> None:
    assert access("DELETE", token_ok=True, session_ok=False, console_header=None) is Access.ALLOWED
    assert access("GET", token_ok=False, session_ok=True, console_header=None) is Access.ALLOWED
    assert access("POST", token_ok=False, session_ok=True, console_header=None) is Access.CROSS_SITE
    assert access("DELETE", token_ok=False, session_ok=True, console_header="yes") is Access.CROSS_SITE
    assert access("POST", token_ok=False, session_ok=True, console_header="1") is Access.ALLOWED
    assert access("GET", token_ok=False, session_ok=False, console_header="1") is Access.UNAUTHORIZED


def test_history_parameters_name_the_field_they_break() -> None:
    assert page_size(None) == 200 and page_size("5") == 5
    for bad in ("0", "-1", "x", "100000"):
        try:
            page_size(bad)
        except ValueError as exc:
            assert str(exc).startswith("limit: ")
        else:
            raise AssertionError(bad)
    assert sequence("until", "12") == 12 and sequence("until", None) is None
    try:
        sequence("after", "1.5")
    except ValueError as exc:
        assert str(exc).startswith("after: ")
