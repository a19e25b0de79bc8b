"""The router against calling the upstream directly, against an older build of itself, and against LiteLLM's
proxy, in one run.

    .venv/bin/python -m bench.router [--seconds 5] [--connections 50] [--rounds 1] [--baseline-ref REF]
                                     [--litellm PATH] [--json FILE]

Layout (2 cores): the proxies under test (this tree's router, the baseline's, LiteLLM with one worker) are
pinned to core 0, all started before the first measurement; the fast upstream (bench/fast_upstream.py) and
the load generator (wrk) share core 1, the same for every row. For each round, mode (a plain chat completion,
and a stream of 16 SSE chunks) and target:
- added latency: wrk with one connection, p50 and p99, minus the direct call's in the same round;
- throughput: wrk with `--connections` connections, requests per second, and the ratio to
  calling the upstream directly in the same round.
`--baseline-ref REF` (e.g. HEAD~3, a commit) exports that commit's tree (`git archive`) to a temporary folder
and runs its `jetway up` from there beside this tree's, with the same Python environment; the two are
measured one after the other in every round, in turns (this tree first in odd rounds, the baseline first in
even ones), so a machine whose speed drifts moves both alike. The last table is this tree over the baseline,
per round and the median over the rounds: above 1 for req/s is faster, below 1 for p50/p99 is faster.
LiteLLM runs when its `litellm` command is found (`--litellm`, or `.bench-venv/bin/litellm`,
or on PATH), with shared/bench/litellm.yaml's settings; otherwise its rows say "not installed".
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from runtime.natsserver import free_port

ROOT = Path(__file__).resolve().parent.parent
MASTER_KEY = "sk-0123456789abcdef0123456789abcdef0123456789abcdef"
BODY = {"model": "m", "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 16}


def pinned(core: int, command: list[str]) -> list[str]:
    return ["taskset", "-c", str(core), *command] if shutil.which("taskset") else command


def wait_http(url: str, timeout: float = 120.0, headers: dict[str, str] | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not come up in {timeout:.0f}s")


def lua(path: Path, body: dict[str, Any], headers: dict[str, str]) -> Path:
    lines = ['wrk.method = "POST"', f"wrk.body = {json.dumps(json.dumps(body))}", 'wrk.headers["Content-Type"] = "application/json"']
    lines += [f'wrk.headers["{k}"] = "{v}"' for k, v in headers.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1000.0}


def stolen_ms(core: int = 0) -> float:
    """Time the hypervisor took from `core` so far (/proc/stat's steal column), in ms; 0 where it is not reported."""
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            fields = line.split()
            if fields[0] == f"cpu{core}" and len(fields) > 8:
                return int(fields[8]) * 1000 / os.sysconf("SC_CLK_TCK")
    except OSError:
        pass
    return 0.0


def stop_all(processes: list[subprocess.Popen[bytes]], timeout: float = 15.0) -> None:
    """SIGTERM to every process still running, then each waited for `timeout` seconds, killed if it has not stopped."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def wrk(url: str, script: Path, connections: int, seconds: int) -> dict[str, float]:
    out = subprocess.run(
        pinned(1, ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", str(script), url]),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    result: dict[str, float] = {"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))}  # type: ignore[union-attr]
    for label, key in (("50%", "p50_ms"), ("99%", "p99_ms")):
        found = re.search(rf"{re.escape(label)}\s+([\d.]+)(us|ms|s)\b", out)
        if found:
            result[key] = float(found.group(1)) * _UNITS[found.group(2)]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    result["errors"] = float(errors.group(1)) if errors else 0.0
    result["requests"] = float(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    return result


def cpu_seconds(pid: int) -> float:
    """The CPU time (user and system) the process has used so far: a router's cost per request, whatever else runs."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def litellm_command(explicit: str | None) -> str | None:
    for candidate in (explicit, str(ROOT / ".bench-venv/bin/litellm"), shutil.which("litellm")):
        if candidate and Path(candidate).exists():
            return candidate
    return None


def export_tree(ref: str, into: Path) -> str:
    """`ref`'s tree as files under `into` (git archive: no worktree is registered in the repository); its short commit."""
    commit = subprocess.run(["git", "rev-parse", "--short", f"{ref}^{{commit}}"], cwd=ROOT, capture_output=True, text=True, check=True)
    into.mkdir(parents=True)
    archive = subprocess.Popen(["git", "archive", "--format=tar", commit.stdout.strip()], cwd=ROOT, stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(into)], stdin=archive.stdout, check=True)
    if archive.wait() != 0:
        raise SystemExit(f"git archive {ref} failed")
    return commit.stdout.strip()


def start_upstream(processes: list[subprocess.Popen[bytes]]) -> int:
    """The fast upstream (bench/fast_upstream.py) pinned to core 1, beside wrk; its port once it answers."""
    port = free_port()
    processes.append(subprocess.Popen(pinned(1, [sys.executable, "-m", "bench.fast_upstream", "--port", str(port)]), cwd=ROOT))
    wait_http(f"http://127.0.0.1:{port}/v1/models")
    return port


def start_jetway(
    tree: Path,
    data: Path,
    upstream_port: int,
    processes: list[subprocess.Popen[bytes]],
    env: dict[str, str] | None = None,
    *,
    wrap: list[str] | None = None,
    timeout: float = 120.0,
    members: int = 1,
) -> tuple[int, int]:
    """`jetway up` of the tree at `tree`, pinned to core 0, with `members` members (one by default) on the fast upstream;
    its router's port once it serves them, and its process id. Run as `python -m cli.main` from `tree`, so that tree's
    modules are the ones imported; `env` adds settings (JETWAY_ROUTER_*); `wrap` runs it under another command
    (valgrind, say), given `timeout` seconds to serve."""
    api_port, router_port = free_port(), free_port()
    command = [
        sys.executable,
        "-m",
        "cli.main",
        "up",
        "--data-dir",
        str(data),
        "--api-port",
        str(api_port),
        "--router-port",
        str(router_port),
    ]
    environment = {**os.environ, **(env or {}), "PYTHONPATH": str(tree)}
    process = subprocess.Popen(
        pinned(0, [*(wrap or []), *command]), cwd=tree, env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    processes.append(process)
    wait_http(f"http://127.0.0.1:{api_port}/healthz", timeout)
    written = time.monotonic() + timeout
    while not (data / "jetway.json").exists() and time.monotonic() < written:  # written beside the API's start
        time.sleep(0.1)
    token = json.loads((data / "jetway.json").read_text())["token"]
    for i in range(members):
        member = {
            "apiVersion": "airdress.co/v1alpha1",
            "kind": "InferencePoolMember",
            "metadata": {"name": "bench" if i == 0 else f"bench-{i + 1}"},
            "spec": {"backend": "vllm-openai", "url": f"http://127.0.0.1:{upstream_port}", "models": [{"name": "m"}]},
        }
        urllib.request.urlopen(
            urllib.request.Request(
                f"http://127.0.0.1:{api_port}/v1/apply",
                data=json.dumps(member).encode(),
                headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            )
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"http://127.0.0.1:{router_port}/v1/models", timeout=timeout) as response:
            listed = json.loads(response.read())["data"]
            if listed and len(listed[0].get("members", [])) >= members:
                return router_port, process.pid
        time.sleep(0.1)
    raise RuntimeError(f"the router of {tree} did not serve its {members} member(s) in {timeout:.0f} s")


def measure(url: str, script: Path, connections: int, seconds: int, pid: int | None = None) -> dict[str, Any]:
    """One target's figures; with `pid` (a router's `jetway up`, the router on its event loop) also its CPU time per
    request under load, which other work on the machine slows less than it slows req/s."""
    wrk(url, script, 1, 1)  # warm up connections and caches
    before = stolen_ms()
    latency = wrk(url, script, 1, seconds)
    stolen = stolen_ms() - before  # a tail of 1-2 ms follows the hypervisor's steal, not the router (docs/router.md)
    cpu = cpu_seconds(pid) if pid else 0.0
    load = wrk(url, script, connections, seconds)
    cpu = cpu_seconds(pid) - cpu if pid else 0.0
    return {
        "cpu_us_per_request": round(cpu * 1e6 / load["requests"], 1) if pid and load["requests"] else 0.0,
        "rps": round(load["rps"]),
        "errors": int(load["errors"] + latency["errors"]),
        "p50_ms": round(latency.get("p50_ms", 0.0), 3),
        "p99_ms": round(latency.get("p99_ms", 0.0), 3),
        "stolen_ms": round(stolen),
    }


def order(targets: list[str], round_: int) -> list[str]:
    """The targets in this round's order: this tree and the baseline take turns at going first."""
    if round_ % 2 and "jetway" in targets and "baseline" in targets:
        i, j = targets.index("jetway"), targets.index("baseline")
        targets = list(targets)
        targets[i], targets[j] = targets[j], targets[i]
    return targets


def main(seconds: int, connections: int, litellm: str | None, rounds: int = 1, baseline_ref: str | None = None) -> dict[str, Any]:
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is needed: apt-get install wrk")
    work = Path(tempfile.mkdtemp(prefix="jetway-router-bench-"))
    processes: list[subprocess.Popen[bytes]] = []
    try:
        upstream_port = start_upstream(processes)

        targets: dict[str, tuple[str, dict[str, str]]] = {"direct": (f"http://127.0.0.1:{upstream_port}/v1/chat/completions", {})}
        router_port, pid = start_jetway(ROOT, work / "jetway", upstream_port, processes)
        targets["jetway"] = (f"http://127.0.0.1:{router_port}/v1/chat/completions", {})
        pids = {"jetway": pid}
        baseline = None
        if baseline_ref:
            baseline = export_tree(baseline_ref, work / "baseline-tree")
            baseline_port, pids["baseline"] = start_jetway(work / "baseline-tree", work / "baseline", upstream_port, processes)
            targets["baseline"] = (f"http://127.0.0.1:{baseline_port}/v1/chat/completions", {})
        command = litellm_command(litellm)
        if command:
            litellm_port = free_port()
            config = work / "litellm.yaml"
            config.write_text(
                (ROOT.parent / "shared/bench/litellm.yaml").read_text().replace("127.0.0.1:18001", f"127.0.0.1:{upstream_port}")
                if (ROOT.parent / "shared/bench/litellm.yaml").exists()
                else f"model_list:\n  - model_name: m\n    litellm_params:\n      model: openai/m\n      api_base: "
                f"http://127.0.0.1:{upstream_port}/v1\n      api_key: sk-fake\nlitellm_settings:\n  callbacks: []\n  num_retries: 0\n"
                f"general_settings:\n  master_key: {MASTER_KEY}\n"
            )
            env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
            processes.append(
                subprocess.Popen(
                    pinned(0, [command, "--config", str(config), "--host", "127.0.0.1", "--port", str(litellm_port), "--num_workers", "1"]),
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
            wait_http(f"http://127.0.0.1:{litellm_port}/health/liveliness", timeout=240)
            targets["litellm"] = (f"http://127.0.0.1:{litellm_port}/v1/chat/completions", {"Authorization": f"Bearer {MASTER_KEY}"})

        runs: list[dict[str, dict[str, Any]]] = []
        for round_ in range(rounds):
            rows: dict[str, dict[str, Any]] = {}
            for mode, stream in (("plain", False), ("stream", True)):
                body = {**BODY, "stream": stream}
                for name in order(list(targets), round_):
                    url, headers = targets[name]
                    script = lua(work / f"{name}-{mode}.lua", body, headers)
                    rows[f"{name} {mode}"] = measure(url, script, connections, seconds, pids.get(name))
            for mode in ("plain", "stream"):
                direct = rows[f"direct {mode}"]
                for name in targets:
                    row = rows[f"{name} {mode}"]
                    row["rps_ratio_to_direct"] = round(row["rps"] / direct["rps"], 3)
                    row["added_p50_ms"] = round(row["p50_ms"] - direct["p50_ms"], 3)
                    row["added_p99_ms"] = round(row["p99_ms"] - direct["p99_ms"], 3)
            runs.append(rows)
            columns = f"{'req/s':>9}{'x direct':>10}{'p50 ms':>9}{'p99 ms':>9}{'+p50 ms':>9}{'+p99 ms':>9}{'errors':>8}"
            columns += f"{'stolen ms':>10}{'cpu us/req':>11}"
            if rounds > 1:
                print(f"{chr(10) if round_ else ''}round {round_ + 1} of {rounds}")
            print(f"{'target':<16}{columns}")
            for name, row in rows.items():
                print(
                    f"{name:<16}{row['rps']:>9,}{row['rps_ratio_to_direct']:>10.3f}{row['p50_ms']:>9.3f}{row['p99_ms']:>9.3f}"
                    f"{row['added_p50_ms']:>9.3f}{row['added_p99_ms']:>9.3f}{row['errors']:>8}{row['stolen_ms']:>10}"
                    f"{row['cpu_us_per_request'] or '':>11}"
                )
        result: dict[str, Any] = {
            "seconds": seconds,
            "connections": connections,
            "litellm": bool(command),
            "rounds": runs,
            "rows": runs[-1],
        }
        if baseline is not None:
            result["baseline"] = baseline
            result["versus_baseline"] = compared(runs, baseline)
        if not command:
            print("litellm: not installed (python3 -m venv .bench-venv && .bench-venv/bin/pip install 'litellm[proxy]')")
        return result
    finally:
        stop_all(processes)
        shutil.rmtree(work, ignore_errors=True)


def compared(runs: list[dict[str, dict[str, Any]]], baseline: str) -> dict[str, dict[str, Any]]:
    """This tree over the baseline, per round and as the median of the rounds' ratios; printed as a table."""
    figures = {}
    print(f"\nthis tree / baseline {baseline} (req/s: above 1 is faster; the others: below 1 is faster)")
    print(f"{'mode':<8}{'figure':<20}{'median':>8}  per round")
    for mode in ("plain", "stream"):
        for figure in ("rps", "cpu_us_per_request", "p50_ms", "p99_ms", "added_p50_ms"):
            ratios = [
                rows[f"jetway {mode}"][figure] / rows[f"baseline {mode}"][figure] if rows[f"baseline {mode}"][figure] else float("nan")
                for rows in runs
            ]
            median = statistics.median(ratios)
            figures[f"{mode} {figure}"] = {"median": round(median, 3), "rounds": [round(r, 3) for r in ratios]}
            print(f"{mode:<8}{figure:<20}{median:>8.3f}  {' '.join(f'{r:.3f}' for r in ratios)}")
    return figures


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=1, help="measure every target this many times, in turns")
    parser.add_argument("--baseline-ref", metavar="REF", help="also run the router of this git commit, alternating with this tree's")
    parser.add_argument("--litellm", help="the litellm command (default: .bench-venv/bin/litellm or PATH)")
    parser.add_argument("--json", type=Path)
    options = parser.parse_args()
    outcome = main(options.seconds, options.connections, options.litellm, options.rounds, options.baseline_ref)
    if options.json:
        options.json.parent.mkdir(parents=True, exist_ok=True)
        options.json.write_text(json.dumps(outcome, indent=2) + "\n")
