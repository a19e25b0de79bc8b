"""What a member reports of its load on its Prometheus `/metrics`, read at each probe tick. Pure.

    vLLM     vllm:num_requests_running, vllm:num_requests_waiting,
             vllm:kv_cache_usage_perc (vllm:gpu_cache_usage_perc before v0.10)
    SGLang   sglang:num_running_reqs, sglang:num_queue_reqs, sglang:token_usage

An engine's /metrics is large (histograms per model and engine, 50-200 KiB); only the lines of these
gauges are handed to the parser (prometheus_client's), so a probe costs a scan, not a full parse.
Several label sets (models, data-parallel engines) add up; the KV-cache use is the largest of them.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

RUNNING = ("vllm:num_requests_running", "sglang:num_running_reqs")
WAITING = ("vllm:num_requests_waiting", "sglang:num_queue_reqs")
KV = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage")
_NAMES = RUNNING + WAITING + KV
_PREFIXES = tuple(n.encode() for n in _NAMES) + tuple(b"# TYPE " + n.encode() for n in _NAMES)

SATURATED_KV = 0.95  # a KV cache this full preempts requests
SATURATED_WAITING = 16  # requests waiting for a slot
RELIEVED_KV = 0.85  # hysteresis: saturated until below both of these, so the condition does not flap
RELIEVED_WAITING = 4


@dataclass(frozen=True)
class Load:
    running: int = 0
    waiting: int = 0
    kv: float | None = None  # 0..1; None when the engine reports no KV-cache gauge


def parse(text: bytes) -> Load | None:
    """The load in a /metrics answer; None when it has none of the gauges (not an engine, or not this kind)."""
    kept = [line for line in text.split(b"\n") if line.startswith(_PREFIXES)]
    if not kept:
        return None
    running = waiting = 0.0
    kv: float | None = None
    found = False
    try:
        for family in text_string_to_metric_families(b"\n".join(kept).decode("utf-8", "replace") + "\n"):
            for sample in family.samples:
                if sample.name in RUNNING:
                    running += sample.value
                elif sample.name in WAITING:
                    waiting += sample.value
                elif sample.name in KV:
                    kv = max(kv or 0.0, min(max(sample.value, 0.0), 1.0))
                else:
                    continue
                found = True
    except ValueError:  # not Prometheus text after all
        return None
    return Load(int(running), int(waiting), kv) if found else None


def saturated(load: Load | None, was: bool) -> bool:
    """Whether a member is saturated: a nearly full KV cache or a long queue; once it is, until both are well down."""
    if load is None:
        return False
    kv = load.kv or 0.0
    if was:
        return kv >= RELIEVED_KV or load.waiting >= RELIEVED_WAITING
    return kv >= SATURATED_KV or load.waiting >= SATURATED_WAITING
