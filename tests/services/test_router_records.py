"""A routing record as the router fills it in (services/router/records.py `Record`: the contract's fields in a list)
is stored as the contract's RoutingRecord (contracts/routing.py) and read back as one, field for field."""

from __future__ import annotations

import msgspec

from contracts.routing import BATCH, RoutingRecord, decode_batch
from services.router import policy, records
from services.router.records import Record, record_defaults
from tests.contracts.cases import RECORD


def test_each_fields_index_is_its_place_in_the_contracts_record() -> None:
    assert RoutingRecord.__struct_fields__ == records.FIELDS
    assert (records.AT, records.MODEL) == (0, 1), "a record is [at, model, *defaults]"
    for name in ("status", "member", "candidates", "reason", "score", "prefix", "blocks", "session", "key"):
        assert getattr(records, name.upper()) == records.FIELDS.index(name)
    for name in ("tokens_in", "tokens_out", "ttft", "elapsed", "placer"):
        assert getattr(records, name.upper()) == records.FIELDS.index(name)


def test_a_record_made_with_a_routers_defaults_carries_its_name_and_settings_and_is_read_as_the_record() -> None:
    defaults = record_defaults("router-0", policy.Settings(policy="least-outstanding", block_chars=32))
    record: Record = [RECORD.at, RECORD.model, *defaults]
    record[records.CANDIDATES], record[records.BLOCKS] = list(RECORD.candidates), list(RECORD.blocks)  # lists, as routing leaves them
    for name in ("status", "member", "reason", "score", "prefix", "session", "key", "tokens_in", "tokens_out", "ttft", "elapsed"):
        record[records.FIELDS.index(name)] = getattr(RECORD, name)  # each set alone, as routing sets it
    refused: Record = [1_764_979_201.0, "qwen", *defaults]
    refused[records.STATUS] = 503
    read, read_refused = decode_batch(BATCH.encode([record, refused]))
    assert RECORD.router == "router-0" and (RECORD.policy, RECORD.block_chars) != ("least-outstanding", 32)
    assert read == msgspec.structs.replace(RECORD, policy="least-outstanding", block_chars=32)
    assert read_refused == RoutingRecord(
        at=1_764_979_201.0, model="qwen", status=503, policy="least-outstanding", block_chars=32, router="router-0"
    )


def test_another_routers_settings_leave_the_records_already_made_as_they_were() -> None:
    first: Record = [1.0, "qwen", *record_defaults("router-0", policy.Settings())]
    second: Record = [2.0, "qwen", *record_defaults("router-0", policy.Settings(policy="round-robin", block_chars=16))]
    assert [(r.policy, r.block_chars) for r in decode_batch(BATCH.encode([first, second]))] == [("prefix-cache", 64), ("round-robin", 16)]


def test_a_records_blocks_read_back_as_the_prompts_hashes_hashed_for_it_or_for_a_choice() -> None:
    # a long system prompt and a short question (its lead holds every block), and a longer question: whether the
    # record hashes the prompt itself (written straight as MessagePack) or takes what a choice among members hashed
    settings = policy.Settings()
    system = {"role": "system", "content": "You answer questions. " * 10}
    for question in ("Hi?", "What is the capital of France, and what is it known for? " * 3):
        body = {"messages": [system, {"role": "user", "content": question}]}
        expected = policy.block_hashes(policy.prompt_text(body), 64, 256)
        chosen = policy.Prompt(body, None, True)
        chosen.hashed(settings)
        for prompt in (policy.Prompt(body, None, True), chosen):
            record: Record = [1.0, "qwen", *record_defaults("router-0", settings)]
            record[records.BLOCKS] = prompt.recorded(settings)
            (read,) = decode_batch(BATCH.encode([record]))
            assert list(read.blocks) == expected and len(expected) >= 3
