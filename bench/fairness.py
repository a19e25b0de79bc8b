"""Fair tenants: a light tenant's TTFT when a heavy one sends 10x its traffic to saturated members, with the router's
fair queue on and off, in one run.

    .venv/bin/python -m bench.fairness [--quick] [--json FILE]

Layout (2 cores), as bench/routing.py: `jetway up --client-keys required` (NATS, the services, the router) on core 0,
once with the fair queue on (JETWAY_ROUTER_FAIR_PER_MEMBER = the members' batch size) and once off (0, the router
before it); the simulated vLLM members (simulator/vllm.py) in one process and this load generator share core 1.

Two client keys, `light` and `heavy`. Open loop (Poisson arrivals, seeded, the same in every phase): `light` sends
LIGHT_RATE requests a second; `heavy` sends 10 times that, which with `light` asks for more than the members can
do (OVERLOAD x their capacity). Every prompt is new text (no prefix cache to help). Per mode, two phases: `light`
alone, then `light` with `heavy`. TTFT is seen by the client (sent to the first streamed bytes); a phase waits for
`light`'s last answers, and drops `heavy`'s when it ends. Reported: `light`'s TTFT p50/p90 alone and with `heavy`,
the ratio of the p90s (the bar: at most 1.5), and what `heavy` got (answered, refused 429/503).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
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
from bench.routing import apply_members, text
from runtime.natsserver import free_port
from simulator.vllm import SimParams, VllmSimulator

ROOT = Path(__file__).resolve().parent.parent
MEMBERS = 4
MODEL = "sim"
# GPU time scaled down as in bench/routing.py: a 1,000-token uncached prefill costs 0.5 s, a decode step 10 ms; 8
# requests in a batch.
PARAMS = SimParams(ttft_base=0.02, prefill_per_token=0.0005, decode_per_token=0.01, decode_growth=0.02, max_running=8)
PROMPT_CHARS = 4000  # 1,000 tokens
MAX_TOKENS = 16
# one request holds a batch slot for about ttft_base + prefill + MAX_TOKENS decode steps
SERVICE_SECONDS = PARAMS.ttft_base + PARAMS.prefill_per_token * PROMPT_CHARS / 4 + PARAMS.decode_per_token * MAX_TOKENS * 1.14
CAPACITY = MEMBERS * PARAMS.max_running / SERVICE_SECONDS  # requests a second the members can serve
OVERLOAD = 1.25  # heavy + light ask for this much of it
HEAVY_SHARE = 10  # heavy sends this many times light's traffic
LIGHT_RATE = OVERLOAD * CAPACITY / (HEAVY_SHARE + 1)
TENANTS = ("light", "heavy")
MODES = {"fair on": PARAMS.max_running, "fair off": 0}  # JETWAY_ROUTER_FAIR_PER_MEMBER


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


# --- the load --------------------------------------------------------------------------------------------


@dataclass
class Tenant:
    ttfts: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    errors: int = 0


def arrivals(rate: float, seconds: float, seed: int) -> list[float]:
    """Poisson arrival times in [0, seconds)."""
    rng, at = random.Random(seed), 0.0
    times: list[float] = []
    while True:
        at += rng.expovariate(rate)
        if at >= seconds:
            return times
        times.append(at)


async def one(http: aiohttp.ClientSession, router: str, key: str, prompt: str, tenant: Tenant) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": prompt}], "stream": True, "max_tokens": MAX_TOKENS}
    started = time.perf_counter()
    first = 0.0
    try:
        async with http.post(f"{router}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}) as response:
            tenant.statuses[response.status] = tenant.statuses.get(response.status, 0) + 1
            if response.status != 200:
                await response.read()
                return
            async for _ in response.content.iter_any():
                if not first:
                    first = time.perf_counter() - started
    except aiohttp.ClientError:
        tenant.errors += 1
        return
    tenant.ttfts.append(first)


async def phase(router: str, keys: dict[str, str], seconds: float, *, heavy: bool, seed: int) -> dict[str, Tenant]:
    """`light` alone (or with `heavy`) for `seconds`; light's every answer, heavy's until the phase ends."""
    rng = random.Random(seed)
    plan = [(at, "light") for at in arrivals(LIGHT_RATE, seconds, seed)]
    if heavy:
        plan += [(at, "heavy") for at in arrivals(LIGHT_RATE * HEAVY_SHARE, seconds, seed + 1)]
    plan.sort()
    prompts = [text(rng, PROMPT_CHARS) for _ in plan]
    tenants = {name: Tenant() for name in TENANTS}
    tasks: dict[str, list[asyncio.Task[None]]] = {name: [] for name in TENANTS}
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as http:
        started = time.perf_counter()
        for (at, name), prompt in zip(plan, prompts, strict=True):
            delay = started + at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks[name].append(asyncio.create_task(one(http, router, keys[name], prompt, tenants[name])))
        await asyncio.gather(*tasks["light"])
        for task in tasks["heavy"]:
            task.cancel()
        await asyncio.gather(*tasks["heavy"], return_exceptions=True)
    return tenants


def idle(sims: list[str], timeout: float = 60.0) -> None:
    """Wait until no simulator runs or queues anything (what a phase left behind), then reset their counters."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        busy = 0
        for url in sims:
            with urllib.request.urlopen(f"{url}/sim/stats") as response:
                stats = json.loads(response.read())
            busy += stats["running"] + stats["waiting"]
        if not busy:
            break
        time.sleep(0.2)
    for url in sims:
        request = urllib.request.Request(f"{url}/sim/reset", data=b'{"cache": true}', headers={"Content-Type": "application/json"})
        urllib.request.urlopen(request).read()


def engine_ttft(sims: list[str]) -> float:
    """The members' own mean TTFT over the phase (from their arrival at the member: no time in the router's queue)."""
    total = count = 0.0
    for url in sims:
        with urllib.request.urlopen(f"{url}/sim/stats") as response:
            stats = json.loads(response.read())
        total, count = total + stats["ttft_sum"], count + stats["ttft_count"]
    return total / count if count else float("nan")


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))] if ordered else float("nan")


def summary(tenants: dict[str, Tenant]) -> dict[str, Any]:
    light, heavy = tenants["light"], tenants["heavy"]
    return {
        "light_requests": len(light.ttfts),
        "light_refused": sum(n for s, n in light.statuses.items() if s != 200) + light.errors,
        "light_ttft_p50_s": percentile(light.ttfts, 0.5),
        "light_ttft_p90_s": percentile(light.ttfts, 0.9),
        "heavy_answered": len(heavy.ttfts),
        "heavy_statuses": {str(s): n for s, n in sorted(heavy.statuses.items())},
        "heavy_ttft_p90_s": percentile(heavy.ttfts, 0.9),
    }


# --- jetway up, once per mode -------------------------------------------------------------------------------


def jetway_command() -> str:
    return str(Path(sys.executable).parent / "jetway")


def start_jetway(work: Path, mode: str, per_member: int, sims: list[str]) -> tuple[subprocess.Popen[bytes], str, dict[str, str]]:
    data = work / f"jetway-{mode.replace(' ', '-')}"
    keys = {}
    for name in TENANTS:
        made = subprocess.run(
            [jetway_command(), "keys", "create", name, "--data-dir", str(data)], capture_output=True, check=True, cwd=ROOT
        )
        keys[name] = made.stdout.decode().strip()
    api_port, router_port = free_port(), free_port()
    command = [jetway_command(), "up", "--data-dir", str(data), "--api-port", str(api_port), "--router-port", str(router_port)]
    command += ["--client-keys", "required", "--probe-interval", "1"]
    env = {**os.environ, "JETWAY_ROUTER_FAIR_PER_MEMBER": str(per_member)}
    process = subprocess.Popen(pinned(0, command), cwd=ROOT, stderr=subprocess.DEVNULL, env=env)
    wait_http(f"http://127.0.0.1:{api_port}/healthz")
    apply_members(api_port, data, sims)
    router = f"http://127.0.0.1:{router_port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        models = urllib.request.Request(f"{router}/v1/models", headers={"Authorization": f"Bearer {keys['light']}"})
        with urllib.request.urlopen(models) as response:
            listed = json.loads(response.read())["data"]
        if listed and len(listed[0]["members"]) == len(sims):
            return process, router, keys
        time.sleep(0.2)
    raise RuntimeError("the members did not become ready")


def main(quick: bool) -> dict[str, Any]:
    seconds = 6.0 if quick else 15.0
    work = Path(tempfile.mkdtemp(prefix="jetway-fairness-bench-"))
    ports_file = work / "ports.json"
    sims_process = subprocess.Popen(
        pinned(1, [sys.executable, "-m", "bench.fairness", "--serve-simulators", str(MEMBERS), "--ports-file", str(ports_file)]), cwd=ROOT
    )
    results: dict[str, Any] = {
        "members": MEMBERS,
        "params": PARAMS.__dict__,
        "capacity_per_s": CAPACITY,
        "light_rate_per_s": LIGHT_RATE,
        "heavy_rate_per_s": LIGHT_RATE * HEAVY_SHARE,
        "seconds": seconds,
        "modes": {},
    }
    try:
        deadline = time.monotonic() + 60
        while not ports_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        sims = [f"http://127.0.0.1:{port}" for port in json.loads(ports_file.read_text())]
        for mode, per_member in MODES.items():
            process, router, keys = start_jetway(work, mode, per_member, sims)
            try:
                rows = {}
                for name, heavy in (("alone", False), ("with heavy", True)):
                    idle(sims)
                    rows[name] = summary(asyncio.run(phase(router, keys, seconds, heavy=heavy, seed=17)))
                    rows[name]["engine_ttft_mean_s"] = engine_ttft(sims)
                    print(f"{mode:9} {name:11} {json.dumps(rows[name])}", flush=True)
                results["modes"][mode] = rows
            finally:
                process.terminate()
                process.wait(30)
    finally:
        sims_process.terminate()
        sims_process.wait(30)
    return results


def report(results: dict[str, Any]) -> None:
    print()
    print(
        f"{results['members']} members of {results['params']['max_running']} slots, about {results['capacity_per_s']:.0f} requests/s; "
        f"light {results['light_rate_per_s']:.1f}/s, heavy {results['heavy_rate_per_s']:.1f}/s, {results['seconds']:g} s a phase"
    )
    print(f"  {'mode':9} {'light p50 alone':>15} {'p90 alone':>10} {'p90 with heavy':>15} {'p90 x':>6}  heavy answered / statuses")
    for mode, rows in results["modes"].items():
        alone, busy = rows["alone"], rows["with heavy"]
        ratio = busy["light_ttft_p90_s"] / alone["light_ttft_p90_s"]
        print(
            f"  {mode:9} {alone['light_ttft_p50_s']:14.3f}s {alone['light_ttft_p90_s']:9.3f}s {busy['light_ttft_p90_s']:14.3f}s "
            f"{ratio:6.2f}  {busy['heavy_answered']} / {busy['heavy_statuses']}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="6-second phases instead of 15 (about half the time)")
    parser.add_argument("--json", help="write the results here (bench/results/fairness.json)")
    parser.add_argument("--serve-simulators", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--ports-file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_simulators:
        asyncio.run(serve_simulators(args.serve_simulators, Path(args.ports_file)))
        sys.exit(0)
    found = main(args.quick)
    report(found)
    if args.json:
        Path(args.json).write_text(json.dumps(found, indent=2) + "\n")
