"""Instructions per request of the router's variants, counted by valgrind's callgrind: a figure that does not move
with the machine, where CPU time per request on this VM moves by 15% between rounds (docs/router.md).

    .venv/bin/python -m bench.router_instructions [--seconds 20] [--connections 10] [--baseline-ref REF] [--json FILE]
                                                  [--keep DIR] [--members N] [--prompt-chars N]

Each variant (bench/router_parts.py's VARIANTS; with `--baseline-ref`, also that commit's default, exported with
git archive) is a `jetway up` under `valgrind --tool=callgrind --instr-atstart=no`, one member on the fast upstream
(bench/fast_upstream.py), a trivial prompt (`--members 2 --prompt-chars 2000`: two members the policy chooses between,
and a shared 2,000-character system prompt, so that prefix-cache routing hashes the prompt as records do). Nothing is
counted while it starts and warms up. Then counting is switched on
(`callgrind_control -i on`) for `--seconds` with no load: what runs by the clock (probes, flush timers, the replicas'
counts), written out by `callgrind_control -d`; then wrk sends plain chat completions for `--seconds` with
`--connections` connections, counting is switched off, and the process is stopped, which writes that count.

Printed per variant: the instructions counted under load over the requests answered (`raw`), and the same less the
clock's work for as long (`net`, the idle window's rate times the loaded window's length), and `net` over the first
variant's (the default). The clock's work matters here as it does not at full speed: valgrind slows the requests about
fifty-fold and not the clock, so a timer that costs a router nothing at 12,000 requests a second counts fifty times
over per request. Instructions are not time: a cache miss counts as one. They say what the code does, not what the
machine makes of it. Each variant takes a minute or two. `--keep DIR` keeps each variant's callgrind files there
(`callgrind-N.out`, loaded; `.1`, idle), for `callgrind_annotate --inclusive=yes` to say which C functions (the
interpreter's, msgspec's, zlib's, the collector's) the difference between two variants went to.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.router import BODY, lua, start_jetway, start_upstream, stop_all, wrk
from bench.router_parts import variant_trees


def counted(out_file: Path) -> int:
    """The instructions (Ir) a callgrind output file totals (its `totals:` line; `summary:` says 0 when counting was
    switched on and off by callgrind_control)."""
    for line in out_file.read_text(errors="replace").splitlines():
        found = re.match(r"totals:\s+(\d+)", line)
        if found:
            return int(found.group(1))
    raise RuntimeError(f"{out_file} holds no totals")


def measure(
    tree: Path,
    data: Path,
    upstream_port: int,
    env: dict[str, str],
    out_file: Path,
    script: Path,
    seconds: int,
    connections: int,
    members: int = 1,
) -> dict[str, Any]:
    processes: list[subprocess.Popen[bytes]] = []
    valgrind = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out_file}"]
    try:
        port, pid = start_jetway(tree, data, upstream_port, processes, env, wrap=valgrind, timeout=600, members=members)
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        wrk(url, script, 1, 5)  # warm up, not counted
        began = time.monotonic()
        subprocess.run(["callgrind_control", "-i", "on", str(pid)], check=True, capture_output=True)
        time.sleep(seconds)  # the idle window: nothing but the clock's work
        subprocess.run(["callgrind_control", "-d", str(pid)], check=True, capture_output=True)  # written to out_file.1, zeroed
        idle_seconds = time.monotonic() - began
        began = time.monotonic()
        load = wrk(url, script, connections, seconds)
        subprocess.run(["callgrind_control", "-i", "off", str(pid)], check=True, capture_output=True)
        loaded_seconds = time.monotonic() - began
    finally:
        stop_all(processes, timeout=300)  # the count is written as the process exits
    instructions = counted(out_file)
    clock = counted(out_file.with_name(out_file.name + ".1")) / idle_seconds
    requests = int(load["requests"])
    net = instructions - clock * loaded_seconds
    return {
        "requests": requests,
        "errors": int(load["errors"]),
        "instructions": instructions,
        "clock_per_second": round(clock),
        "per_request": round(instructions / requests) if requests else 0,
        "net_per_request": round(net / requests) if requests else 0,
    }


def body_of(prompt_chars: int) -> dict[str, Any]:
    """The requests' body: bench/router.py's trivial one, or with a system prompt of `prompt_chars` characters (the same
    in every request, as a deployment's shared system prompt is)."""
    if not prompt_chars:
        return BODY
    system = ("You answer questions about the company's products, politely and briefly, citing the manual. " * 100)[:prompt_chars]
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "Say hello."}]
    return {**BODY, "messages": messages}


def main(
    seconds: int, connections: int, baseline_ref: str | None = None, keep: Path | None = None, members: int = 1, prompt_chars: int = 0
) -> dict[str, Any]:
    for tool in ("wrk", "valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is needed: apt-get install wrk valgrind")
    work = Path(tempfile.mkdtemp(prefix="jetway-instructions-bench-"))
    upstream: list[subprocess.Popen[bytes]] = []
    try:
        upstream_port = start_upstream(upstream)
        script = lua(work / "plain.lua", body_of(prompt_chars), {})
        rows: dict[str, dict[str, Any]] = {}
        for i, (name, tree, env) in enumerate(variant_trees(work, baseline_ref)):
            out_file = work / f"callgrind-{i}.out"
            rows[name] = measure(tree, work / f"jetway-{i}", upstream_port, env, out_file, script, seconds, connections, members)
            row = rows[name]
            print(f"{name}: {row['net_per_request']:,} instructions a request net ({row['per_request']:,} raw)", flush=True)
            if keep is not None:
                keep.mkdir(parents=True, exist_ok=True)
                for kept in (f"callgrind-{i}.out", f"callgrind-{i}.out.1"):
                    shutil.copy(work / kept, keep / kept)
        base = next(iter(rows.values()))["net_per_request"]
        print(f"\n{'variant':<24}{'net/req':>10}{'x default':>10}{'raw/req':>10}{'clock/s':>12}{'requests':>10}{'errors':>8}")
        for name, row in rows.items():
            row["ratio"] = round(row["net_per_request"] / base, 3) if base else 0.0
            print(
                f"{name:<24}{row['net_per_request']:>10,}{row['ratio']:>10.3f}{row['per_request']:>10,}"
                f"{row['clock_per_second']:>12,}{row['requests']:>10,}{row['errors']:>8}"
            )
        return {
            "seconds": seconds,
            "connections": connections,
            "members": members,
            "prompt_chars": prompt_chars,
            "baseline_ref": baseline_ref,
            "rows": rows,
        }
    finally:
        stop_all(upstream)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--connections", type=int, default=10)
    parser.add_argument("--baseline-ref", help="also count this commit's default (git archive of it)")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--keep", type=Path, help="keep each variant's callgrind file in this folder (callgrind-N.out, in order)")
    parser.add_argument("--members", type=int, default=1, help="members of the model, all on the fast upstream (2+: the policy chooses)")
    parser.add_argument("--prompt-chars", type=int, default=0, help="a system prompt of this many characters in every request")
    args = parser.parse_args()
    found = main(args.seconds, args.connections, args.baseline_ref, args.keep, args.members, args.prompt_chars)
    if args.json:
        Path(args.json).write_text(json.dumps(found, indent=2) + "\n")
