"""Which member takes a request, in one place and pure: no I/O, so every step is tested with plain data.

    candidates  the members that may take a request for a model in an API's format now: declaring it,
                accepting the format, ready (`serves`: probed healthy for the current spec, not draining,
                not failed since, advertising the model)
    fitting     those whose context window holds the request, by the token estimate (`estimate`)
    pick        the one the router's policy chooses among them (a session's member first), remembered in
                `Memory` (the prefix index, the sessions, the turn)

The policies (docs/router.md, "Routing policies"):

    least-outstanding  fewest requests in flight from this router; ties round-robin
    round-robin        in turn
    prefix-cache       (the default) a score per member: prefix-cache locality, minus queue and KV-cache use,
                       among the members under a load bound

Prefix-cache locality is approximate, as llm-d's approximate prefix-cache producer is: the prompt is cut into
fixed-size character blocks hashed as a chain (a block's hash covers every block before it, so equal hashes
mean equal prefixes), and an LRU index remembers which member was recently sent which block hashes. A
member's locality is the fraction of the prompt's blocks it was sent, from the first block on.

Bounded load (consistent hashing with bounded loads, Mirrokni et al.): a member whose load would pass
`load_bound` times the average is not chosen while another is under it, so a hot prefix spills over to
other members instead of piling onto one. Load is this router's requests in flight to the member plus the
queue the member reports on its /metrics.
"""

from __future__ import annotations

import hashlib
import math
import zlib
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, cast

import msgspec

from contracts.subjects import Key
from services.router.projection import Member, Members, Traffic

# (body, block_chars, max_blocks, as_raw) -> ((hashes, home) | msgspec.Raw) or None (services/router/_prompt.pyi)
NativeBlocks = Callable[[dict[str, Any], int, int, bool], Any]


def _native_blocks() -> NativeBlocks | None:
    """The same hashes in C (services/router/_prompt.c), where the package was built with a compiler; else None, and
    this module's own walk gives the same results, slower (docs/router.md, "The prompt's hashes in C")."""
    try:
        from services.router._prompt import blocks
    except ImportError:
        return None
    return blocks


native_blocks = _native_blocks()

LEAST_OUTSTANDING = "least-outstanding"
ROUND_ROBIN = "round-robin"
PREFIX_CACHE = "prefix-cache"
POLICIES = (PREFIX_CACHE, LEAST_OUTSTANDING, ROUND_ROBIN)


@dataclass(frozen=True)
class Settings:
    """A router's policy and its weights: `--router-policy` ... flags of `jetway up`, or JETWAY_ROUTER_* variables."""

    policy: str = PREFIX_CACHE
    prefix_weight: float = 3.0  # a whole prompt cached is worth this much
    queue_weight: float = 2.0  # the most loaded candidate costs this much
    kv_weight: float = 1.0  # a full KV cache costs this much
    load_bound: float = 1.25  # no member past this multiple of the average load while another is under it
    block_chars: int = 64  # characters per hashed block (about 16 tokens)
    max_blocks: int = 256  # blocks hashed per prompt: the first 16 KiB of a prompt decides its locality
    index_blocks: int = 262_144  # block hashes the index remembers (LRU)

    ENV = {
        "policy": "JETWAY_ROUTER_POLICY",
        "prefix_weight": "JETWAY_ROUTER_PREFIX_WEIGHT",
        "queue_weight": "JETWAY_ROUTER_QUEUE_WEIGHT",
        "kv_weight": "JETWAY_ROUTER_KV_WEIGHT",
        "load_bound": "JETWAY_ROUTER_LOAD_BOUND",
        "block_chars": "JETWAY_ROUTER_BLOCK_CHARS",
        "max_blocks": "JETWAY_ROUTER_MAX_BLOCKS",
        "index_blocks": "JETWAY_ROUTER_INDEX_BLOCKS",
    }

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"router policy must be one of {', '.join(POLICIES)} (got {self.policy!r})")
        for name in ("prefix_weight", "queue_weight", "kv_weight"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"router {name.replace('_', ' ')} must be a number, 0 or more (got {value!r})")
        if not (math.isfinite(self.load_bound) and self.load_bound >= 1):
            raise ValueError(f"router load bound must be a number, 1 or more (got {self.load_bound!r})")
        for name in ("block_chars", "max_blocks", "index_blocks"):
            if getattr(self, name) < 1:
                raise ValueError(f"router {name.replace('_', ' ')} must be a whole number, 1 or more (got {getattr(self, name)!r})")

    @classmethod
    def from_env(cls, env: Callable[[str], str | None], **given: Any) -> Settings:
        """From JETWAY_ROUTER_* (`env` is os.environ.get or alike); values in `given` that are not None (flags)
        win. ValueError names the variable at fault."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in cls.ENV:
                continue
            if given.get(f.name) is not None:
                values[f.name] = given[f.name]
                continue
            variable, text = cls.ENV[f.name], env(cls.ENV[f.name])
            if text is None or text == "":
                continue
            if f.name == "policy":
                values[f.name] = text
                continue
            whole = f.type in ("int", int)
            try:
                values[f.name] = int(text) if whole else float(text)
            except ValueError:
                raise ValueError(f"{variable} must be a {'whole ' if whole else ''}number (got {text!r})") from None
        for name, value in values.items():  # each alone first, so the error names its variable
            try:
                cls(**{name: value})
            except ValueError as exc:
                raise ValueError(f"{cls.ENV[name]}: {exc}") from None
        return cls(**values)


# --- which members may take it ------------------------------------------------------------------------

CHARS_PER_TOKEN = 4


def serves(member: Member, model: str, traffic: Traffic) -> bool:
    """Whether a member may take a new request for `model` now."""
    health_now = member.health
    if member.spec.draining or member.needs_probe or traffic.failed or health_now is None or not health_now.healthy:
        return False
    return member.spec.backend == "echo" or model in health_now.advertised


@dataclass(frozen=True)
class Candidates:
    declared: bool  # some member declares the model at all
    accepted: bool  # some member that declares it accepts the API's format
    ready: list[Member]


def candidates(members: Members, model: str, api_format: str) -> Candidates:
    """The members that may take a request for `model` in `api_format` now, in a stable order (by key)."""
    declared = members.declaring(model)
    if not declared:
        return Candidates(False, False, [])
    accepting = [m for m in declared if api_format in m.formats]
    traffic = members.traffic
    return Candidates(True, bool(accepting), [m for m in accepting if serves(m, model, traffic.get(m.key) or Traffic())])


def saturated(member: Member) -> bool:
    return member.health is not None and member.health.saturated


def _text_length(content: Any) -> int:
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):  # content parts, or a token array for completions
        return sum(
            _text_length(part.get("text", "")) if isinstance(part, dict) else 1 if isinstance(part, int) else _text_length(part)
            for part in content
        )
    return 0


@dataclass(frozen=True)
class Estimate:
    prompt: int
    completion: int

    @property
    def total(self) -> int:
        return self.prompt + self.completion


def estimate(body: dict[str, Any], chat: bool) -> Estimate:
    """Prompt tokens at 4 characters a token (plus 4 per chat message), plus the requested maximum."""
    if chat:
        messages = body.get("messages") or []
        chars = sum(_text_length(m.get("content")) for m in messages if isinstance(m, dict))
        prompt = math.ceil(chars / CHARS_PER_TOKEN) + 4 * len(messages)
    else:
        chars = _text_length(body.get("prompt"))
        prompt = math.ceil(chars / CHARS_PER_TOKEN)
    wanted = body.get("max_completion_tokens", body.get("max_tokens"))
    completion = wanted if isinstance(wanted, int) and not isinstance(wanted, bool) and wanted > 0 else 0
    return Estimate(prompt, completion)


def fits(member: Member, model: str, needed: Estimate) -> bool:
    window = member.window(model)
    return window is None or needed.total <= window


def too_large_message(model: str, needed: Estimate, windows: list[int]) -> str:
    return (
        f"the request needs about {needed.total} tokens ({needed.prompt} prompt tokens, estimated at {CHARS_PER_TOKEN} "
        f"characters per token plus 4 per message, and {needed.completion} max_tokens), more than the "
        f"{max(windows)}-token context window of {model!r}"
    )


def fitting(ready: list[Member], model: str, body: dict[str, Any] | None, chat: bool) -> tuple[list[Member], str | None]:
    """Those of `ready` whose context window for `model` holds the request (`body` None: nothing to fit, every one),
    and, when none of them does, the message of the refusal (a 400 context_length_exceeded)."""
    if body is None or not any(m.window(model) for m in ready):
        return ready, None  # estimated only when some member states a window: the estimate walks every message
    needed = estimate(body, chat)
    fit = [m for m in ready if fits(m, model, needed)]
    if not fit:
        return fit, too_large_message(model, needed, [w for m in ready if (w := m.window(model))])
    return fit, None


# --- the prefix index ------------------------------------------------------------------------------


def block_hashes(text: str, block_chars: int, max_blocks: int, known: Sequence[int] = ()) -> list[int]:
    """The chained hashes of the prompt's whole blocks (a partial last block is not cached by engines either).

    A block is `block_chars` bytes of the prompt's UTF-8 (characters, for ASCII). Each hash is the CRC-32 of the
    whole prefix up to its block's end, the same in every process and every router replica (unlike `hash`), so
    the replicas' indexes and the routing records (records.py) name a prefix alike. `known`: the hashes of the
    text's first blocks, already computed (`prompt_hashes`: those of a lead it starts with)."""
    data = text.encode("utf-8", "surrogatepass")
    if len(data) < block_chars:
        return []  # no whole block
    end = min(len(data) // block_chars, max_blocks) * block_chars
    hashes = list(known)
    append, crc = hashes.append, zlib.crc32
    previous = hashes[-1] if hashes else 0
    for start in range(len(hashes) * block_chars, end, block_chars):
        previous = crc(data[start : start + block_chars], previous)
        append(previous)
    return hashes


LEADS = 256  # prompts' leads whose block hashes are kept (at most max_blocks * block_chars characters each)


def prompt_hashes(parts: list[str], text: str, block_chars: int, max_blocks: int) -> list[int] | Lead:
    """`block_hashes` of a prompt's `text` ("\\n".join(`parts`, from `prompt_parts`)), the blocks of its lead (its
    first two parts: a chat's first role and message, a system prompt) taken from the last `LEADS` leads seen.

    Requests to a model mostly start alike, with the same system prompt, and a block's CRC costs about 150 ns
    (zlib's byte-wise loop at 64 bytes) and as much again in the loop around it: a 2,000-character system prompt
    was 8 µs of every request, and 100,000 instructions of one whose routing record alone wanted its hashes
    (docs/router.md). The kept `Lead` itself when it holds every whole block."""
    if len(parts) < 2 or len(parts[0]) + len(parts[1]) < block_chars:
        return block_hashes(text, block_chars, max_blocks)  # no lead with a whole block
    # the lead is a prefix of the text whatever is cut from its end; blocks past max_blocks are never hashed
    lead = _LEADS.hashes(parts[0], parts[1][: max_blocks * block_chars], block_chars, max_blocks)
    if text.isascii() and len(lead) == min(len(text) // block_chars, max_blocks):
        return lead  # the lead holds every whole block (a short question after a long system prompt)
    return block_hashes(text, block_chars, max_blocks, lead)


class Lead(tuple[int, ...]):
    """A kept lead's block hashes, and `encoded`, the MessagePack array a routing record writes them as, made once:
    a record of a prompt its lead holds whole writes those bytes instead of encoding 31 integers (3,400 instructions
    for a 2,000-character system prompt) on every request."""

    encoded: msgspec.Raw


class _Leads:
    """The block hashes of the last leads seen, LRU. Found by the lead's role, length and last characters, then
    compared whole: a lead's own hash (siphash, 3 instructions a byte) was most of a kept lead's cost, and a key of
    both its ends (two 64-character slices hashed) half of what was left; a comparison runs at memory speed."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.kept: OrderedDict[tuple[str, int, str, int, int], tuple[str, Lead]] = OrderedDict()

    def hashes(self, first: str, second: str, block_chars: int, max_blocks: int) -> Lead:
        key = (first, len(second), second[-16:], block_chars, max_blocks)
        kept = self.kept.get(key)
        if kept is not None and kept[0] == second:
            self.kept.move_to_end(key)
            return kept[1]
        hashes = Lead(block_hashes(first + "\n" + second, block_chars, max_blocks))
        hashes.encoded = msgspec.Raw(_MSGPACK(hashes))
        self.kept[key] = (second, hashes)  # a lead alike by its role, length and end but not whole is replaced
        self.kept.move_to_end(key)
        if len(self.kept) > self.capacity:
            self.kept.popitem(last=False)
        return hashes


_MSGPACK = msgspec.msgpack.Encoder().encode
_LEADS = _Leads(LEADS)


class PrefixIndex:
    """Which members were recently sent which block hashes; the least recently used block is forgotten first.

    In memory, per router process: it approximates what the members' caches hold, and a restart or another
    replica starts without it (the first requests then go by load, and build it again)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.blocks: OrderedDict[int, dict[Hashable, None]] = OrderedDict()

    def matched(self, hashes: Sequence[int], keys: Sequence[Hashable]) -> list[int]:
        """For each key, how many of the leading `hashes` it was sent."""
        counts = dict.fromkeys(keys, 0)
        alive = set(keys)
        for depth, block in enumerate(hashes):
            holders = self.blocks.get(block)
            if holders is None:
                break
            alive = {k for k in alive if k in holders}
            if not alive:
                break
            for key in alive:
                counts[key] = depth + 1
        return [counts[k] for k in keys]

    def record(self, hashes: Sequence[int], key: Hashable) -> None:
        blocks = self.blocks
        for block in hashes:
            holders = blocks.get(block)
            if holders is None:
                blocks[block] = {key: None}
            else:
                holders[key] = None
                blocks.move_to_end(block)
        while len(blocks) > self.capacity:
            blocks.popitem(last=False)


# --- choosing ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class View:
    """A ready member as a policy sees it."""

    outstanding: int  # requests in flight to it: this router's, and the other replicas' as they last said
    waiting: int = 0  # the queue it reported on /metrics (0 when it reports none)
    kv: float = 0.0  # its KV-cache use, 0..1 (0 when it reports none)
    saturated: bool = False  # its Saturated condition (`saturated`)
    matched: int = 0  # prompt blocks it was recently sent, from the first on


@dataclass(frozen=True)
class Choice:
    index: int  # into the views
    reason: str  # why: least-outstanding, round-robin, prefix, load, session
    score: float = 0.0
    prefix: float = 0.0  # the chosen member's matched fraction of the prompt

    def header(self, policy: str) -> bytes:
        """The `x-jetway-route` response header: the policy, why this member, and its score."""
        return f"{policy}; reason={self.reason}; score={self.score:.3f}; prefix={self.prefix:.2f}".encode()


def least_outstanding(views: Sequence[View], turn: int) -> Choice:
    least = min(v.outstanding for v in views)
    tied = [i for i, v in enumerate(views) if v.outstanding == least]
    return Choice(tied[turn % len(tied)], LEAST_OUTSTANDING, score=-float(least))


def round_robin(views: Sequence[View], turn: int) -> Choice:
    return Choice(turn % len(views), ROUND_ROBIN)


def load_of(view: View) -> int:
    return view.outstanding + view.waiting


def under_bound(views: Sequence[View], bound: float) -> list[int]:
    """The members that may take one more request within the load bound; when none may, every member.

    The bound is `bound` times the average load counting the new request, rounded up (so some member is always
    under it when loads are even)."""
    limit = math.ceil(bound * (sum(load_of(v) for v in views) + 1) / len(views))
    return [i for i, v in enumerate(views) if load_of(v) + 1 <= limit] or list(range(len(views)))


def prefix_cache(views: Sequence[View], blocks: int, settings: Settings, turn: int) -> Choice:
    """The best score among the unsaturated members under the load bound (a saturated member only when all are).

    Equal scores go to the first in order from `turn`; `choose` passes the prompt's home (`home`) there when the
    prompt has a block, so a new prefix lands where its hash says, the same in every router replica."""
    open_ = [i for i, v in enumerate(views) if not v.saturated] or list(range(len(views)))
    eligible = [open_[j] for j in under_bound([views[i] for i in open_], settings.load_bound)]
    most = max(load_of(v) for v in views)  # the scale of the queue term: the most loaded member, eligible or not
    best: Choice | None = None
    n = len(eligible)
    for step in range(n):  # starting at `turn`, so equal scores share in turn
        i = eligible[(turn + step) % n]
        view = views[i]
        prefix = view.matched / blocks if blocks else 0.0
        score = settings.prefix_weight * prefix - settings.queue_weight * load_of(view) / (most + 1) - settings.kv_weight * view.kv
        if best is None or score > best.score:
            best = Choice(i, "prefix" if prefix > 0 else "load", score, prefix)
    assert best is not None
    return best


def choose(settings: Settings, views: Sequence[View], blocks: int, turn: int, home: int | None = None) -> Choice:
    """The member a request goes to, of `views` (not empty); `blocks` is the number of prompt blocks hashed, `home`
    the prompt's stable hash (`home_of`) when it has one."""
    if settings.policy == ROUND_ROBIN:
        return round_robin(views, turn)
    if settings.policy == LEAST_OUTSTANDING:
        return least_outstanding(views, turn)
    return prefix_cache(views, blocks, settings, turn if home is None else home)


def home_of(text: str, block_chars: int) -> int | None:
    """A stable hash of the prompt's first block (CRC-32: the same in every process, unlike `hash`), None when the
    prompt has no whole block. Where ties start: distinct prefixes spread over the members like consistent hashing,
    and every router replica sends a new prefix to the same member while loads are equal."""
    if len(text) < block_chars:
        return None
    return zlib.crc32(text[:block_chars].encode("utf-8", "surrogatepass"))


# --- session affinity --------------------------------------------------------------------------------


class Sessions:
    """Which member a session (`x-session-id`, or the OpenAI `user` field; by `session_key`) was last sent to; LRU,
    bounded."""

    def __init__(self, capacity: int = 65_536) -> None:
        self.capacity = capacity
        self.members: OrderedDict[int, Hashable] = OrderedDict()

    def get(self, session: int) -> Hashable | None:
        member = self.members.get(session)
        if member is not None:
            self.members.move_to_end(session)
        return member

    def put(self, session: int, member: Hashable) -> None:
        self.members[session] = member
        self.members.move_to_end(session)
        if len(self.members) > self.capacity:
            self.members.popitem(last=False)


def sticky(views: Sequence[View], keys: Sequence[Hashable], held: Hashable | None) -> int | None:
    """The index of the session's member when it is still ready and not saturated (then it keeps the session)."""
    if held is None:
        return None
    for i, key in enumerate(keys):
        if key == held:
            return None if views[i].saturated else i
    return None


def session_key(session: str) -> int:
    """A session id as choosing remembers it and records carry it: 64 bits of BLAKE2b, the same in every replica
    (the id itself is never kept)."""
    return int.from_bytes(hashlib.blake2b(session.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big")


def session_of(header: bytes | None, body: dict[str, Any] | None) -> str | None:
    """A session to keep on one member: the `x-session-id` header, else the OpenAI `user` field."""
    if header:
        return header.decode("latin-1")
    user = body.get("user") if body is not None else None
    return user if isinstance(user, str) and user else None


# --- the prompt ---------------------------------------------------------------------------------------


def _text(content: Any, into: list[str]) -> None:
    if isinstance(content, str):
        into.append(content)
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, dict):
                _text(part.get("text") if "text" in part else part.get("content"), into)
            elif isinstance(part, str):
                into.append(part)


def _messages(messages: list[Any], parts: list[str]) -> None:
    append = parts.append
    for message in messages:
        if isinstance(message, dict):
            role = message.get("role")
            append(role if isinstance(role, str) else "")
            content = message.get("content")
            if content.__class__ is str:
                append(content)
            else:
                _text(content, parts)  # content parts (or a str of a subclass)


def prompt_text(body: dict[str, Any]) -> str:
    """The text a request's prompt starts with, in the order an engine sees it (system first), for prefix hashing:
    its `prompt_parts`, a line each."""
    return "\n".join(prompt_parts(body))


def prompt_parts(body: dict[str, Any]) -> list[str]:
    """The parts of a request's prompt, in the order an engine sees them (system first): a chat message's role and
    text, Anthropic's top-level `system`, a completion's `prompt`, a response's `instructions` and `input`; other
    bodies have none."""
    parts: list[str] = []
    messages = body.get("messages")
    if type(messages) is list and "system" not in body and "instructions" not in body and "prompt" not in body and "input" not in body:
        _messages(messages, parts)  # a chat body, the most common: no lookup for each field it lacks
        return parts
    get = body.get
    for field_ in ("system", "instructions"):
        content = get(field_)
        if content is not None:
            _text(content, parts)
    if isinstance(messages, list):
        _messages(messages, parts)
    prompt = get("prompt")
    if isinstance(prompt, str):
        parts.append(prompt)
    elif isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
        parts.append(prompt[0])
    given = get("input")
    if given is not None:
        _text(given, parts)
    return parts


# --- the choice ---------------------------------------------------------------------------------------


@dataclass
class Memory:
    """What choosing remembers between requests, in this router process only (a restart or another replica
    starts without it): the prefix index, the sessions, and the turn from which equal scores are taken."""

    index: PrefixIndex
    sessions: Sessions = field(default_factory=Sessions)
    turn: int = 0

    @classmethod
    def of(cls, settings: Settings) -> Memory:
        return cls(PrefixIndex(settings.index_blocks))


class Prompt:
    """A request as choosing sees it: its session, and its prompt's block hashes and home, hashed at its first
    choice among several members (never when one is ready, unless routing records want them) and kept for the
    retry."""

    __slots__ = ("always", "body", "hashes", "home", "session", "session_key")

    def __init__(self, body: dict[str, Any] | None, session: str | None, always: bool = False) -> None:
        self.body = body
        self.session = session
        self.session_key = session_key(session) if session else None  # as choosing, placements and records keep it
        self.always = always  # hash whatever the policy: a routing record carries the blocks
        self.hashes: Sequence[int] | None = None  # a list, or a kept Lead
        self.home: int | None = None

    @classmethod
    def known(cls, hashes: list[int], home: int | None, session_key: int | None) -> Prompt:
        """A prompt already hashed, by the replica that asks the placer to choose for it (learn.py)."""
        prompt = cls(None, None)
        prompt.hashes, prompt.home, prompt.session_key = hashes, home, session_key
        return prompt

    def hashed(self, settings: Settings) -> Sequence[int]:
        if self.hashes is None:
            body = self.body
            if body is None or not (self.always or settings.policy == PREFIX_CACHE):
                self.hashes = []
            elif native_blocks is not None and (found := native_blocks(body, settings.block_chars, settings.max_blocks, False)):
                self.hashes, self.home = found
            else:  # no native module, or a text it leaves to Python (a lone surrogate)
                parts = prompt_parts(body)
                text = "\n".join(parts)
                if len(text) < settings.block_chars and text.isascii():  # no whole block, known without encoding it
                    self.hashes = []
                else:
                    self.hashes = hashes = prompt_hashes(parts, text, settings.block_chars, settings.max_blocks)
                    if hashes:  # an ASCII text's first block is its first block's bytes: its hash is the home
                        self.home = hashes[0] if text.isascii() else home_of(text, settings.block_chars)
        return self.hashes

    def recorded(self, settings: Settings) -> Sequence[int] | msgspec.Raw:
        """The block hashes as a routing record writes them, at the request's end: those a choice among members
        hashed, else hashed for the record alone, straight to their MessagePack (nothing after the record asks)."""
        hashes = self.hashes
        if hashes is None and native_blocks is not None and self.body is not None:
            raw = native_blocks(self.body, settings.block_chars, settings.max_blocks, True)
            if raw is not None:
                return cast(msgspec.Raw, raw)
        hashes = self.hashed(settings)
        return hashes.encoded if hashes.__class__ is Lead else hashes


ONLY = Choice(0, "only")  # the one member ready for the model
_ONLY_HEADERS = {name: ONLY.header(name) for name in POLICIES}


def route_header(choice: Choice, policy: str) -> bytes:
    """The `x-jetway-route` header of a choice (the one-member choice's made once, not per request)."""
    return _ONLY_HEADERS[policy] if choice is ONLY else choice.header(policy)


def pick(
    settings: Settings,
    memory: Memory,
    ready: Sequence[Member],
    traffic: Mapping[Key, Traffic],
    prompt: Prompt,
    ended: Hashable | None = None,
) -> tuple[Member, Choice]:
    """The member of `ready` (not empty) a request goes to, and why. The session's member while it is ready and not
    saturated, else the policy's choice; `memory` then remembers it (the prompt's blocks, the session, the turn).

    `ended` is the member another replica sent this conversation's previous turn to (learn.py `Learner.previous`):
    one of that member's requests the other replicas counted is taken to be that turn, ended, since a client sends its
    next turn after the last one's answer, often before the other replica's count saying so arrives."""
    if len(ready) == 1:
        return ready[0], ONLY  # nothing to choose: no hashing, no index, no session to keep
    hashes = prompt.hashed(settings)
    views = []
    for member in ready:
        live = traffic.get(member.key)
        load = live.load if live is not None else None
        others = live.others if live is not None else 0
        if others and member.key == ended:
            others -= 1
        views.append(
            View(
                outstanding=live.outstanding + others if live is not None else 0,
                waiting=load.waiting if load is not None else 0,
                kv=(load.kv or 0.0) if load is not None else 0.0,
                saturated=saturated(member),
            )
        )
    choice = decide(settings, memory, [m.key for m in ready], views, hashes, prompt.home, prompt.session_key)
    return ready[choice.index], choice


def decide(
    settings: Settings,
    memory: Memory,
    keys: Sequence[Hashable],
    views: Sequence[View],
    hashes: Sequence[int],
    home: int | None,
    session: int | None,
) -> Choice:
    """`pick`'s decision on views already made (the routing replay makes them from records, replay.py): the session's
    member while it is ready and not saturated, else the policy's choice; `memory` then remembers it. With a prefix
    policy, `hashes` only count for members `memory.index` was sent them by; a view's `matched` is recomputed."""
    if settings.policy != PREFIX_CACHE:
        hashes = ()  # the index only counts for prefix-cache routing (and only it hashes, unless records do)
    if hashes:
        matched = memory.index.matched(hashes, keys)
        views = [View(v.outstanding, v.waiting, v.kv, v.saturated, blocks) for v, blocks in zip(views, matched, strict=True)]
    held = memory.sessions.get(session) if session else None
    index = sticky(views, keys, held)
    if index is not None:
        count = len(hashes)
        choice = Choice(index, "session", prefix=views[index].matched / count if count else 0.0)
    else:
        choice = choose(settings, views, len(hashes), memory.turn, home)
        memory.turn += 1
    if hashes:
        memory.index.record(hashes, keys[choice.index])
    if session:
        memory.sessions.put(session, keys[choice.index])
    return choice
