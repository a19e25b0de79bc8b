"""Routing policies side by side: 8 simulated vLLM members behind `jetway up`'s router, in one run.

    .venv/bin/python -m bench.routing [--quick] [--json FILE]

Layout (2 cores): `jetway up` (NATS, the services, the router) on core 0, once per policy with
`--router-policy`; the 8 simulators (simulator/vllm.py, docs/simulator.md) in one process and
the load generator in this one share core 1. Every policy sees the same requests in the same order.

Workloads (closed loop: each user sends its next request when the last one has answered):
- shared-prefix: users hold multi-turn conversations over 4 long system prompts; each turn's prompt is
  the last one plus the answer and a new question, so a member that served the last turn has most of the
  next one cached. Compared with an oracle: this load generator asks every simulator how much of the
  prompt it holds (POST /sim/cached-prefix) and sends the request straight to the best one.
- uniform: unrelated one-turn prompts, nothing to share.
- slowed: the uniform workload, with one member slowed down 5-fold a third of the way in.

Reported per policy: the prefix-cache hit rate (the simulators' own counters: hit tokens / looked-up
tokens), TTFT p50 and p90 (sent to first streamed bytes, seen by the client; each user's first request
warms cold caches under every policy and is left out), output tokens per second,
and how evenly requests spread (the busiest member's share over the mean). Ratios are to
least-outstanding, the router's policy before prefix-cache routing, measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bench.router import pinned, wait_http
from cli import routing
from cli.config import nats_url
from contracts.routing import RoutingRecord
from runtime.natsserver import free_port
from services.router import policy as policy_settings
from services.router import replay
from simulator.vllm import SimParams, VllmSimulator

ROOT = Path(__file__).resolve().parent.parent
MEMBERS = 8
MODEL = "sim"
POLICIES = ("round-robin", "least-outstanding", "prefix-cache")
# GPU time scaled down (docs/simulator.md): a 1,000-token uncached prefill costs 0.5 s, a decode step 10 ms.
PARAMS = SimParams(
    ttft_base=0.02,
    prefill_per_token=0.0005,
    decode_per_token=0.01,
    decode_growth=0.02,
    max_running=4,
    cache_blocks=1200,
    max_model_len=32768,
)
MAX_TOKENS = 16
WORDS = (
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "with", "was", "on", "be", "by", "at",
    "this", "are", "from", "or", "have", "an", "not", "which", "but", "all", "were", "when", "we", "there", "can",
)  # fmt: skip


def text(rng: random.Random, chars: int) -> str:
    out: list[str] = []
    size = 0
    while size < chars:
        word = rng.choice(WORDS) + str(rng.randrange(1000))
        out.append(word)
        size += len(word) + 1
    return " ".join(out)


# --- the simulators' process ------------------------------------------------------------------------


async def serve_simulators(count: int, ports_file: Path) -> None:
    sims = [VllmSimulator([MODEL], PARAMS) for _ in range(count)]
    ports = [await sim.start() for sim in sims]
    ports_file.write_text(json.dumps(ports))  # noqa: ASYNC240  (once, before anything is served)
    try:
        await asyncio.Event().wait()
    finally:
        for sim in sims:
            await sim.stop()


# --- workloads ---------------------------------------------------------------------------------------


@dataclass
class Conversation:
    system: str
    turns: list[str]  # the user's questions, in order
    answers: list[str]  # what the assistant "said" (fixed, so every policy sends the same prompts)

    def messages(self, turn: int) -> list[dict[str, str]]:
        messages = [{"role": "system", "content": self.system}]
        for i in range(turn):
            messages += [{"role": "user", "content": self.turns[i]}, {"role": "assistant", "content": self.answers[i]}]
        return [*messages, {"role": "user", "content": self.turns[turn]}]


def shared_prefix(users: int, conversations: int, turns: int, seed: int = 7) -> list[list[Conversation]]:
    """Per user, the conversations it holds one after another."""
    rng = random.Random(seed)
    systems = [text(rng, 4000) for _ in range(4)]
    every = [
        Conversation(systems[i % 4], [text(rng, 800) for _ in range(turns)], [text(rng, 100) for _ in range(turns)])
        for i in range(conversations)
    ]
    return [every[u::users] for u in range(users)]


def uniform(users: int, requests: int, seed: int = 11) -> list[list[Conversation]]:
    rng = random.Random(seed)
    every = [Conversation(text(rng, 1600), [text(rng, 400)], [""]) for _ in range(requests)]
    return [every[u::users] for u in range(users)]


# --- the load generator --------------------------------------------------------------------------------


@dataclass
class Run:
    ttfts: list[float] = field(default_factory=list)
    tokens: int = 0
    errors: int = 0
    seconds: float = 0.0


async def stream(http: aiohttp.ClientSession, url: str, messages: list[dict[str, str]], run: Run, *, warm_up: bool = False) -> None:
    body = {"model": MODEL, "messages": messages, "stream": True, "max_tokens": MAX_TOKENS}
    started = time.perf_counter()
    first = 0.0
    try:
        async with http.post(url, json=body) as response:
            if response.status != 200:
                run.errors += 1
                await response.read()
                return
            async for _ in response.content.iter_any():
                if not first:
                    first = time.perf_counter() - started
    except aiohttp.ClientError:
        run.errors += 1
        return
    if not warm_up:  # a user's first request meets cold caches under every policy: not what policies are compared on
        run.ttfts.append(first)
    run.tokens += MAX_TOKENS


async def oracle_url(http: aiohttp.ClientSession, sims: list[str], messages: list[dict[str, str]], in_flight: list[int]) -> int:
    """The member holding the longest cached prefix of this prompt (ties: the least busy)."""

    async def cached(url: str) -> int:
        async with http.post(f"{url}/sim/cached-prefix", json={"messages": messages}) as response:
            return int((await response.json())["cached_tokens"])

    held = await asyncio.gather(*(cached(u) for u in sims))
    return max(range(len(sims)), key=lambda i: (held[i], -in_flight[i]))


@dataclass
class Routers:
    """Several router replicas behind a round-robin client, as a Service spreads requests: each request to the next
    replica alive; `kill` stops one (SIGKILL, as a crash) once `kill_after` requests were sent."""

    urls: list[str]
    kill: subprocess.Popen[bytes] | None = None
    kill_url: str = ""
    kill_after: int = 0
    turn: int = 0

    def next(self, sent: int) -> str:
        if self.kill is not None and sent >= self.kill_after:
            self.kill.kill()
            self.urls.remove(self.kill_url)
            self.kill = None
        self.turn += 1
        return self.urls[self.turn % len(self.urls)]


async def drive(
    router: str | Routers | None, sims: list[str], plan: list[list[Conversation]], *, slow_after: int | None = None
) -> tuple[Run, list[dict[str, Any]]]:
    """Every user's conversations through the router (several, round robin; or the oracle when `router` is None);
    the simulators' stats."""
    run = Run()
    sent = 0
    in_flight = [0] * len(sims)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as http:
        for url in sims:
            async with http.post(f"{url}/sim/reset", json={"cache": True}) as response:
                response.raise_for_status()
            async with http.post(f"{url}/sim/config", json={"slow_factor": 1.0}) as response:
                response.raise_for_status()

        async def user(conversations: list[Conversation]) -> None:
            nonlocal sent
            first = True
            for conversation in conversations:
                for turn in range(len(conversation.turns)):
                    sent += 1
                    warm_up, first = first, False
                    if slow_after is not None and sent == slow_after:
                        async with http.post(f"{sims[0]}/sim/config", json={"slow_factor": 5.0}) as response:
                            response.raise_for_status()
                    messages = conversation.messages(turn)
                    if router is None:
                        chosen = await oracle_url(http, sims, messages, in_flight)
                        in_flight[chosen] += 1
                        try:
                            await stream(http, f"{sims[chosen]}/v1/chat/completions", messages, run, warm_up=warm_up)
                        finally:
                            in_flight[chosen] -= 1
                    else:
                        base = router.next(sent) if isinstance(router, Routers) else router
                        await stream(http, f"{base}/v1/chat/completions", messages, run, warm_up=warm_up)

        started = time.perf_counter()
        await asyncio.gather(*(user(c) for c in plan))
        run.seconds = time.perf_counter() - started
        stats = []
        for url in sims:
            async with http.get(f"{url}/sim/stats") as response:
                stats.append(await response.json())
    return run, stats


def summary(run: Run, stats: list[dict[str, Any]]) -> dict[str, Any]:
    queries = sum(s["prefix_cache_queries"] for s in stats)
    hits = sum(s["prefix_cache_hits"] for s in stats)
    served = [s["requests_finished"] for s in stats]
    mean = statistics.mean(served) if served else 0
    ttfts = sorted(run.ttfts)

    def pct(p: float) -> float:
        return ttfts[min(len(ttfts) - 1, int(p * len(ttfts)))] if ttfts else float("nan")

    return {
        "requests": len(run.ttfts),
        "errors": run.errors,
        "hit_rate": hits / queries if queries else 0.0,
        "ttft_p50_s": pct(0.5),
        "ttft_p90_s": pct(0.9),
        "tokens_per_s": run.tokens / run.seconds if run.seconds else 0.0,
        "busiest_over_mean": max(served) / mean if mean else 0.0,
        "per_member": served,
        "seconds": run.seconds,
    }


# --- jetway up, once per policy --------------------------------------------------------------------------


def apply_members(api_port: int, data: Path, sims: list[str]) -> None:
    """One InferencePoolMember `sim-<i>` of MODEL per simulator, through `jetway up`'s apply API (its token from `data`)."""
    token = json.loads((data / "jetway.json").read_text())["token"]
    for i, url in enumerate(sims):
        member = {
            "apiVersion": "airdress.co/v1alpha1",
            "kind": "InferencePoolMember",
            "metadata": {"name": f"sim-{i}"},
            "spec": {"backend": "vllm-openai", "url": url, "models": [{"name": MODEL}]},
        }
        request = urllib.request.Request(
            f"http://127.0.0.1:{api_port}/v1/apply",
            data=json.dumps(member).encode(),
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        urllib.request.urlopen(request).read()


def start_simulators(work: Path, module: str = "bench.routing") -> tuple[subprocess.Popen[bytes], list[str]]:
    """MEMBERS simulators in a process of their own on core 1 (`module`'s --serve-simulators); their URLs."""
    ports_file = work / "ports.json"
    command = [sys.executable, "-m", module, "--serve-simulators", str(MEMBERS), "--ports-file", str(ports_file)]
    process = subprocess.Popen(pinned(1, command), cwd=ROOT)
    deadline = time.monotonic() + 60
    while not ports_file.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    return process, [f"http://127.0.0.1:{port}" for port in json.loads(ports_file.read_text())]


def start_jetway(work: Path, policy: str, sims: list[str], name: str = "") -> tuple[subprocess.Popen[bytes], str]:
    api_port, router_port = free_port(), free_port()
    data = work / f"jetway-{name or policy}"
    jetway = str(Path(sys.executable).parent / "jetway")
    command = [jetway, "up", "--data-dir", str(data), "--api-port", str(api_port), "--router-port", str(router_port)]
    command += ["--router-policy", policy, "--probe-interval", "1"]
    with (work / f"jetway-{name or policy}.log").open("wb") as log:  # what it logged, kept with its data for a look after
        process = subprocess.Popen(pinned(0, command), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    wait_http(f"http://127.0.0.1:{api_port}/healthz")
    apply_members(api_port, data, sims)
    router = f"http://127.0.0.1:{router_port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"{router}/v1/models") as response:
            listed = json.loads(response.read())["data"]
        if listed and len(listed[0]["members"]) == len(sims):
            return process, router
        time.sleep(0.2)
    raise RuntimeError("the members did not become ready")


def main(quick: bool, replay_only: bool = False) -> dict[str, Any]:
    users = 16 if quick else 32
    workloads: dict[str, tuple[list[list[Conversation]], int | None]] = {
        "shared-prefix": (shared_prefix(users, users * (2 if quick else 3), 5 if quick else 8), None),
        "uniform": (uniform(users, users * (6 if quick else 12)), None),
    }
    slowed_plan = uniform(users, users * (6 if quick else 24), seed=13)  # longer: the end of a run is on the slow member or not
    workloads["slowed"] = (slowed_plan, sum(len(c) for c in slowed_plan) // 3)
    policies: tuple[str, ...] = POLICIES
    if replay_only:  # `--replay-only`: the shared-prefix workload under the two policies the replay is validated on
        workloads = {"shared-prefix": workloads["shared-prefix"]}
        policies = ("least-outstanding", "prefix-cache")
    work = Path(tempfile.mkdtemp(prefix="jetway-routing-bench-"))
    sims_process, sims = start_simulators(work)
    results: dict[str, Any] = {"members": MEMBERS, "users": users, "params": PARAMS.__dict__, "workloads": {}}
    try:
        rows: dict[str, dict[str, Any]] = {name: {} for name in workloads}
        recorded: dict[str, list[RoutingRecord]] = {}
        for policy in policies:
            process, router = start_jetway(work, policy, sims)
            try:
                for name, (plan, slow_after) in workloads.items():
                    began = time.time()
                    run, stats = asyncio.run(drive(router, sims, plan, slow_after=slow_after))
                    rows[name][policy] = summary(run, stats)
                    if name == "shared-prefix":  # its routing records, for the replay's validation
                        recorded[policy] = routing_records(
                            work / f"jetway-{policy}", began, time.time(), sum(len(c.turns) for cs in plan for c in cs)
                        )
                    print(f"{name:14} {policy:18} {json.dumps({k: v for k, v in rows[name][policy].items() if k != 'per_member'})}")
            finally:
                process.terminate()
                process.wait(30)
        run, stats = asyncio.run(drive(None, sims, workloads["shared-prefix"][0]))
        rows["shared-prefix"]["oracle"] = summary(run, stats)
        print(f"{'shared-prefix':14} {'oracle':18} {json.dumps(rows['shared-prefix']['oracle'])}")
        results["workloads"] = rows
        results["replay"] = validate_replay(recorded, rows["shared-prefix"])
    finally:
        sims_process.terminate()
        sims_process.wait(30)
    return results


def start_router(work: Path, data: Path, name: str, members: int) -> tuple[subprocess.Popen[bytes], str]:
    """Another router replica (`python -m services.router`, as a pod runs it) on `jetway up`'s NATS."""
    port = free_port()
    env = {
        **os.environ,
        "JETWAY_NATS_URL": nats_url(None, str(data)),
        "JETWAY_REPLICA": name,
        "JETWAY_ROUTER_HOST": "127.0.0.1",
        "JETWAY_ROUTER_PORT": str(port),
        "JETWAY_HEALTH_HOST": "127.0.0.1",
        "JETWAY_HEALTH_PORT": str(free_port()),
        "JETWAY_SECRETS_DIR": str(work / "secrets"),
        "JETWAY_PROBE_INTERVAL": "1",
        "JETWAY_ROUTER_POLICY": "prefix-cache",
    }
    command = pinned(0, [sys.executable, "-m", "services.router"])
    with (work / f"{name}.log").open("wb") as log:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/v1/models", timeout=2) as response:
                listed = json.loads(response.read())["data"]
            if listed and len(listed[0]["members"]) == members:
                return process, url
        except OSError:
            pass
        time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"router replica {name} did not come up")


def replicas_main(quick: bool) -> dict[str, Any]:
    """The shared-prefix workload through one router, then through three replicas behind a round-robin client with
    one killed a third of the way in (issue 26 #2): hit rate and TTFT p90 of each."""
    users = 16 if quick else 32
    plan = shared_prefix(users, users * (2 if quick else 3), 5 if quick else 8)
    work = Path(tempfile.mkdtemp(prefix="jetway-replicas-bench-"))
    sims_process, sims = start_simulators(work)
    rows: dict[str, Any] = {}
    processes: list[subprocess.Popen[bytes]] = []
    try:
        process, router = start_jetway(work, "prefix-cache", sims, name="one-router")
        processes.append(process)
        run, stats = asyncio.run(drive(router, sims, plan))
        rows["one router"] = summary(run, stats)
        process.terminate()
        process.wait(30)
        process, router = start_jetway(work, "prefix-cache", sims, name="three-routers")
        processes.append(process)
        b, b_url = start_router(work, work / "jetway-three-routers", "router-b", len(sims))
        c, c_url = start_router(work, work / "jetway-three-routers", "router-c", len(sims))
        processes += [b, c]
        sent = sum(len(conversation.turns) for conversations in plan for conversation in conversations)
        routers = Routers([router, b_url, c_url], kill=b, kill_url=b_url, kill_after=sent // 3)
        run, stats = asyncio.run(drive(routers, sims, plan))
        rows["three routers, one killed"] = summary(run, stats)
        for name, row in rows.items():
            print(f"{name:26} {json.dumps({k: v for k, v in row.items() if k != 'per_member'})}")
    finally:
        for process in processes:
            if process.poll() is None:
                process.terminate()
                process.wait(30)
        sims_process.terminate()
        sims_process.wait(30)
    one = rows["one router"]
    three = rows["three routers, one killed"]
    print("\nshared-prefix: one router vs three replicas behind a round-robin client, one killed a third of the way in")
    print(f"  {'':26} {'hit rate':>8} {'TTFT p90':>9} {'errors':>6}")
    for name, row in rows.items():
        print(f"  {name:26} {row['hit_rate']:8.1%} {row['ttft_p90_s']:8.3f}s {row['errors']:6}")
    print(f"  three over one: hit rate {three['hit_rate'] / one['hit_rate']:.3f}, TTFT p90 {three['ttft_p90_s'] / one['ttft_p90_s']:.3f}")
    return {"members": MEMBERS, "users": users, "replicas": rows}


def routing_records(data: Path, began: float, ended: float, expected: int) -> list[RoutingRecord]:
    """The routing records `jetway up` stored for one workload's requests (every one: JETWAY_ROUTER_RECORDS is 1)."""
    url = nats_url(None, str(data))
    deadline = time.monotonic() + 30
    while True:  # the router publishes its records a quarter of a second after the requests end
        found = [r for r in asyncio.run(routing.read(url, (None, None), (None, None))) if began <= r.at <= ended and r.model == MODEL]
        if len(found) >= expected or time.monotonic() > deadline:
            return found
        time.sleep(0.3)


def validate_replay(recorded: dict[str, list[RoutingRecord]], measured: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """`jetway replay routing`'s prediction of one policy's hit rate from another policy's traffic, beside the rate
    that policy really measured (the simulators' counters) in the same run."""
    rows = []
    for source, records in recorded.items():
        kept = replay.routed(records)
        for target in ("least-outstanding", "prefix-cache"):
            predicted = replay.replay(
                kept, dataclasses.replace(policy_settings.Settings(), policy=target), cache_blocks=PARAMS.cache_blocks
            )
            rows.append(
                {
                    "traffic_of": source,
                    "replayed_under": target,
                    "records": len(kept),
                    "predicted_hit_rate": predicted.hit_rate,
                    "measured_hit_rate": measured[target]["hit_rate"],
                }
            )
    return rows


def report(results: dict[str, Any]) -> None:
    print()
    if results.get("replay"):
        print("jetway replay routing on the shared-prefix workload: predicted hit rate vs the rate the policy measured")
        print(f"  {'traffic of':18} {'replayed under':18} {'records':>7} {'predicted':>9} {'measured':>9} {'points':>7}")
        for row in results["replay"]:
            points = 100 * (row["predicted_hit_rate"] - row["measured_hit_rate"])
            print(
                f"  {row['traffic_of']:18} {row['replayed_under']:18} {row['records']:7} "
                f"{row['predicted_hit_rate']:9.1%} {row['measured_hit_rate']:9.1%} {points:+7.1f}"
            )
        print()
    for name, rows in results["workloads"].items():
        base = rows["least-outstanding"]
        print(f"{name}: vs least-outstanding")
        print(f"  {'policy':18} {'hit rate':>8} {'TTFT p50':>9} {'p90':>9} {'p90 x':>6} {'tok/s':>7} {'tok/s x':>7} {'busiest/mean':>12}")
        for policy, row in rows.items():
            print(
                f"  {policy:18} {row['hit_rate']:8.1%} {row['ttft_p50_s']:8.3f}s {row['ttft_p90_s']:8.3f}s "
                f"{row['ttft_p90_s'] / base['ttft_p90_s']:6.2f} {row['tokens_per_s']:7.0f} "
                f"{row['tokens_per_s'] / base['tokens_per_s']:7.2f} "
                f"{row['busiest_over_mean']:12.2f}"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="half the users and fewer turns (about a third of the time)")
    parser.add_argument("--json", help="write the results here (bench/results/routing.json)")
    parser.add_argument("--replay-only", action="store_true", help="only the shared-prefix workload, to validate `jetway replay routing`")
    parser.add_argument("--replicas", action="store_true", help="the shared-prefix workload through one router, then three with one killed")
    parser.add_argument("--serve-simulators", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--ports-file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_simulators:
        asyncio.run(serve_simulators(args.serve_simulators, Path(args.ports_file)))
        sys.exit(0)
    if args.replicas:
        found = replicas_main(args.quick)
    else:
        found = main(args.quick, args.replay_only)
        report(found)
    if args.json:
        Path(args.json).write_text(json.dumps(found, indent=2) + "\n")
