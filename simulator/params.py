"""The simulated engine's parameters (docs/simulator.md): standard library only, so `jetway sim`'s flags are
read without loading the server."""

from __future__ import annotations

from dataclasses import dataclass

CHARS_PER_TOKEN = 4


@dataclass(frozen=True)
class SimParams:
    """The model's knobs; times in seconds at slow_factor 1 (see the module docstring)."""

    ttft_base: float = 0.01  # fixed cost of a prefill
    prefill_per_token: float = 0.0002  # per uncached prompt token
    decode_per_token: float = 0.002  # per output token after the first, with one request running
    decode_growth: float = 0.02  # a decode step is this fraction slower per other running request
    max_running: int = 8
    max_waiting: int | None = None  # None: an unbounded queue; else 503 past this many waiting
    block_chars: int = 64
    cache_blocks: int = 2048
    prefix_caching: bool = True
    max_model_len: int = 8192  # prompt + output tokens
    default_max_tokens: int = 16
    slow_factor: float = 1.0

    def __post_init__(self) -> None:
        if min(self.ttft_base, self.prefill_per_token, self.decode_per_token, self.decode_growth) < 0:
            raise ValueError("times and decode_growth must not be negative")
        if self.slow_factor <= 0:
            raise ValueError("slow_factor must be positive")
        if self.max_running < 1 or self.cache_blocks < 1 or self.max_model_len < 1 or self.default_max_tokens < 1:
            raise ValueError("max_running, cache_blocks, max_model_len and default_max_tokens must be at least 1")
        if self.max_waiting is not None and self.max_waiting < 0:
            raise ValueError("max_waiting must not be negative")
        if self.block_chars < CHARS_PER_TOKEN or self.block_chars % CHARS_PER_TOKEN:
            raise ValueError(f"block_chars must be a positive multiple of {CHARS_PER_TOKEN}")

    @property
    def block_tokens(self) -> int:
        return self.block_chars // CHARS_PER_TOKEN
