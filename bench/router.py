"""The router against calling the upstream directly, and against LiteLLM's proxy, in one run.

    .venv/bin/python -m bench.router [--seconds 5] [--connections 50] [--litellm PATH] [--json FILE]

Layout (2 cores): the proxy under test (Jetway's router, or LiteLLM with one worker) is
pinned to core 0; the fast upstream (bench/fast_upstream.py) and the load generator (wrk)
share core 1, the same for every row. For each target and mode (a plain chat completion,
and a stream of 16 SSE chunks):
- added latency: wrk with one connection, p50 and p99, minus the direct call's;
- throughput: wrk with `--connections` connections, requests per second, and the ratio to
  calling the upstream directly.
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
    return result


def litellm_command(explicit: str | None) -> str | None:
    for candidate in (explicit, str(ROOT / ".bench-venv/bin/litellm"), shutil.which("litellm")):
        if candidate and Path(candidate).exists():
            return candidate
    return None


def main(seconds: int, connections: int, litellm: str | None) -> dict[str, Any]:
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is needed: apt-get install wrk")
    work = Path(tempfile.mkdtemp(prefix="jetway-router-bench-"))
    processes: list[subprocess.Popen[bytes]] = []
    try:
        upstream_port = free_port()
        processes.append(subprocess.Popen(pinned(1, [sys.executable, "-m", "bench.fast_upstream", "--port", str(upstream_port)]), cwd=ROOT))
        wait_http(f"http://127.0.0.1:{upstream_port}/v1/models")

        api_port, router_port = free_port(), free_port()
        jetway = str(Path(sys.executable).parent / "jetway")
        processes.append(
            subprocess.Popen(
                pinned(
                    0, [jetway, "up", "--data-dir", str(work / "jetway"), "--api-port", str(api_port), "--router-port", str(router_port)]
                ),
                cwd=ROOT,
                stderr=subprocess.DEVNULL,
            )
        )
        wait_http(f"http://127.0.0.1:{api_port}/healthz")
        token = json.loads((work / "jetway" / "jetway.json").read_text())["token"]
        member = {
            "apiVersion": "airdress.co/v1alpha1",
            "kind": "InferencePoolMember",
            "metadata": {"name": "bench"},
            "spec": {"backend": "vllm-openai", "url": f"http://127.0.0.1:{upstream_port}", "models": [{"name": "m"}]},
        }
        urllib.request.urlopen(
            urllib.request.Request(
                f"http://127.0.0.1:{api_port}/v1/apply",
                data=json.dumps(member).encode(),
                headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            )
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with urllib.request.urlopen(f"http://127.0.0.1:{router_port}/v1/models") as response:
                if json.loads(response.read())["data"]:
                    break
            time.sleep(0.1)

        targets: dict[str, tuple[str, dict[str, str]]] = {
            "direct": (f"http://127.0.0.1:{upstream_port}/v1/chat/completions", {}),
            "jetway": (f"http://127.0.0.1:{router_port}/v1/chat/completions", {}),
        }
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

        rows: dict[str, dict[str, Any]] = {}
        for mode, stream in (("plain", False), ("stream", True)):
            body = {**BODY, "stream": stream}
            for name, (url, headers) in targets.items():
                script = lua(work / f"{name}-{mode}.lua", body, headers)
                wrk(url, script, 1, 1)  # warm up connections and caches
                before = stolen_ms()
                latency = wrk(url, script, 1, seconds)
                stolen = stolen_ms() - before  # a tail of 1-2 ms follows the hypervisor's steal, not the router (docs/router.md)
                load = wrk(url, script, connections, seconds)
                rows[f"{name} {mode}"] = {
                    "rps": round(load["rps"]),
                    "errors": int(load["errors"] + latency["errors"]),
                    "p50_ms": round(latency.get("p50_ms", 0.0), 3),
                    "p99_ms": round(latency.get("p99_ms", 0.0), 3),
                    "stolen_ms": round(stolen),
                }
        for mode in ("plain", "stream"):
            direct = rows[f"direct {mode}"]
            for name in targets:
                row = rows[f"{name} {mode}"]
                row["rps_ratio_to_direct"] = round(row["rps"] / direct["rps"], 3)
                row["added_p50_ms"] = round(row["p50_ms"] - direct["p50_ms"], 3)
                row["added_p99_ms"] = round(row["p99_ms"] - direct["p99_ms"], 3)
        result = {"seconds": seconds, "connections": connections, "litellm": bool(command), "rows": rows}
        columns = f"{'req/s':>9}{'x direct':>10}{'p50 ms':>9}{'p99 ms':>9}{'+p50 ms':>9}{'+p99 ms':>9}{'errors':>8}{'stolen ms':>10}"
        print(f"{'target':<16}{columns}")
        for name, row in rows.items():
            print(
                f"{name:<16}{row['rps']:>9,}{row['rps_ratio_to_direct']:>10.3f}{row['p50_ms']:>9.3f}{row['p99_ms']:>9.3f}"
                f"{row['added_p50_ms']:>9.3f}{row['added_p99_ms']:>9.3f}{row['errors']:>8}{row['stolen_ms']:>10}"
            )
        if not command:
            print("litellm: not installed (python3 -m venv .bench-venv && .bench-venv/bin/pip install 'litellm[proxy]')")
        return result
    finally:
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--litellm", help="the litellm command (default: .bench-venv/bin/litellm or PATH)")
    parser.add_argument("--json", type=Path)
    options = parser.parse_args()
    outcome = main(options.seconds, options.connections, options.litellm)
    if options.json:
        options.json.parent.mkdir(parents=True, exist_ok=True)
        options.json.write_text(json.dumps(outcome, indent=2) + "\n")
