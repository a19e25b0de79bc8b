"""Router replicas that remember as one (services/router/learn.py), over real HTTP and real NATS: a conversation
keeps its member whichever replica takes its next turn, a prefix one replica sent somewhere draws the same
prompt there through another, and a replica started later is warm from the stream before it routes anything."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from contracts.routing import ROUTING_PREFIX, ROUTING_STREAM, RoutingRecord, decode_batch
from runtime.bus import connect
from runtime.leases import LeaseSettings
from runtime.secrets import FileSecrets
from services.router import main as router_main
from services.router import protocol
from services.router import records as router_records
from services.router.learn import Learner
from simulator.vllm import SimParams, VllmSimulator
from testbed.waiting import eventually
from tests.support.nats import NatsEndpoint
from tests.support.stack import SETTINGS, running_stack

MEMBERS = ("echo-a", "echo-b", "echo-c", "echo-d")
# every request is answered within this or fails the test saying so (a request that hung under CPU hogs once
# held a run for minutes: aiohttp's default is five)
BOUND = aiohttp.ClientTimeout(total=30)
SYSTEM = "You are the assistant of a large company; answer politely and briefly. " * 8  # a long shared prefix


@dataclass
class Replica:
    name: str
    url: str
    learner: Learner


@contextlib.asynccontextmanager
async def replica(url: str, name: str, directory: Path, warm_seconds: float = 120.0) -> AsyncIterator[Replica]:
    """A router replica as `python -m services.router` runs one: routing records on, learning from the others."""
    nc = await connect(url, name=name)
    secrets = FileSecrets(directory / "secrets")
    router = router_main.build(
        nc, secrets, probe_interval=0.3, settings=SETTINGS, leases=LeaseSettings(8.0), replica=name, record_sample=1.0
    )
    records = router.routes.records
    assert records is not None
    await router_records.ensure_stream(nc.jetstream(), 3600.0, 16 << 20)
    tasks = [asyncio.create_task(router.runner.run()), asyncio.create_task(records.run())]
    server, port = await protocol.serve(router.routes, "127.0.0.1", 0)
    learner = router.routes.learner = Learner(nc, records.subject, router.service.members, router.routes.memory, router.routes.settings)
    try:
        await asyncio.wait_for(router.runner.ready.wait(), 20)
        await learner.start(warm_seconds)
        tasks.append(asyncio.create_task(learner.share_load()))
        yield Replica(name, f"http://127.0.0.1:{port}/v1", learner)
    finally:
        server.close()
        await learner.stop()
        records.stop()
        router.runner.stop()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(task, 20)
        router.routes.pool.close()
        await nc.close()


async def chat(http: aiohttp.ClientSession, base: str, messages: list[dict[str, str]], session: str | None = None) -> tuple[str, str]:
    """(the member that answered, why it was chosen)."""
    headers = {"x-session-id": session} if session else {}
    async with http.post(f"{base}/chat/completions", json={"model": "echo", "messages": messages}, headers=headers) as response:
        assert response.status == 200, await response.text()
        route = response.headers["x-jetway-route"]
        return response.headers["x-jetway-member"], route.split("reason=")[1].split(";")[0]


async def recorded_by(url: str, replicas: set[str]) -> bool:
    """Whether the routing records' stream holds a batch from each of `replicas` (they publish a quarter second after
    a request ends)."""
    nc = await connect(url, name="records-check")
    try:
        info = await nc.jetstream().stream_info(ROUTING_STREAM, subjects_filter=f"{ROUTING_PREFIX}.>")
        return {subject.removeprefix(ROUTING_PREFIX + ".") for subject in info.state.subjects or {}} >= replicas
    finally:
        await nc.close()


async def all_ready(http: aiohttp.ClientSession, base: str) -> bool:
    async with http.get(f"{base}/models") as response:
        listed = (await response.json())["data"]
    return bool(listed) and len(listed[0].get("members", [])) == len(MEMBERS)


async def test_three_replicas_keep_a_conversation_and_a_prefix_where_one_of_them_sent_it(nats: NatsEndpoint, tmp_path: Path) -> None:
    async with running_stack(nats.url, tmp_path, probe_interval=3600.0) as stack:
        stack.router.runner.stop()  # the replicas below are the routers
        for name in MEMBERS:
            member = {"apiVersion": "airdress.co/v1alpha1", "kind": "InferencePoolMember", "metadata": {"name": name}}
            assert (await stack.apply({**member, "spec": {"backend": "echo", "models": [{"name": "echo"}]}}))[0] == 201
        async with (
            replica(nats.url, "a", tmp_path) as a,
            replica(nats.url, "b", tmp_path) as b,
            replica(nats.url, "c", tmp_path) as c,
            aiohttp.ClientSession(timeout=BOUND) as http,
        ):
            for r in (a, b, c):
                await eventually(lambda u=r.url: all_ready(http, u), timeout=20, message=f"every member ready at {r.name}")
            # a conversation, each turn through the next replica: the first replica's choice holds
            messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "turn 0"}]
            first, _ = await chat(http, a.url, messages, session="conv-1")
            for turn, r in enumerate((b, c, a, b), start=1):
                messages.append({"role": "user", "content": f"turn {turn}"})

                async def kept(base: str = r.url) -> bool:  # the others learn a turn one batch (a quarter second) later
                    return await chat(http, base, messages, session="conv-1") == (first, "session")

                await eventually(kept, timeout=5, interval=0.1, message=f"turn {turn} at {r.name} on {first}")
            # a long prefix sent through b draws the same prompt family through c, by prefix
            prompt = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "what is the time?"}]
            owner, _ = await chat(http, b.url, prompt)
            again = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "and the date?"}]

            async def drawn() -> bool:
                return await chat(http, c.url, again) == (owner, "prefix")

            await eventually(drawn, timeout=5, interval=0.1, message=f"the prefix drawn to {owner} through c")
            # a replica started now, once those turns' records are stored, is warm from the stream before it routes anything
            await eventually(lambda: recorded_by(nats.url, {"a", "b", "c"}), timeout=10, message="the turns' records stored")
            async with replica(nats.url, "d", tmp_path) as d:
                assert d.learner.learned > 0
                await eventually(lambda: all_ready(http, d.url), timeout=20, message="every member ready at d")
                messages.append({"role": "user", "content": "a late turn"})
                assert await chat(http, d.url, messages, session="conv-1") == (first, "session")
            # without the warm start, the same newcomer would not know the conversation
            async with replica(nats.url, "e", tmp_path, warm_seconds=0) as e:
                assert e.learner.learned == 0


async def sims_applied(stack: object, count: int, ttft: float) -> list[VllmSimulator]:
    """`count` simulated vLLM members of the model `sim`, each first token `ttft` seconds after a request arrives: a
    burst's requests are all in flight at once."""
    sims = [VllmSimulator(["sim"], SimParams(ttft_base=ttft, prefill_per_token=0.0, decode_per_token=0.0)) for _ in range(count)]
    for i, sim in enumerate(sims):
        await sim.start()
        spec = {"backend": "vllm-openai", "url": sim.url, "models": [{"name": "sim"}]}
        kind = {"apiVersion": "airdress.co/v1alpha1", "kind": "InferencePoolMember", "metadata": {"name": f"sim-{i}"}}
        assert (await stack.apply({**kind, "spec": spec}))[0] == 201  # type: ignore[attr-defined]
    return sims


async def sims_ready(http: aiohttp.ClientSession, base: str, count: int) -> bool:
    async with http.get(f"{base}/models") as response:
        listed = (await response.json())["data"]
    return bool(listed) and len(listed[0].get("members", [])) == count


async def burst(http: aiohttp.ClientSession, bases: list[str], first: int) -> list[str]:
    """One new conversation per base, all sent at once, on the same long system prompt (the same home member in every
    replica) with questions of their own; the members that answered, in order."""

    async def one(i: int, base: str) -> str:
        question = f"conversation {first + i}: " + "tell me about the weather where you are, and why it is so. " * 2
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}]
        body = {"model": "sim", "messages": messages, "max_tokens": 1}
        async with http.post(f"{base}/chat/completions", json=body) as response:
            assert response.status == 200, await response.text()
            return response.headers["x-jetway-member"]

    return list(await asyncio.gather(*(one(i, base) for i, base in enumerate(bases))))


async def stored_records(url: str) -> list[RoutingRecord]:
    nc = await connect(url, name="records-read")
    try:
        js = nc.jetstream()
        last = (await js.stream_info(ROUTING_STREAM)).state.last_seq
        found: list[RoutingRecord] = []
        for seq in range(1, last + 1):
            found += decode_batch((await js.get_msg(ROUTING_STREAM, seq)).data or b"")
        return found
    finally:
        await nc.close()


async def test_a_burst_of_new_conversations_through_three_replicas_spreads_as_through_one(nats: NatsEndpoint, tmp_path: Path) -> None:
    """Nine conversations on one system prompt start at once, three through each replica: every replica's first turns
    are decided by the placer (the least-named replica alive) in turn, so the three members take 3 each, as through one
    router; three replicas deciding blind (each by its own counts and memory) put 6, 3 and 0 on them (a simulation of
    `policy.decide` says so); and each record says who placed it."""
    async with running_stack(nats.url, tmp_path, probe_interval=3600.0) as stack:
        stack.router.runner.stop()
        sims = await sims_applied(stack, 3, ttft=0.5)
        try:
            async with (
                replica(nats.url, "a", tmp_path) as a,
                replica(nats.url, "b", tmp_path) as b,
                replica(nats.url, "c", tmp_path) as c,
                aiohttp.ClientSession(timeout=BOUND) as http,
            ):
                # c, started last, knew its peers before it served: they answered its first counts at once
                assert c.learner.placer() == "a" and b.learner.placer() == "a" and a.learner.placer() is None
                for r in (a, b, c):
                    await eventually(lambda u=r.url: sims_ready(http, u, 3), timeout=20, message=f"every member ready at {r.name}")
                members = await burst(http, [a.url, b.url, c.url] * 3, 0)
                assert sorted(members.count(f"sim-{i}") for i in range(3)) == [3, 3, 3], sorted(members)
                assert a.learner.placed == 6 and b.learner.placed == c.learner.placed == 0

                async def placed_records() -> bool:
                    found = [r for r in await stored_records(nats.url) if r.model == "sim"]
                    return (
                        len(found) == 9
                        and sorted((r.router, r.placer) for r in found) == [("a", "")] * 3 + [("b", "a")] * 3 + [("c", "a")] * 3
                    )

                await eventually(placed_records, timeout=10, message="each record names its placer")
        finally:
            for sim in sims:
                await sim.stop()


async def test_when_the_placer_goes_the_next_replica_places_and_no_request_fails(nats: NatsEndpoint, tmp_path: Path) -> None:
    async with running_stack(nats.url, tmp_path, probe_interval=3600.0) as stack:
        stack.router.runner.stop()
        sims = await sims_applied(stack, 4, ttft=0.05)
        try:
            async with (
                replica(nats.url, "b", tmp_path) as b,
                replica(nats.url, "c", tmp_path) as c,
                aiohttp.ClientSession(timeout=BOUND) as http,
            ):
                for r in (b, c):
                    await eventually(lambda u=r.url: sims_ready(http, u, 4), timeout=20, message=f"every member ready at {r.name}")
                async with replica(nats.url, "a", tmp_path) as a:
                    await eventually(lambda: sims_ready(http, a.url, 4), timeout=20, message="every member ready at a")
                    await eventually(lambda: c.learner.placer() == "a", timeout=10, message="a, started last, places")
                    await burst(http, [b.url, c.url], 0)
                    assert a.learner.placed == 2
                # a is gone (as if killed: nothing said): the next new conversations are decided by b and c, none fails,
                # and b places once a has been silent for ALIVE_SECONDS
                await burst(http, [b.url, c.url], 2)
                await eventually(lambda: c.learner.placer() == "b", timeout=10, message="b places after a")
                await burst(http, [c.url, c.url], 4)
                assert b.learner.placed == 2
        finally:
            for sim in sims:
                await sim.stop()
