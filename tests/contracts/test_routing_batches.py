"""Routing records' batches as stored (contracts/routing.py): MessagePack arrays now, JSON objects before, both read."""

from __future__ import annotations

import msgspec
import pytest

from contracts.routing import BATCH, RoutingRecord, decode_batch, mentions
from tests.contracts.cases import RECORD


def test_a_batch_is_read_back_as_written_and_smaller_than_json_objects() -> None:
    refused = RoutingRecord(at=1.0, model="qwen", status=503, router="router-1")
    payload = BATCH.encode([RECORD, refused])
    assert decode_batch(payload) == [RECORD, refused]
    as_objects = msgspec.json.encode([msgspec.structs.asdict(RECORD), msgspec.structs.asdict(refused)])
    assert len(payload) < len(as_objects) / 2


def test_a_batch_stored_as_json_objects_is_still_read_with_its_absent_fields_defaulted() -> None:
    payload = b'[{"at": 1.0, "model": "qwen", "status": 200, "member": "gpu-a", "blocks": [7, 8], "session": 9, "newer": 1}]'
    (record,) = decode_batch(payload)
    assert (record.member, record.blocks, record.session, record.router, record.ttft) == ("gpu-a", (7, 8), 9, "", None)


@pytest.mark.parametrize("payload", [b"not a batch", b"[1, 2]", b'[{"model": "qwen"}]', b"\x92\x01\x02"])
def test_what_is_no_batch_is_a_decode_error(payload: bytes) -> None:
    with pytest.raises(msgspec.DecodeError):
        decode_batch(payload)


def test_a_batch_mentions_the_models_of_its_records_in_either_form() -> None:
    for payload in (BATCH.encode([RECORD]), msgspec.json.encode([msgspec.structs.asdict(RECORD)])):
        assert mentions(payload, "qwen") and not mentions(payload, "llama")
