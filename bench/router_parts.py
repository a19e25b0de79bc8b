"""What each part of the router costs, in one run: the same tree's `jetway up` with a part on and off.

    .venv/bin/python -m bench.router_parts [--seconds 4] [--rounds 3] [--connections 50] [--baseline-ref REF] [--json FILE]

Layout (2 cores), as bench/router.py: every variant's `jetway up` pinned to core 0, all started before the first
measurement, one member each on the fast upstream (bench/fast_upstream.py); the upstream and wrk on core 1. Per
round, every variant in turn (the order rotates each round, so a drifting machine moves all alike): wrk with
`--connections` connections on plain chat completions, and the router process's CPU time per request from /proc,
which the rest of the machine disturbs less than req/s. Printed: per variant, the median over the rounds of its
CPU per request and req/s, and both over the first variant's (everything on, the default). `--baseline-ref` adds
the default of another commit's tree (exported with git archive, as bench/router.py does), measured in the same rounds.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from bench.router import BODY, ROOT, export_tree, lua, measure, start_jetway, start_upstream, stop_all

# name: the settings that differ from the default (the first is the default itself, the baseline of the ratios)
VARIANTS: dict[str, dict[str, str]] = {
    "default (records on)": {},
    "records off": {"JETWAY_ROUTER_RECORDS": "0"},
    "records 1 in 10": {"JETWAY_ROUTER_RECORDS": "0.1"},
}


def variant_trees(work: Path, baseline_ref: str | None) -> list[tuple[str, Path, dict[str, str]]]:
    """Each variant's name, the tree it runs from and its settings: this tree's VARIANTS, then `baseline_ref`'s default
    (exported under `work`) when asked."""
    trees = [(name, ROOT, env) for name, env in VARIANTS.items()]
    if baseline_ref:
        commit = export_tree(baseline_ref, work / "baseline")
        trees.append((f"default at {commit}", work / "baseline", {}))
    return trees


def main(seconds: int, rounds: int, connections: int, baseline_ref: str | None = None) -> dict[str, Any]:
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is needed: apt-get install wrk")
    work = Path(tempfile.mkdtemp(prefix="jetway-parts-bench-"))
    processes: list[subprocess.Popen[bytes]] = []
    try:
        upstream_port = start_upstream(processes)
        targets = {}
        for i, (name, tree, env) in enumerate(variant_trees(work, baseline_ref)):
            port, pid = start_jetway(tree, work / f"jetway-{i}", upstream_port, processes, env)
            targets[name] = (f"http://127.0.0.1:{port}/v1/chat/completions", pid)
        script = lua(work / "plain.lua", BODY, {})
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in targets}
        names = list(targets)
        for round_ in range(rounds):
            for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
                url, pid = targets[name]
                runs[name].append(measure(url, script, connections, seconds, pid))
        rows = {
            name: {
                "cpu_us_per_request": statistics.median(r["cpu_us_per_request"] for r in found),
                "rps": statistics.median(r["rps"] for r in found),
                "errors": sum(r["errors"] for r in found),
                "rounds": found,
            }
            for name, found in runs.items()
        }
        base = rows[names[0]]
        print(f"medians of {rounds} rounds")
        print(f"{'variant':<24}{'cpu us/req':>11}{'x default':>10}{'req/s':>9}{'x default':>10}{'errors':>8}")
        for name, row in rows.items():
            row["cpu_ratio"] = round(row["cpu_us_per_request"] / base["cpu_us_per_request"], 3)
            row["rps_ratio"] = round(row["rps"] / base["rps"], 3)
            print(
                f"{name:<24}{row['cpu_us_per_request']:>11.1f}{row['cpu_ratio']:>10.3f}{row['rps']:>9,.0f}{row['rps_ratio']:>10.3f}{row['errors']:>8}"
            )
        return {"seconds": seconds, "connections": connections, "variants": VARIANTS, "baseline_ref": baseline_ref, "rows": rows}
    finally:
        stop_all(processes)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--baseline-ref", help="also measure this commit's default (git archive of it)")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    found = main(args.seconds, args.rounds, args.connections, args.baseline_ref)
    if args.json:
        Path(args.json).write_text(json.dumps(found, indent=2) + "\n")
