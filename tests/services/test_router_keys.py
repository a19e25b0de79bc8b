"""Client keys (services/router/keys.py, keyfile.py): the document's rules with their paths, lookup by
hash, allowed models, rpm and tpm with Retry-After on an injected clock, and the file read again on change."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path

import pytest

from runtime.secrets import FileSecrets
from services.router.keyfile import KeyFile
from services.router.keys import (
    ADMITTED,
    ClientKey,
    KeyRing,
    KeysError,
    Limiter,
    Verdict,
    client_keys_mode,
    hash_key,
    model_refused,
    new_key,
    parse_keys,
    presented_key,
    rate_limited,
    unauthenticated,
    wants_anthropic_errors,
)

KEY_A, KEY_B = new_key(), new_key()


def entry(name: str = "team-a", key: str = KEY_A, **fields: object) -> dict[str, object]:
    return {"name": name, "sha256": hash_key(key), **fields}


def document(*entries: object) -> bytes:
    return json.dumps({"keys": list(entries)}).encode()


def problems_of(raw: bytes) -> tuple[str, ...]:
    with pytest.raises(KeysError) as caught:
        parse_keys(raw)
    return caught.value.problems


def test_a_key_is_jw_and_256_random_bits_kept_as_the_sha256_of_the_whole_string() -> None:
    key = new_key()
    assert key.startswith("jw-") and len(key) == 46 and key != new_key()
    assert hash_key(key) == hashlib.sha256(key.encode()).hexdigest()


def test_a_document_parses_to_a_ring_and_dumps_back_to_the_same() -> None:
    raw = document(entry(models=["m1", "m2"], rpm=60, tpm=1000, created="2025-01-31T12:00:00Z"), entry("team-b", KEY_B))
    ring = parse_keys(raw)
    assert [k.name for k in ring] == ["team-a", "team-b"]
    a = ring.named("team-a")
    assert a is not None and (a.models, a.rpm, a.tpm, a.created) == (("m1", "m2"), 60, 1000, "2025-01-31T12:00:00Z")
    b = ring.named("team-b")
    assert b is not None and (b.models, b.rpm, b.tpm, b.created) == ((), None, None, None)
    assert parse_keys(ring.dump()) == ring
    assert parse_keys(b'{"keys": []}').keys == ()
    assert hash_key(KEY_A) not in repr(a)  # a repr (a log line) never carries the whole hash


def test_each_broken_rule_is_named_with_its_path_and_no_value() -> None:
    raw = document(
        entry(rpm=0),
        entry("team-b", KEY_B, tpm=1.5, models=["m", "", "m"]),
        entry("Team_C", "jw-c", created="yesterday"),
        {"name": "team-d", "sha256": KEY_A, "rmp": 5},
        {"sha256": hash_key("x"), "rpm": True},
        "team-e",
    )
    assert problems_of(raw) == (
        "keys[0].rpm: must be a positive whole number, or null for unlimited",
        "keys[1].tpm: must be a positive whole number, or null for unlimited",
        "keys[1].models[1]: must be a model name: a non-empty string of at most 253 characters",
        "keys[1].models[2]: duplicate of keys[1].models[0]",
        "keys[2].name: must be a DNS label: lower-case letters, digits and '-', starting and ending with a letter or digit, "
        "at most 63 characters",
        "keys[2].created: must be an RFC 3339 time with a zone, such as 2025-01-31T12:00:00Z",
        "keys[3].rmp: unknown field (allowed: name, sha256, models, rpm, tpm, created, weight, tenant)",
        "keys[3].sha256: must be 64 lower-case hex characters: the SHA-256 of the key, never the key itself",
        "keys[4].name: required",
        "keys[4].rpm: must be a positive whole number, or null for unlimited",
        "keys[5]: must be an object with name, sha256, models, rpm, tpm",
    )
    assert KEY_A not in str(KeysError(problems_of(raw)))


def test_duplicate_names_and_hashes_are_errors() -> None:
    assert problems_of(document(entry(), entry("team-b", KEY_B), entry("team-a", "jw-other"), entry("team-c", KEY_B))) == (
        "keys[2].name: duplicate of keys[0].name",
        "keys[3].sha256: duplicate of keys[1].sha256",
    )


def test_a_document_that_is_not_one_is_named_without_its_text() -> None:
    assert problems_of(b'{"keys": [') == ("document: not JSON: Expecting value at line 1 column 11",)
    assert problems_of(b'{"keys": ["\xff"]}') == ("document: must be UTF-8 text",)
    assert problems_of(b"[]") == ('document: must be an object {"keys": [...]}',)
    assert problems_of(b'{"keys": {}, "jw-secret-ish": 1}') == (
        "<field>: unknown field (the document has only keys)",  # a field name that could be a key is not repeated
        "keys: must be a list (empty: no key accepted)",
    )


def test_lookup_is_by_the_hash_of_the_presented_key_and_models_restrict() -> None:
    ring = parse_keys(document(entry(models=["m1"]), entry("team-b", KEY_B)))
    a, b = ring.lookup(KEY_A), ring.lookup(KEY_B)
    assert a is not None and a.name == "team-a" and b is not None and b.name == "team-b"
    assert ring.lookup(None) is None and ring.lookup("") is None and ring.lookup(hash_key(KEY_A)) is None
    assert ring.lookup(KEY_A + " ") is None and ring.lookup(new_key()) is None
    assert ring.allows(a, "m1") and not ring.allows(a, "m2")
    assert ring.allows(b, "anything")  # no models: every model
    assert KeyRing().lookup(KEY_A) is None


def test_with_key_checks_the_rules_and_without_removes_by_name() -> None:
    ring = KeyRing().with_key(ClientKey("team-a", hash_key(KEY_A)))
    with pytest.raises(KeysError, match=r"keys\[1\]\.name: duplicate of keys\[0\]\.name"):
        ring.with_key(ClientKey("team-a", hash_key(KEY_B)))
    with pytest.raises(KeysError, match=r"keys\[1\]\.rpm: must be a positive whole number"):
        ring.with_key(ClientKey("team-b", hash_key(KEY_B), rpm=-1))
    assert ring.without("team-a").keys == () and ring.without("nobody") == ring


def test_the_key_comes_from_bearer_or_x_api_key() -> None:
    assert presented_key({b"authorization": b"Bearer " + KEY_A.encode()}) == KEY_A
    assert presented_key({b"authorization": b"bearer  " + KEY_A.encode() + b" "}) == KEY_A
    assert presented_key({b"x-api-key": KEY_A.encode()}) == KEY_A
    assert presented_key({b"authorization": b"Basic abc", b"x-api-key": KEY_B.encode()}) == KEY_B
    assert presented_key({b"authorization": b"Bearer " + KEY_A.encode(), b"x-api-key": KEY_B.encode()}) == KEY_A
    assert presented_key({b"authorization": b"Bearer "}) is None and presented_key({}) is None
    assert wants_anthropic_errors({b"x-api-key": b"k", b"anthropic-version": b"2023-06-01"})
    assert wants_anthropic_errors({b"x-api-key": b"k"}) and not wants_anthropic_errors({b"authorization": b"Bearer k"})


def test_refusals_in_both_shapes_never_repeat_the_key() -> None:
    refusal = unauthenticated(KEY_A)
    openai, anthropic = json.loads(refusal.body()), json.loads(refusal.body(anthropic=True))
    assert refusal.status == 401 and refusal.headers() == []
    assert openai["error"]["type"] == "invalid_request_error" and openai["error"]["code"] == "invalid_api_key"
    assert anthropic["type"] == "error" and anthropic["error"]["type"] == "authentication_error"
    assert KEY_A not in refusal.message and KEY_A[:8] not in refusal.message and KEY_A[-6:] not in refusal.message
    assert "Authorization: Bearer" in unauthenticated(None).message
    key = ClientKey("team-a", hash_key(KEY_A), ("m1",), rpm=10)
    refused = model_refused(key, "m2")
    assert refused.status == 404 and json.loads(refused.body())["error"]["code"] == "model_not_found"
    limited = rate_limited(key, Verdict(False, "rpm", 7))
    assert limited.status == 429 and limited.headers() == [(b"retry-after", b"7")]
    assert json.loads(limited.body())["error"] == {
        "message": "the key 'team-a' is over its limit of 10 requests per minute; retry after 7 s",
        "type": "rate_limit_error",
        "param": None,
        "code": "rate_limit_exceeded",
    }
    assert json.loads(limited.body(anthropic=True))["error"]["type"] == "rate_limit_error"


def test_rpm_admits_that_many_a_minute_then_says_when_to_retry() -> None:
    key = ClientKey("team-a", hash_key(KEY_A), rpm=3)
    limiter = Limiter()
    assert [limiter.admit(key, t) for t in (100.2, 110.5, 130.9)] == [ADMITTED] * 3
    # the first request (second 100) leaves the window at 161: 60 s after its second ended
    assert limiter.admit(key, 140.5) == Verdict(False, "rpm", 21)
    assert limiter.admit(key, 160.99) == Verdict(False, "rpm", 1)  # refused requests are not counted
    assert limiter.admit(key, 161.0) == ADMITTED
    assert limiter.admit(key, 161.5) == Verdict(False, "rpm", 10)  # the one of second 110 leaves at 171
    assert limiter.admit(key, 1000.0) == ADMITTED  # a long quiet time empties the window
    other = ClientKey("team-b", hash_key(KEY_B), rpm=1)
    assert limiter.admit(other, 1000.0) == ADMITTED  # each key its own count


def test_no_60_seconds_hold_more_than_rpm_requests() -> None:
    key = ClientKey("team-a", hash_key(KEY_A), rpm=5)
    limiter = Limiter()
    admitted = [t / 10 for t in range(6000) if limiter.admit(key, t / 10).ok]
    assert all(later - earlier > 60 for earlier, later in zip(admitted, admitted[5:], strict=False))
    assert len(admitted) >= 45  # and the limit does not starve: about rpm each 61 s


def test_tpm_refuses_once_spent_until_the_spending_leaves_the_window() -> None:
    key = ClientKey("team-a", hash_key(KEY_A), tpm=1000)
    limiter = Limiter()
    assert limiter.admit(key, 10.0).ok
    limiter.spend(key, 600, 12.0)
    assert limiter.admit(key, 20.0).ok
    limiter.spend(key, 500, 30.0)
    assert limiter.admit(key, 31.0) == Verdict(False, "tpm", 42)  # the 600 of second 12 leave at 73
    limiter.spend(key, -5, 31.0)  # a nonsense count changes nothing
    assert limiter.admit(key, 72.5) == Verdict(False, "tpm", 1)
    assert limiter.admit(key, 73.0).ok


def test_retry_after_covers_both_limits() -> None:
    key = ClientKey("team-a", hash_key(KEY_A), rpm=2, tpm=100)
    limiter = Limiter()
    assert limiter.admit(key, 0.0).ok and limiter.admit(key, 30.0).ok
    limiter.spend(key, 100, 50.0)
    # rpm leaves room at 61 (the request of second 0 leaves), tpm at 111
    assert limiter.admit(key, 55.0) == Verdict(False, "rpm", 56)


def test_unlimited_keys_keep_no_state_and_retain_forgets_removed_keys() -> None:
    a = ClientKey("team-a", hash_key(KEY_A), rpm=1)
    b = ClientKey("team-b", hash_key(KEY_B), tpm=10)
    limiter = Limiter()
    assert limiter.admit(ClientKey("free", hash_key("x")), 0.0) == ADMITTED and limiter.tracked() == 0
    limiter.admit(a, 0.0)
    limiter.admit(b, 0.0)
    limiter.spend(ClientKey("free", hash_key("x")), 50, 0.0)
    assert limiter.tracked() == 2
    limiter.retain(KeyRing((b,)))
    assert limiter.tracked() == 1
    assert limiter.admit(a, 1.0) == ADMITTED  # a key made again starts with an empty window


def test_the_mode_is_required_in_a_cluster_and_off_standalone_unless_set() -> None:
    env: dict[str, str] = {}
    assert client_keys_mode(env.get, cluster=True) == "required"
    assert client_keys_mode(env.get, cluster=False) == "off"
    assert client_keys_mode(env.get, cluster=False, flag="required") == "required"
    env["JETWAY_ROUTER_CLIENT_KEYS"] = "off"
    assert client_keys_mode(env.get, cluster=True) == "off"
    assert client_keys_mode(env.get, cluster=True, flag="required") == "required"  # a flag wins
    env["JETWAY_ROUTER_CLIENT_KEYS"] = "yes"
    with pytest.raises(ValueError, match=r"JETWAY_ROUTER_CLIENT_KEYS must be required or off \(got 'yes'\)"):
        client_keys_mode(env.get, cluster=True)


async def test_refresh_picks_up_a_rewritten_file_and_keeps_the_last_good_ring(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "jetway.router.keys")
    store = FileSecrets(tmp_path / "secrets")
    keys = KeyFile.in_store(store)
    assert keys.path == tmp_path / "secrets" / "client-keys"

    assert await keys.refresh() is False and keys.ring.keys == ()  # missing: no key accepted
    assert keys.error is not None and "no client keys file" in keys.error
    assert await keys.refresh() is False
    assert sum("no client keys file" in r.message for r in caplog.records) == 1  # said once, not each tick

    store.set("client-keys", document(entry()))
    assert await keys.refresh() is True and keys.ring.lookup(KEY_A) is not None and keys.error is None
    assert await keys.refresh() is False  # unchanged: not read again

    store.set("client-keys", document(entry("team-b", KEY_B)))  # rotated: picked up at the next tick
    assert await keys.refresh() is True
    assert keys.ring.lookup(KEY_A) is None and keys.ring.lookup(KEY_B) is not None

    store.set("client-keys", document(entry("team-b", KEY_B, rpm=0), entry("x", KEY_A)))
    assert await keys.refresh() is False and keys.ring.lookup(KEY_B) is not None  # malformed: the last good ring stays
    assert keys.error is not None and "keys[0].rpm: must be a positive whole number" in keys.error
    assert await keys.refresh() is False
    assert sum("malformed" in r.message for r in caplog.records) == 1

    store.delete("client-keys")
    assert await keys.refresh() is True and keys.ring.keys == ()
    assert not any(KEY_A in r.getMessage() or KEY_B in r.getMessage() or hash_key(KEY_B) in r.getMessage() for r in caplog.records)


def test_a_same_size_rewrite_in_place_is_seen(tmp_path: Path) -> None:
    path = tmp_path / "client-keys"
    path.write_bytes(document(entry(rpm=10)))
    keys = KeyFile(path)
    assert keys.load() is True
    first = os.stat(path)
    path.write_bytes(document(entry(rpm=20)))  # the same size; a Secret volume swaps a symlink instead
    os.utime(path, ns=(first.st_atime_ns, first.st_mtime_ns + 1))
    assert keys.load() is True and keys.ring.keys[0].rpm == 20
