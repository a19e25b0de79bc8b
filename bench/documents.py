"""Reading a JSON body within bounds (contracts/documents.py) against decoding it alone, in one run.

    .venv/bin/python -m bench.documents [--seconds 1] [--json FILE]

Every body the router, the apply API and the webhook read is decoded by msgspec and then checked: at most 100
levels, integers within int64 (`check_depth`). For three bodies (a one-message chat request, a chat request of 40
messages, and a manifest-shaped document of nested objects and lists), this times, with `timeit` over about `--seconds` each:
- decode: msgspec's decoding alone, the baseline;
- check: `check_depth` as every reader runs it (a first walk without paths; the second only when there is
  something to refuse, which there is not here);
- path walk: the walk that keeps each value's path (`_problem`), which was the whole check before 2026-12-07.
Printed: microseconds per body for each, the check over the decode, and the path walk over the check.
"""

from __future__ import annotations

import argparse
import json
import timeit
from pathlib import Path
from typing import Any

import msgspec

from contracts.documents import MAX_DEPTH, _problem, check_depth


def bodies() -> dict[str, bytes]:
    said = "Some words here that a user or an assistant says, as in any conversation. " * 2
    manifest = {
        "apiVersion": "airunway.ai/v1alpha1",
        "kind": "ModelDeployment",
        "metadata": {"name": "qwen", "namespace": "default", "labels": {f"l{i}": "v" for i in range(8)}},
        "spec": {
            "model": {"id": "Qwen/Qwen3-0.6B", "source": "huggingface"},
            "serving": {"mode": "aggregated"},
            "resources": {"gpu": {"count": 1}, "memory": "16Gi"},
            "env": [{"name": f"E{i}", "value": str(i)} for i in range(20)],
            "scaling": {"replicas": 2, "min": 1, "max": 4},
        },
    }
    return {
        "chat, one message": msgspec.json.encode({"model": "m", "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 16}),
        "chat, 40 messages": msgspec.json.encode(
            {
                "model": "m",
                "messages": [{"role": "user" if i % 2 else "assistant", "content": said} for i in range(40)],
                "max_tokens": 256,
                "temperature": 0.7,
                "stream": True,
            }
        ),
        "a manifest": msgspec.json.encode(manifest),
    }


def per_call(call: Any, seconds: float) -> float:
    """Microseconds a call takes: the best of five runs of about `seconds` / 5 each."""
    timer = timeit.Timer(call)
    number, _ = timer.autorange()
    number = max(1, int(number * seconds / 5 / 0.2))
    return min(timer.repeat(5, number)) / number * 1e6


def main(seconds: float) -> dict[str, Any]:
    decoder = msgspec.json.Decoder()
    rows: dict[str, Any] = {}
    print(f"{'body':<20}{'bytes':>7}{'decode us':>11}{'check us':>10}{'x decode':>10}{'path walk us':>14}{'x check':>9}")
    for name, raw in bodies().items():
        value = decoder.decode(raw)
        check_depth(value)  # nothing to refuse: the timings below are the path every body takes
        decode = per_call(lambda raw=raw: decoder.decode(raw), seconds)
        check = per_call(lambda value=value: check_depth(value), seconds)
        walk = per_call(lambda value=value: _problem(value, MAX_DEPTH), seconds)
        rows[name] = {"bytes": len(raw), "decode_us": decode, "check_us": check, "path_walk_us": walk}
        print(f"{name:<20}{len(raw):>7}{decode:>11.2f}{check:>10.2f}{check / decode:>10.2f}{walk:>14.2f}{walk / check:>9.2f}")
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=1.0, help="about this long per figure")
    parser.add_argument("--json", type=Path)
    options = parser.parse_args()
    outcome = main(options.seconds)
    if options.json:
        options.json.write_text(json.dumps(outcome, indent=2) + "\n")
