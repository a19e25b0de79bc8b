"""Router replicas that remember as one: each learns from the others' routing records where prompts' prefixes
were sent and which member each session is on (docs/router.md, "Replicas that remember as one").

When a replica decides, it tells the others at once: a `Placement` (the model, the member, the prompt's block
hashes, the session's hash) on a core NATS subject, not stored. Every replica folds the others' placements into
its own memory (`policy.Memory`: the prefix index and the sessions, both LRU-bounded as before), so a
conversation's next turn finds its member whichever replica takes it, even when it is sent the moment the turn
before ends. A replica tells only while it has peers: it knows them by their once-a-second load counts (below), so a lone
router spends nothing on it. A replica that starts reads the last `warm_seconds` of the
records' stream first (the same fields, kept): it is warm before it has routed anything.

A conversation's own previous turn is not counted against its member: a client sends its next turn once the last
one's answer has ended, often before the count from the replica that served it says so, and counted it would push
the conversation off its member under the load bound. So a replica remembers where the others sent each
conversation's latest turn (`Placement.turn`: its session, else the last block hash of its prompt, which the next
turn's prompt holds) until their counts say it ended (`InFlight.ended`); the next turn it takes meanwhile counts one
request fewer there (`previous`, `policy.pick`'s `ended`).

Load is shared too: ten times a second while it has requests in flight (once a second when it has none, or no
peers: alone, it only says it is there), and at once when a request ends, a replica with peers says how many
requests it has in flight to each member (`InFlight`, core NATS, not stored). Each replica adds the others' latest
counts to its own (`Traffic.others`), so the load terms of the policies and the load bound see the whole
deployment's traffic, at most a tenth of a second old; a replica silent for
half a second (killed) counts for nothing.

A new conversation (no replica routed a turn of it lately: `new`) is not decided blind: replicas deciding a burst
of them at once, each before the others' placements arrive, spread them unevenly. Its first decision is the
placer's (`placer_of`: the least-named replica alive), asked over NATS request and reply (`place`); the placer
decides in turn with its own requests (`_asked`), counts it for the asker, tells the others and answers. A starting
replica says its counts and waits for its peers' first answer before it serves (`listen`), so it knows whom to ask.

`learn`, `others` and `placer_of` are pure; `Learner` is the subscriptions, the telling, the asking and the start-up
read.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta

import msgspec
import nats.errors
from nats.aio.client import Client
from nats.aio.subscription import Subscription

from contracts.routing import (
    INFLIGHT_PREFIX,
    PLACE_PREFIX,
    PLACEMENT_PREFIX,
    ROUTING_PREFIX,
    ROUTING_STREAM,
    InFlight,
    PlaceAsk,
    Placed,
    Placement,
    RoutingRecord,
    decode_batch,
)
from contracts.subjects import Key
from runtime.bus import BoundedClient
from runtime.reader import OrderedReader
from services.router import policy
from services.router.projection import Member, Members

log = logging.getLogger("jetway.router.learn")

INFLIGHT_SECONDS = 0.1  # how often a replica says its requests in flight (when it has peers)
LONE_SECONDS = 1.0  # how often a replica alone says it is there (an empty count, or its counts, for no one yet)
INFLIGHT_STALE = 0.5  # a replica silent this long counts for nothing (killed): it says its counts every tenth of a second
# while it has any in flight, once a second when it has none
TURNS = 65_536  # the other replicas' latest turns remembered (LRU): a conversation's next turn finds its own
TURN_SECONDS = 600.0  # a turn older than this is no longer taken for one the others still count
PEER_SECONDS = 30.0  # records are published every quarter second while a replica routes; silence this long: gone
_ENCODE = msgspec.msgpack.Encoder().encode
_DECODE = msgspec.msgpack.Decoder(Placement).decode
_ENCODE_INFLIGHT = msgspec.msgpack.Encoder().encode
_DECODE_INFLIGHT = msgspec.msgpack.Decoder(InFlight).decode
_DECODE_ASK = msgspec.msgpack.Decoder(PlaceAsk).decode
_DECODE_PLACED = msgspec.msgpack.Decoder(Placed).decode
PLACE_SECONDS = 0.25  # how long a replica waits for the placer's answer before deciding itself (it answers in about
# a millisecond; a burst on a busy machine can hold it tens of milliseconds)
ALIVE_SECONDS = 1.5  # a replica heard from within this is alive: each says its counts at least once a second
HELLO_SECONDS = 0.25  # how long a starting replica waits for the others to answer its first counts
SEEN = 65_536  # the latest turns of conversations, this replica's and the others' (FIFO): what is not new


def member_key(members: Members, model: str, name: str) -> Key | None:
    """The key of the member `name` among those declaring `model`: what another replica's message names it by."""
    return next((m.key for m in members.declaring(model) if m.name == name), None)


def learn(records: Iterable[RoutingRecord | Placement], members: Members, memory: policy.Memory, settings: policy.Settings) -> int:
    """Fold records or placements of other replicas into `memory`; how many taught something. One of a member this
    replica does not know (yet, or any more) teaches nothing; nor do blocks cut at another size."""
    taught = 0
    prefixes = settings.policy == policy.PREFIX_CACHE
    for record in records:
        if not record.member:
            continue
        key = member_key(members, record.model, record.member)
        if key is None:
            continue
        if prefixes and record.blocks and record.block_chars == settings.block_chars:
            memory.index.record(record.blocks, key)
            taught += 1
        if record.session is not None:
            memory.sessions.put(record.session, key)
            taught += 1
    return taught


def placer_of(own: str, heard: dict[str, float], suspects: dict[str, float], now: float) -> str:
    """The token of the replica that places new conversations: the least of this one (`own`) and the others heard from
    (token → when, loop time) within ALIVE_SECONDS, leaving out those that failed to answer (`suspects`: token → when)
    and have not been heard from since."""
    alive = [t for t, at in heard.items() if now - at < ALIVE_SECONDS and suspects.get(t, -1.0) < at]
    return min([own, *alive])


def others(said: dict[str, dict[str, int]], members: Members) -> None:
    """Each member's `Traffic.others`: the sum of what the other replicas last said of it (pure but for the fold)."""
    totals: dict[str, int] = {}
    for counts in said.values():
        for name, count in counts.items():
            totals[name] = totals.get(name, 0) + count
    for key, member in members.items.items():
        total = totals.get(member.name, 0)
        traffic = members.traffic.get(key)
        if traffic is None:
            if not total:
                continue
            traffic = members.traffic_of(key)
        traffic.others = total


class Learner:
    """One replica's subscription to the others' records, and its start-up read of the recent ones."""

    def __init__(self, nc: Client, own_subject: str, members: Members, memory: policy.Memory, settings: policy.Settings) -> None:
        if not isinstance(nc, BoundedClient):
            raise TypeError("Learner listens and says through runtime.bus.connect's client (BoundedClient)")
        self.nc = nc
        self.own_subject = own_subject  # its records' subject
        self.own_placements = PLACEMENT_PREFIX + own_subject.removeprefix(ROUTING_PREFIX)
        self.members = members
        self.memory = memory
        self.settings = settings
        self.learned = 0  # placements and records that taught this replica something (tests and metrics read it)
        self.warmed = asyncio.Event()
        # another replica's subject → when it last said something (loop time); empty while this one is alone, which the
        # hot path reads as it is (truthiness, not a call) to skip telling and counting (`has_peers` forgets the silent)
        self.peers: dict[str, float] = {}
        self._subs: list[Subscription] = []
        self.own_inflight = INFLIGHT_PREFIX + own_subject.removeprefix(ROUTING_PREFIX)
        self._said: dict[str, tuple[float, dict[str, int]]] = {}  # another replica → (when, its counts per member)
        self._stopping = asyncio.Event()
        self._wake = asyncio.Event()  # set on stopping, and by a peer heard for the first time: say the counts now
        self._listening = asyncio.Event()  # subscribed: what the others say on hearing this one is not missed
        self._heard = asyncio.Event()  # another replica heard from (`listen` waits for the first answer)
        self._greet = False  # a new peer heard: say the counts at the next wake, even unchanged
        self._last_said: tuple[tuple[str, int], ...] | None = None
        self._last_at = 0.0
        # a conversation → its last turn's member, the replica that counts it, when told
        self._turns: OrderedDict[int, tuple[Key, str, float]] = OrderedDict()
        self.token = own_subject.removeprefix(ROUTING_PREFIX + ".")
        self.own_place = f"{PLACE_PREFIX}.{self.token}"
        self._seen: OrderedDict[int, None] = OrderedDict()  # the latest turns of conversations (`saw`), oldest first
        self._suspects: dict[str, float] = {}  # a placer that did not answer → when (`placer_of`)
        self.placed = 0  # new conversations this replica decided for the others (tests and metrics read it)

    def has_peers(self) -> bool:
        """Whether another replica said anything in the last PEER_SECONDS (then decisions are told)."""
        if not self.peers:
            return False
        horizon = asyncio.get_running_loop().time() - PEER_SECONDS
        for subject in [s for s, at in self.peers.items() if at < horizon]:
            del self.peers[subject]
        return bool(self.peers)

    def previous(self, prompt: policy.Prompt, settings: policy.Settings) -> Key | None:
        """The member another replica sent this prompt's conversation's previous turn to, recently; forgotten once
        asked (the next turn is this one). By the session when it has one, else by the longest of the prompt's block
        hashes that ended a told prompt."""
        turns = self._turns
        if not turns:
            return None
        if prompt.session_key is not None:
            found = turns.pop(prompt.session_key, None)
        else:
            found = None
            for block in reversed(prompt.hashed(settings)):
                found = turns.pop(block, None)
                if found is not None:
                    break
        if found is None:
            return None
        key, counted_by, at = found
        if counted_by not in self._said:  # that replica's counts are forgotten (silent): nothing to count out
            return None
        return key if asyncio.get_running_loop().time() - at < TURN_SECONDS else None

    def saw(self, turn: int | None) -> None:
        """A conversation's turn decided (here, or by another replica): its next turn is not a new conversation."""
        if turn is None:
            return
        seen = self._seen
        seen[turn] = None
        seen.move_to_end(turn)
        if len(seen) > SEEN:
            seen.popitem(last=False)  # O(1), where a dict's first key is found past every one deleted before it

    def new(self, prompt: policy.Prompt, settings: policy.Settings) -> bool:
        """Whether a prompt starts a conversation no replica has routed a turn of lately (`saw`): by its session when it
        has one, else by its block hashes, none of which ended an earlier turn's prompt (a next turn's prompt holds its
        last turn's). A question shorter than a block leaves its turn's last hash in the shared prefix: the next
        conversation on that prefix then looks continued, and is decided by the replica that takes it."""
        seen = self._seen
        if prompt.session_key is not None:
            return prompt.session_key not in seen and prompt.session_key not in self.memory.sessions.members
        return not any(block in seen for block in prompt.hashed(settings))

    def placer(self) -> str | None:
        """The token of the replica that places this one's new conversations; None when it is this one."""
        found = placer_of(self.token, self._peer_tokens(), self._suspects, asyncio.get_running_loop().time())
        return None if found == self.token else found

    def _peer_tokens(self) -> dict[str, float]:
        cut = len(INFLIGHT_PREFIX) + 1
        return {subject[cut:]: at for subject, at in self.peers.items()}

    async def place(
        self, model: str, ready: list[Member], prompt: policy.Prompt, settings: policy.Settings
    ) -> tuple[Member, policy.Choice, str] | None:
        """A new conversation's member, chosen by the placer for this replica (remembered here as if chosen here), and
        the placer's token; None when this replica is the placer, the placer did not answer within PLACE_SECONDS, is
        gone (no responders: then it is passed over until heard from again) or chose none of `ready`: this replica
        decides."""
        placer = self.placer()
        if placer is None:
            return None
        hashes = prompt.hashed(settings)
        names = tuple([m.name for m in ready])
        ask = PlaceAsk(model, self.token, names, tuple(hashes), settings.block_chars, prompt.home, prompt.session_key)
        try:
            answer = await self.nc.request(f"{PLACE_PREFIX}.{placer}", _ENCODE(ask), timeout=PLACE_SECONDS)
            placed = _DECODE_PLACED(answer.data)
        except TimeoutError:  # busy, not gone (a gone one has no responders): this one decides, the next asks again
            log.warning("routing: placer %s did not answer within %.2fs; this conversation decided here", placer, PLACE_SECONDS)
            return None
        except (nats.errors.Error, OSError, msgspec.DecodeError) as exc:
            self._suspects[placer] = asyncio.get_running_loop().time()
            log.warning("routing: placer %s did not answer (%s); new conversations decided here meanwhile", placer, type(exc).__name__)
            return None
        for index, member in enumerate(ready):
            if member.name == placed.member:
                if hashes and settings.policy == policy.PREFIX_CACHE:
                    self.memory.index.record(hashes, member.key)
                if prompt.session_key is not None:
                    self.memory.sessions.put(prompt.session_key, member.key)
                self.saw(prompt.session_key if prompt.session_key is not None else hashes[-1] if hashes else None)
                return member, policy.Choice(index, placed.reason, placed.score, placed.prefix), placer
        return None

    def _asked(self, reply: str, data: bytes) -> None:
        """As the placer: another replica's new conversation, decided here in turn with this one's own, counted as that
        replica's request in flight, told to the rest on that replica's placements subject, and answered."""
        try:
            ask = _DECODE_ASK(data)
        except msgspec.DecodeError:
            return
        placed = Placed()
        ready = [m for m in self.members.declaring(ask.model) if m.name in ask.candidates]
        if ready and (not ask.blocks or ask.block_chars == self.settings.block_chars):
            prompt = policy.Prompt.known(list(ask.blocks), ask.home, ask.session)
            member, choice = policy.pick(self.settings, self.memory, ready, self.members.traffic, prompt)
            placement = Placement(ask.model, member.name, ask.blocks, ask.block_chars, ask.session, self.token)
            self._count(f"{INFLIGHT_PREFIX}.{ask.asker}", placement, member.key)
            self.saw(placement.turn)
            self.placed += 1
            with contextlib.suppress(nats.errors.Error, OSError):  # the others count it when the asker next says its counts
                self.nc.publish_now(f"{PLACEMENT_PREFIX}.{ask.asker}", _ENCODE(placement))
            placed = Placed(member.name, choice.reason, choice.score, choice.prefix)
        if reply:
            with contextlib.suppress(nats.errors.Error, OSError):
                self.nc.publish_now(reply, _ENCODE(placed))

    async def tell(self, model: str, member: str, blocks: Sequence[int] | None, session: int | None) -> int | None:
        """A decision, to the other replicas (when there are any): where this prompt and session went. Its turn (to be
        said with the counts when the request ends), None when nothing was told."""
        if not self.has_peers():
            return None
        placement = Placement(model, member, tuple(blocks or ()), self.settings.block_chars, session)
        with contextlib.suppress(nats.errors.Error, OSError):  # a lost placement costs a cache hit elsewhere, never a request
            await self.nc.publish(self.own_placements, _ENCODE(placement))
        return placement.turn

    async def listen(self) -> None:
        """Subscribe, say this replica is there, and give the others a moment (HELLO_SECONDS at most) to answer with
        their counts: a replica that serves after this knows its peers, and whom to ask for new conversations."""
        if self._subs:
            return
        self._subs = [
            await self._listen(f"{PLACEMENT_PREFIX}.>", self._placed),
            await self._listen(f"{INFLIGHT_PREFIX}.>", self._counted),
            await self._listen(self.own_place, self._asked, replies=True),
        ]
        try:
            await self.nc.flush()  # the server has the subscriptions before anything is read or counted on
            self._listening.set()
            await self._publish(self._counts())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(HELLO_SECONDS):
                    await self._heard.wait()
        except (nats.errors.Error, OSError, TimeoutError) as exc:
            log.warning("routing memory: could not say this replica is there (%s); its peers hear it within a second", type(exc).__name__)
            self._listening.set()

    async def start(self, warm_seconds: float) -> None:
        """`listen` (nothing published meanwhile is missed), then read the last `warm_seconds` of the stream."""
        await self.listen()
        try:
            if warm_seconds > 0:
                await self._warm(warm_seconds)
        except (nats.errors.Error, OSError, TimeoutError) as exc:
            log.warning("routing memory: the recent records could not be read (%s); learning from new ones only", type(exc).__name__)
        finally:
            self.warmed.set()

    async def _listen(self, subject: str, handler: Callable[[str, bytes], None], *, replies: bool = False) -> Subscription:
        """Placements and counts are handled as the client reads them (`BoundedClient.tap`), in the order they came,
        not a loop turn later by a task of nats-py's: a count saying a turn ended is seen before the client's next
        turn whenever it was read first."""

        def tapped(subject: bytes, reply: bytes, data: bytes, headers: bytes | None) -> None:
            try:
                handler((reply if replies else subject).decode(), data)
            except Exception:  # a tap must not raise into the client's read loop
                log.exception("routing memory: a message from another replica could not be taken in")

        sub = await self.nc.subscribe(subject)  # no callback: its deliveries go to the tap
        self.nc.tap(sub, tapped)
        return sub

    def _placed(self, subject: str, data: bytes) -> None:
        if subject == self.own_placements:
            return  # its own: already in its memory
        try:
            placement = _DECODE(data)
        except msgspec.DecodeError:
            return
        if placement.placed_by == self.token:
            return  # decided here for another replica (`_asked`): already in its memory and counted
        self.learned += learn((placement,), self.members, self.memory, self.settings)
        self.saw(placement.turn)
        key = member_key(self.members, placement.model, placement.member)
        self._count(INFLIGHT_PREFIX + subject.removeprefix(PLACEMENT_PREFIX), placement, key)

    def _count(self, subject: str, placement: Placement, key: Key | None) -> None:
        """One more in flight at the placement's member from the replica saying counts on `subject`, until its next
        count says otherwise (a tenth of a second at most); and its turn, to count out when the next one comes."""
        at, counts = self._said.get(subject, (asyncio.get_running_loop().time(), {}))
        counts[placement.member] = counts.get(placement.member, 0) + 1
        self._said[subject] = (at, counts)
        if key is not None:
            self.members.traffic_of(key).others += 1
            turn = placement.turn
            if turn is not None and (placement.session is not None or placement.block_chars == self.settings.block_chars):
                self._turns[turn] = (key, subject, asyncio.get_running_loop().time())
                self._turns.move_to_end(turn)
                if len(self._turns) > TURNS:
                    self._turns.popitem(last=False)

    def _counted(self, subject: str, data: bytes) -> None:
        if subject == self.own_inflight:
            return
        if subject not in self.peers:
            self._wake.set()  # a new peer: it hears this replica's counts now, not in up to a second
            self._greet = True
            self._heard.set()
        self.peers[subject] = asyncio.get_running_loop().time()  # a peer, routing or not yet
        try:
            said = _DECODE_INFLIGHT(data)
        except msgspec.DecodeError:
            return
        self._said[subject] = (asyncio.get_running_loop().time(), dict(said.members))
        for turn in said.ended:  # no longer in these counts: not to be counted out again
            self._turns.pop(turn, None)
        others({subject: counts for subject, (_, counts) in self._said.items()}, self.members)

    def _forget_silent(self) -> bool:
        """Drop what replicas silent for INFLIGHT_STALE said; whether any was dropped."""
        horizon = asyncio.get_running_loop().time() - INFLIGHT_STALE
        silent = [subject for subject, (at, _) in self._said.items() if at < horizon]
        for subject in silent:
            del self._said[subject]
        return bool(silent)

    def finished(self, turn: int | None) -> None:
        """A request of this replica's ended (`turn`: its placement's, when it was told): its counts go out now,
        written before the client gets the answer's last bytes, so the replica that takes a conversation's next turn
        a moment later has read that this one ended."""
        if not self.peers:
            return
        self._last_said = self._counts()
        self._last_at = asyncio.get_running_loop().time()
        said = InFlight(self._last_said, (turn,) if turn is not None else ())
        with contextlib.suppress(nats.errors.Error, OSError):  # lost: the next tick's counts say it
            self.nc.publish_now(self.own_inflight, _ENCODE_INFLIGHT(said))

    def _counts(self) -> tuple[tuple[str, int], ...]:
        items = self.members.items
        return tuple((items[key].name, t.outstanding) for key, t in self.members.traffic.items() if t.outstanding and key in items)

    async def _publish(self, counts: tuple[tuple[str, int], ...]) -> None:
        with contextlib.suppress(nats.errors.Error, OSError):
            await self.nc.publish(self.own_inflight, _ENCODE_INFLIGHT(InFlight(counts)))

    async def share_load(self) -> None:
        """Every INFLIGHT_SECONDS while it has peers: its own requests in flight per member, to the others (once a second
        when none are in flight); and what the silent ones said, forgotten. Alone, once a second: it is how replicas
        find each other, and a peer heard for the first time wakes it to say its counts at once. Until stopped."""
        loop = asyncio.get_running_loop()
        # said at once on starting, once listening: the others, hearing a new peer, say theirs at once (`_counted`)
        listening, stopping = asyncio.ensure_future(self._listening.wait()), asyncio.ensure_future(self._stopping.wait())
        await asyncio.wait([listening, stopping], return_when=asyncio.FIRST_COMPLETED)
        listening.cancel()
        stopping.cancel()
        self._wake.set()
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(INFLIGHT_SECONDS if self.peers else LONE_SECONDS):
                    await self._wake.wait()
            self._wake.clear()
            if self._forget_silent():
                others({subject: counts for subject, (_, counts) in self._said.items()}, self.members)
            mine = self._counts()
            if self.peers and not self._greet and not mine and not self._last_said and loop.time() - self._last_at < LONE_SECONDS:
                continue  # nothing in flight, and said so: once a second
            self._greet = False
            self._last_said, self._last_at = mine, loop.time()
            await self._publish(mine)

    async def _warm(self, seconds: float) -> None:
        js = self.nc.jetstream(timeout=10)
        try:
            end = (await js.stream_info(ROUTING_STREAM)).state.last_seq
        except nats.js.errors.NotFoundError:
            return
        if not end:
            return
        reader = OrderedReader(self.nc, ROUTING_STREAM, [f"{ROUTING_PREFIX}.>"], start_time=datetime.now(UTC) - timedelta(seconds=seconds))
        try:
            async with asyncio.timeout(60):
                if await reader.start() == 0:
                    return
                async for batch in reader.to_end():  # what it counted can age out of the stream meanwhile
                    for message in batch:
                        if message.seq > end:
                            return
                        with contextlib.suppress(msgspec.DecodeError):
                            self.learned += learn(decode_batch(message.data), self.members, self.memory, self.settings)
                        if message.seq >= end or message.pending == 0:
                            return
        finally:
            await reader.close()

    async def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        for sub in self._subs:
            self.nc.untap(sub)
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()
