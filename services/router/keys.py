"""Client API keys: which clients may spend the members' credentials through the router, on
which models, and how fast.

A key is `jw-` and 43 URL-safe characters (256 random bits). It is shown once, when made
(`jetway keys create`); only the SHA-256 hex of the whole key string is kept, in a JSON
document (docs/router.md, "Client keys"):

    {"keys": [{"name": "team-a", "sha256": "<64 hex>", "models": ["m1"], "rpm": 60, "tpm": 100000,
               "created": "2025-01-31T12:00:00Z", "weight": 2, "tenant": "research"}]}

Everything here is pure: the document is bytes in, a `KeyRing` out; the `Limiter` is told the
time. keyfile.py reads the document; the router (app.py) asks `presented_key`, `KeyRing.lookup`,
`KeyRing.allows` and `Limiter.admit`, and answers with a `Refusal`. A presented key is never
kept, logged or put in an error: only its hash is looked up.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal, Protocol

from contracts.meta import DNS_LABEL, DNS_LABEL_MAX, PATTERN_WORDS, is_dns_label

KEY_PREFIX = "jw-"
SECRET_NAME = "client-keys"  # the secret store's entry (standalone) and the key inside the Secret (cluster)
SECRET_OBJECT = "jetway-client-keys"  # the Kubernetes Secret the router mounts
MOUNTED_FILE = "/var/run/jetway/client-keys/client-keys"  # where deploy/base/services.yaml mounts it
MODE_ENV = "JETWAY_ROUTER_CLIENT_KEYS"
FILE_ENV = "JETWAY_CLIENT_KEYS_FILE"
WINDOW = 60  # seconds: rpm and tpm are per minute
MAX_MODEL_NAME = 253

NAME_WORDS = f"{PATTERN_WORDS[DNS_LABEL]}, at most {DNS_LABEL_MAX} characters"
SHA256_WORDS = "must be 64 lower-case hex characters: the SHA-256 of the key, never the key itself"
LIMIT_WORDS = "must be a positive whole number"
MODEL_WORDS = f"must be a model name: a non-empty string of at most {MAX_MODEL_NAME} characters"
CREATED_WORDS = "must be an RFC 3339 time with a zone, such as 2025-01-31T12:00:00Z"
MAX_WEIGHT = 1000
WEIGHT_WORDS = f"must be a positive number, at most {MAX_WEIGHT} (its share of a saturated model against other keys'; absent: 1)"
TENANT_WORDS = f"{PATTERN_WORDS[DNS_LABEL]}, at most {DNS_LABEL_MAX} characters (absent: the key is its own tenant)"
FIELDS = ("name", "sha256", "models", "rpm", "tpm", "created", "weight", "tenant")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,31}")  # a name safe to repeat in an error (a key never matches: it has '-')

Mode = Literal["required", "off"]
Limit = Literal["rpm", "tpm"]


class KeysError(ValueError):
    """A keys document (or a key) that breaks the rules: one `path: rule` per problem, no value repeated."""

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(self.problems))


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()  # any str hashes: a bad one just matches nothing


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class ClientKey:
    name: str
    sha256: str = field(repr=False)  # not a secret, but a listing shows 8 characters at most, so a repr does not either
    models: tuple[str, ...] = ()  # empty: every model
    rpm: int | None = None  # None: unlimited
    tpm: int | None = None
    created: str | None = None
    weight: float | None = None  # its share when a model's members are saturated (services/router/fair.py); None: 1
    tenant: str | None = None  # the keys with one tenant share one place in a saturated model's queue; None: its name

    @property
    def tenant_name(self) -> str:
        """Its tenant in the fair queue: its `tenant`, else its own name (a key without one is a tenant of its own)."""
        return self.tenant or self.name

    def allows(self, model: str) -> bool:
        return not self.models or model in self.models

    def to_json(self) -> dict[str, object]:
        entry: dict[str, object] = {"name": self.name, "sha256": self.sha256, "models": list(self.models), "rpm": self.rpm, "tpm": self.tpm}
        if self.created is not None:
            entry["created"] = self.created
        if self.weight is not None:
            entry["weight"] = self.weight
        if self.tenant is not None:
            entry["tenant"] = self.tenant
        return entry


@dataclass(frozen=True, slots=True)
class Tenant:
    """Who a request counts as in a saturated model's fair queue: the keys that share a tenant, and its weight."""

    name: str
    weight: float  # the largest weight among its keys (1 where none sets one)
    keys: int  # how many keys it has


def tenants(keys: Iterable[ClientKey]) -> dict[str, Tenant]:
    """The tenants of `keys` by name. A tenant's weight is the largest of its keys' weights, not their sum: adding a
    key to a tenant never raises its share (only raising a weight does), and every request of the tenant is tagged with
    the same weight, whichever of its keys sent it."""
    weights: dict[str, float] = {}
    counts: dict[str, int] = {}
    for key in keys:
        weights[key.tenant_name] = max(weights.get(key.tenant_name, 0.0), key.weight or 1.0)
        counts[key.tenant_name] = counts.get(key.tenant_name, 0) + 1
    return {name: Tenant(name, weight, counts[name]) for name, weight in weights.items()}


@dataclass(frozen=True)
class KeyRing:
    """The accepted keys, looked up by the hash of what a client presents."""

    keys: tuple[ClientKey, ...] = ()
    _by_hash: dict[str, ClientKey] = field(init=False, repr=False, compare=False)
    _tenants: dict[str, Tenant] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_hash", {key.sha256: key for key in self.keys})
        object.__setattr__(self, "_tenants", tenants(self.keys))

    def __iter__(self) -> Iterator[ClientKey]:
        return iter(self.keys)

    def lookup(self, presented: str | None) -> ClientKey | None:
        # A dict lookup by hash: timing can tell at most something about a hash, never about a key.
        return None if not presented else self._by_hash.get(hash_key(presented))

    def allows(self, key: ClientKey, model: str) -> bool:
        return key.allows(model)

    def tenant_of(self, key: ClientKey) -> Tenant:
        """The tenant `key` counts as in a saturated model's fair queue (services/router/fair.py)."""
        return self._tenants.get(key.tenant_name) or Tenant(key.tenant_name, key.weight or 1.0, 1)

    def named(self, name: str) -> ClientKey | None:
        return next((key for key in self.keys if key.name == name), None)

    def with_key(self, key: ClientKey) -> KeyRing:
        """This ring and `key`, which must pass the document's rules; KeysError names the problem."""
        return parse_document({"keys": [*(k.to_json() for k in self.keys), key.to_json()]})

    def without(self, name: str) -> KeyRing:
        return KeyRing(tuple(key for key in self.keys if key.name != name))

    def dump(self) -> bytes:
        return (json.dumps({"keys": [key.to_json() for key in self.keys]}, indent=2) + "\n").encode()


# --- the document's rules, one function per field: the rule's words when the value breaks it, else None


def name_rule(value: object) -> str | None:
    return None if isinstance(value, str) and is_dns_label(value) else NAME_WORDS


def sha256_rule(value: object) -> str | None:
    return None if isinstance(value, str) and _HEX64.fullmatch(value) else SHA256_WORDS


def limit_rule(value: object) -> str | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return None
    return f"{LIMIT_WORDS}, or null for unlimited"


def created_rule(value: object) -> str | None:
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value) if isinstance(value, str) and "T" in value else None
    except ValueError:
        parsed = None
    return None if parsed is not None and parsed.tzinfo is not None else CREATED_WORDS


def weight_rule(value: object) -> str | None:
    if value is None:
        return None
    ok = isinstance(value, int | float) and not isinstance(value, bool) and 0 < value <= MAX_WEIGHT
    return None if ok else WEIGHT_WORDS


def tenant_rule(value: object) -> str | None:
    return None if value is None or (isinstance(value, str) and is_dns_label(value)) else TENANT_WORDS


def models_problems(value: object, path: str = "models") -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        return [f"{path}: must be a list of model names (empty: every model)"]
    problems = []
    seen: dict[str, int] = {}
    for i, model in enumerate(value):
        if not isinstance(model, str) or not model or len(model) > MAX_MODEL_NAME:
            problems.append(f"{path}[{i}]: {MODEL_WORDS}")
        elif model in seen:
            problems.append(f"{path}[{i}]: duplicate of {path}[{seen[model]}]")
        else:
            seen[model] = i
    return problems


def parse_keys(raw: bytes) -> KeyRing:
    """The ring in a keys document, or KeysError naming every problem (`keys[2].rpm: must be ...`)."""
    try:
        document = json.loads(raw)
    except UnicodeDecodeError:
        raise KeysError(["document: must be UTF-8 text"]) from None
    except json.JSONDecodeError as exc:  # its message names a position, never the text
        raise KeysError([f"document: not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"]) from None
    return parse_document(document)


def parse_document(document: object) -> KeyRing:
    """`parse_keys` for a document already decoded from JSON."""
    if not isinstance(document, dict):
        raise KeysError(['document: must be an object {"keys": [...]}'])
    problems = [f"{_field_path('', name)}: unknown field (the document has only keys)" for name in document if name != "keys"]
    entries = document.get("keys")
    if not isinstance(entries, list):
        raise KeysError([*problems, "keys: must be a list (empty: no key accepted)"])
    keys: list[ClientKey] = []
    names: dict[str, int] = {}
    hashes: dict[str, int] = {}
    for i, entry in enumerate(entries):
        at = f"keys[{i}]"
        if not isinstance(entry, dict):
            problems.append(f"{at}: must be an object with name, sha256, models, rpm, tpm")
            continue
        found = [f"{_field_path(at, name)}: unknown field (allowed: {', '.join(FIELDS)})" for name in entry if name not in FIELDS]
        for name, rule in (
            ("name", name_rule),
            ("sha256", sha256_rule),
            ("rpm", limit_rule),
            ("tpm", limit_rule),
            ("created", created_rule),
            ("weight", weight_rule),
            ("tenant", tenant_rule),
        ):
            if name in ("name", "sha256") and name not in entry:
                found.append(f"{at}.{name}: required")
            elif (words := rule(entry.get(name))) is not None:
                found.append(f"{at}.{name}: {words}")
        found += models_problems(entry.get("models"), f"{at}.models")
        if found:
            problems += found
            continue
        name, sha256 = entry["name"], entry["sha256"]
        if name in names:
            problems.append(f"{at}.name: duplicate of keys[{names[name]}].name")
        elif sha256 in hashes:
            problems.append(f"{at}.sha256: duplicate of keys[{hashes[sha256]}].sha256")
        else:
            names[name], hashes[sha256] = i, i
            models, weight = tuple(entry.get("models") or ()), entry.get("weight")
            rpm, tpm, created = entry.get("rpm"), entry.get("tpm"), entry.get("created")
            keys.append(ClientKey(name, sha256, models, rpm, tpm, created, weight, entry.get("tenant")))
    if problems:
        raise KeysError(problems)
    return KeyRing(tuple(keys))


def _field_path(at: str, name: object) -> str:
    shown = name if isinstance(name, str) and _FIELD_NAME.fullmatch(name) else "<field>"
    return f"{at}.{shown}" if at else str(shown)


# --- what a client presents


def presented_key(headers: Mapping[bytes, bytes]) -> str | None:
    """The key from `authorization: Bearer <key>` (OpenAI clients), else `x-api-key: <key>` (Anthropic clients)."""
    authorization = headers.get(b"authorization")
    if authorization is not None:
        scheme, _, value = authorization.strip().partition(b" ")
        if scheme.lower() == b"bearer" and value.strip():
            return value.strip().decode("latin-1")
    api_key = headers.get(b"x-api-key", b"").strip()
    return api_key.decode("latin-1") if api_key else None


def wants_anthropic_errors(headers: Mapping[bytes, bytes]) -> bool:
    """Whether the client speaks Anthropic's API (its SDKs send `anthropic-version`, and the key in `x-api-key`)."""
    return b"anthropic-version" in headers or (b"x-api-key" in headers and b"authorization" not in headers)


def client_keys_mode(env: Callable[[str], str | None], *, cluster: bool, flag: str | None = None) -> Mode:
    """`--client-keys` (jetway up), else $JETWAY_ROUTER_CLIENT_KEYS, else required in a cluster and off standalone."""
    value = flag or env(MODE_ENV)
    if not value:
        return "required" if cluster else "off"
    if value == "required":
        return "required"
    if value == "off":
        return "off"
    source = "--client-keys" if flag else MODE_ENV
    raise ValueError(f"{source} must be required or off (got {value!r})")


# --- refusals: the words never hold the presented key


@dataclass(frozen=True, slots=True)
class Refusal:
    status: int
    message: str
    openai_type: str
    openai_code: str
    anthropic_type: str
    retry_after: int | None = None

    def body(self, *, anthropic: bool = False) -> bytes:
        if anthropic:
            shaped: dict[str, object] = {"type": "error", "error": {"type": self.anthropic_type, "message": self.message}}
        else:
            shaped = {"error": {"message": self.message, "type": self.openai_type, "param": None, "code": self.openai_code}}
        return json.dumps(shaped).encode()

    def headers(self) -> list[tuple[bytes, bytes]]:
        return [] if self.retry_after is None else [(b"retry-after", str(self.retry_after).encode())]


def unauthenticated(presented: str | None) -> Refusal:
    """401 for a missing or unknown key; the key itself is not repeated, not even in part."""
    if not presented:
        message = "no API key: send it as 'Authorization: Bearer <key>' or 'x-api-key: <key>'"
    else:
        message = "invalid API key (keys are made with `jetway keys create`)"
    return Refusal(401, message, "invalid_request_error", "invalid_api_key", "authentication_error")


def model_refused(key: ClientKey, model: str) -> Refusal:
    """404, as OpenAI answers a model a key may not use: the model is not in this key's /v1/models either."""
    message = f"the model {model!r} does not exist or the key {key.name!r} may not use it"
    return Refusal(404, message, "invalid_request_error", "model_not_found", "not_found_error")


def rate_limited(key: ClientKey, verdict: Verdict) -> Refusal:
    limit = f"{key.rpm} requests" if verdict.limit == "rpm" else f"{key.tpm} tokens"
    message = f"the key {key.name!r} is over its limit of {limit} per minute; retry after {verdict.retry_after} s"
    return Refusal(429, message, "rate_limit_error", "rate_limit_exceeded", "rate_limit_error", verdict.retry_after)


# --- rate limits


@dataclass(frozen=True, slots=True)
class Verdict:
    ok: bool
    limit: Limit | None = None  # the limit that refused the request
    retry_after: int = 0  # whole seconds until both limits leave room (for Retry-After), 0 when ok


ADMITTED = Verdict(True)
SLOTS = WINDOW + 1  # one count per whole second, kept until 60 s after that second ended


class _Usage:
    """One key's requests and tokens per whole second over the last 61 seconds, with their sums."""

    __slots__ = ("requests", "second", "slot_requests", "slot_tokens", "tokens")

    def __init__(self, second: int) -> None:
        self.second = second
        self.requests = self.tokens = 0
        self.slot_requests = [0] * SLOTS
        self.slot_tokens = [0] * SLOTS

    def advance(self, second: int) -> None:
        """Move to `second`, dropping the seconds that left the window (at most every slot once)."""
        if second <= self.second:  # the same second, or a clock that stepped back: nothing leaves
            return
        for passed in range(max(self.second + 1, second - SLOTS + 1), second + 1):
            i = passed % SLOTS  # the slot `passed` reuses held the second 61 before it, now out of the window
            self.requests -= self.slot_requests[i]
            self.tokens -= self.slot_tokens[i]
            self.slot_requests[i] = self.slot_tokens[i] = 0
        self.second = second

    def add(self, requests: int, tokens: int) -> None:
        i = self.second % SLOTS
        self.slot_requests[i] += requests
        self.slot_tokens[i] += tokens
        self.requests += requests
        self.tokens += tokens

    def wait(self, over: Callable[[int, int], Limit | None]) -> int:
        """Whole seconds until `over` finds room: at second + k the second `second + k - 61` has left."""
        requests, tokens = self.requests, self.tokens
        for k in range(1, SLOTS + 1):
            i = (self.second + k) % SLOTS
            requests -= self.slot_requests[i]
            tokens -= self.slot_tokens[i]
            if over(requests, tokens) is None:
                return k
        return SLOTS  # not reached: after 61 s the window is empty


def over_limit(key: ClientKey, requests: int, tokens: int) -> Limit | None:
    """Which limit leaves no room for one more request: rpm counts requests admitted, tpm tokens spent."""
    if key.rpm is not None and requests >= key.rpm:
        return "rpm"
    if key.tpm is not None and tokens >= key.tpm:
        return "tpm"
    return None


class RateLimiter(Protocol):
    """What the gate asks of a limiter: this replica's own (Limiter) or the replicas' shared one (budget.py)."""

    def admit(self, key: ClientKey, now: float) -> Verdict | None: ...  # None: ask `claim`
    async def claim(self, key: ClientKey, now: float) -> Verdict: ...
    def spend(self, key: ClientKey, tokens: int, now: float) -> None: ...
    def retain(self, ring: KeyRing) -> None: ...
    def tracked(self) -> int: ...


class Limiter:
    """Each key's rpm and tpm over a sliding minute, counted per whole second.

    A request or a token counts from the whole second it fell in until 60 s after that second
    ended, so any 60 s hold at most rpm admitted requests (a wait is at most 1 s longer than
    exact), memory is 2 x 61 numbers per limited key whatever its rate, and Retry-After comes
    out in whole seconds. Refused requests do not count. tpm is checked before a request (its
    tokens are known only after the answer, through `spend`): a key that has spent its tpm is
    refused until enough of its spending leaves the window. `now` is any monotonic clock in
    seconds (the loop's time); no state is kept for a key without limits.
    """

    def __init__(self) -> None:
        self._usage: dict[str, _Usage] = {}

    def _at(self, key: ClientKey, now: float) -> _Usage:
        second = int(now // 1)
        usage = self._usage.get(key.name)
        if usage is None:
            usage = self._usage[key.name] = _Usage(second)
        usage.advance(second)
        return usage

    def admit(self, key: ClientKey, now: float) -> Verdict:
        """Ok (the request is counted), or the limit hit and the seconds until both limits leave room."""
        if key.rpm is None and key.tpm is None:
            return ADMITTED
        usage = self._at(key, now)
        limit = over_limit(key, usage.requests, usage.tokens)
        if limit is not None:
            return Verdict(False, limit, usage.wait(lambda requests, tokens: over_limit(key, requests, tokens)))
        usage.add(1, 0)
        return ADMITTED

    async def claim(self, key: ClientKey, now: float) -> Verdict:  # never asked: `admit` always answers
        return self.admit(key, now)

    def spend(self, key: ClientKey, tokens: int, now: float) -> None:
        """Record what an answer used (prompt + completion tokens, or the caller's estimate)."""
        if key.tpm is None or tokens <= 0:
            return
        self._at(key, now).add(0, tokens)

    def retain(self, ring: KeyRing) -> None:
        """Forget the keys no longer in the ring (call it with each new ring). Counts are kept by name, so a
        key's allowance survives a reload, and a changed limit applies to what the key has already used."""
        kept = {key.name for key in ring}
        for name in [name for name in self._usage if name not in kept]:
            del self._usage[name]

    def tracked(self) -> int:
        return len(self._usage)


# --- the gate: what the router asks per request


@dataclass(frozen=True, slots=True)
class Admission:
    """A client key's verdict on one request: its key when admitted, else the refusal to answer."""

    key: ClientKey | None = None
    refusal: Refusal | None = None
    pending: bool = False  # admitted by key and model; its limits are for the shared ledger to say (Gate.settle)

    @property
    def name(self) -> str:
        return self.key.name if self.key is not None else ""


class Gate:
    """Client keys as the router applies them (mode `required`): who may call, for which models, how often.

    `ring` gives the keys in force now (a KeyFile's, read again when it changes); time is passed in, so the
    gate is tested without waiting."""

    def __init__(self, ring: Callable[[], KeyRing], limiter: RateLimiter | None = None) -> None:
        self.ring = ring
        self.limiter: RateLimiter = limiter or Limiter()

    def admit(self, headers: Mapping[bytes, bytes], model: str | None, now: float) -> Admission:
        """401 without a known key; 404 for a model it may not use; 429 over its limits. `model` None: any model
        (GET /v1/models), no request counted."""
        presented = presented_key(headers)
        ring = self.ring()
        key = ring.lookup(presented)
        if key is None:
            return Admission(refusal=unauthenticated(presented))
        if model is None:
            return Admission(key)
        if not ring.allows(key, model):
            return Admission(key, model_refused(key, model))
        verdict = self.limiter.admit(key, now)
        if verdict is None:
            return Admission(key, pending=True)
        if not verdict.ok:
            return Admission(key, rate_limited(key, verdict))
        return Admission(key)

    async def settle(self, admission: Admission, now: float) -> Admission:
        """A pending admission decided by the shared ledger (budget.py): the key, or its 429."""
        key = admission.key
        if not admission.pending or key is None:
            return admission
        verdict = await self.limiter.claim(key, now)
        return Admission(key) if verdict.ok else Admission(key, rate_limited(key, verdict))

    def spend(self, admission: Admission, tokens: int, now: float) -> None:
        if admission.key is not None and tokens:
            self.limiter.spend(admission.key, tokens, now)

    def models(self, admission: Admission, served: Iterable[str]) -> list[str]:
        key = admission.key
        return [m for m in served if key is not None and key.allows(m)]
