"""A routing record as the router fills it in (services/router/records.py `Record`) is stored as the contract's
RoutingRecord (contracts/routing.py) and read back as one, field for field."""

from __future__ import annotations

import typing

import msgspec

from contracts.routing import BATCH, RoutingRecord, decode_batch
from services.router import policy
from services.router.records import Record, record_kind
from tests.contracts.cases import RECORD


def test_the_filled_in_record_has_the_contracts_fields_in_order() -> None:
    assert Record.__struct_fields__ == RoutingRecord.__struct_fields__
    # the same types, but that the router's sequences may be lists (written alike)
    ours, theirs = typing.get_type_hints(Record), typing.get_type_hints(RoutingRecord)
    assert {n for n in ours if ours[n] != theirs[n]} == {"candidates", "blocks"}


def test_a_record_made_by_a_routers_kind_carries_its_name_and_settings_and_is_read_as_the_record() -> None:
    kind = record_kind("router-0", policy.Settings(policy="least-outstanding", block_chars=32))
    record = kind(RECORD.at, RECORD.model)
    record.candidates, record.blocks = list(RECORD.candidates), list(RECORD.blocks)  # lists, as routing leaves them
    for name in ("status", "member", "reason", "score", "prefix", "session", "key", "tokens_in", "tokens_out", "ttft", "elapsed"):
        setattr(record, name, getattr(RECORD, name))  # each set alone, as routing sets it
    refused = kind(1_764_979_201.0, "qwen")
    refused.status = 503
    read, read_refused = decode_batch(BATCH.encode([record, refused]))
    assert RECORD.router == "router-0" and (RECORD.policy, RECORD.block_chars) != ("least-outstanding", 32)
    assert read == msgspec.structs.replace(RECORD, policy="least-outstanding", block_chars=32)
    assert read_refused == RoutingRecord(
        at=1_764_979_201.0, model="qwen", status=503, policy="least-outstanding", block_chars=32, router="router-0"
    )


def test_another_kind_leaves_the_records_already_made_as_they_were() -> None:
    first = record_kind("router-0", policy.Settings())(1.0, "qwen")
    second = record_kind("router-0", policy.Settings(policy="round-robin", block_chars=16))(2.0, "qwen")
    assert [(r.policy, r.block_chars) for r in decode_batch(BATCH.encode([first, second]))] == [("prefix-cache", 64), ("round-robin", 16)]


def test_a_prompt_its_lead_holds_whole_is_written_from_the_leads_own_bytes() -> None:
    # a long system prompt and a short question: the kept lead's hashes are the prompt's, written as made once
    body = {"messages": [{"role": "system", "content": "You answer questions. " * 10}, {"role": "user", "content": "Hi?"}]}
    blocks = policy.Prompt(body, None, True).hashed(policy.Settings())
    assert isinstance(blocks, policy.Lead) and list(blocks) == policy.block_hashes(policy.prompt_text(body), 64, 256)
    record = record_kind("router-0", policy.Settings())(1.0, "qwen")
    record.blocks = blocks.encoded
    (read,) = decode_batch(BATCH.encode([record]))
    assert read.blocks == tuple(blocks) and len(read.blocks) == 3
