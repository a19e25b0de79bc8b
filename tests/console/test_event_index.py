"""Where an event lives, as plain data: the bounded id → sequence index the watcher feeds as it folds, the window a
lookup scans past the bound, and what the route answers for a subject. No stream, no HTTP."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from contracts.cluster import DISCOVERY
from contracts.events import Envelope, ResourceApplied
from contracts.subjects import Key
from services.console import events
from services.console.events import EventIndex, Found, Missing
from services.console.handlers import ConsoleService

MD = Key("ModelDeployment", "default", "qwen")
IPC = Key("InferenceProviderConfig", "", "acme")


def applied(key: Key, event_id: str, seq: int) -> Envelope:
    event = ResourceApplied(kind=key.kind, namespace=key.namespace, name=key.name, generation=1, spec={})
    return Envelope(id=event_id, subject=key.subject("spec"), producer="watcher", time=datetime.now(UTC), event=event, seq=seq)


def test_the_index_maps_each_folded_event_id_to_its_sequence() -> None:
    index = EventIndex()
    index.add(applied(MD, "a", 7))
    index.add(applied(IPC, "b", 9))
    assert (index.get("a"), index.get("b"), index.get("nope")) == (7, 9, None)
    index.add(applied(MD, "unstored", 0))  # not in the stream yet: nowhere to point to
    assert index.get("unstored") is None and len(index) == 2


def test_past_its_bound_the_index_lets_the_first_folded_go() -> None:
    index = EventIndex(bound=3)
    for seq in range(1, 6):
        index.put(f"e{seq}", seq)
    assert [index.get(f"e{seq}") for seq in range(1, 6)] == [None, None, 3, 4, 5]
    assert (len(index), index.dropped, index.oldest()) == (3, 2, 3)
    index.put("e3", 3)  # folded again: it keeps its place, the first to go
    index.put("e6", 6)
    assert (index.get("e3"), index.get("e4"), index.oldest()) == (None, 4, 4)
    index.forget("e4")  # the stream no longer has it
    assert index.get("e4") is None and index.oldest() == 5
    index.put("e4", 7)  # the id again: held once, and it goes in its new turn, not in its forgotten one
    index.put("e8", 8)
    index.put("e9", 9)
    assert (index.get("e4"), index.get("e5"), index.get("e6"), len(index)) == (7, None, None, 3)
    with pytest.raises(ValueError):
        EventIndex(bound=0)


def test_an_id_the_index_lacks_is_looked_for_just_before_what_names_it_and_before_what_the_index_holds() -> None:
    index = EventIndex()
    assert index.window(None, 0) is None, "an empty stream: nothing to scan"
    assert index.window(None, 50, bound=100) == (1, 50), "nothing held: the newest of the stream"
    assert index.window(None, 50_000, bound=100) == (49_901, 50_000)
    assert index.window(40, 50, bound=100) == (1, 39), "a cause is stored before the event naming it"
    assert index.window(1, 50) is None
    for seq in range(1_000, 1_010):
        index.put(f"e{seq}", seq)
    # from the oldest held on, the index would know it: only what came before
    assert index.window(None, 2_000, bound=100) == (900, 999)
    assert index.window(1_005, 2_000, bound=100) == (900, 999)
    assert index.window(500, 2_000, bound=100) == (400, 499)


def test_the_console_feeds_the_index_as_it_folds() -> None:
    """`ConsoleService.fold` is what the runner calls for every event, on the rebuild at start-up and after it."""
    console = ConsoleService()
    console.fold(applied(MD, "spec-1", 3))
    assert console.index.get("spec-1") == 3
    assert MD in console.state.resources.items


@pytest.mark.parametrize("text", ["", "../x", "a b", "a/b", "x" * 129, "-leading", "é"])
def test_an_id_that_no_event_has_is_refused_naming_the_field(text: str) -> None:
    with pytest.raises(ValueError, match=r"^id: "):
        events.event_id(text)


def test_a_uuid_is_an_event_id() -> None:
    assert events.event_id("526eb958-0c4f-4b0e-9a53-1f0b3c2d4e5f") == "526eb958-0c4f-4b0e-9a53-1f0b3c2d4e5f"


def test_the_answer_names_the_resource_and_its_place_in_the_stream() -> None:
    found = events.found_at("x", 12, MD.subject("selector"), "ProviderSelected.v1", "index")
    assert isinstance(found, Found)
    assert found.body() == {
        "id": "x",
        "kind": "ModelDeployment",
        "namespace": "default",
        "name": "qwen",
        "seq": 12,
        "facet": "selector",
        "type": "ProviderSelected.v1",
    }
    cluster_scoped = events.found_at("y", 3, IPC.subject("spec"), "ResourceApplied.v1", "scan")
    assert isinstance(cluster_scoped, Found) and cluster_scoped.body()["namespace"] is None
    assert cluster_scoped.body()["kind"] == "InferenceProviderConfig"


def test_an_event_of_no_resource_has_no_timeline() -> None:
    for subject in (DISCOVERY.subject("watcher"), "jetway.dlq.watcher"):
        missing = events.found_at("z", 4, subject, "ApisDiscovered.v1", "index")
        assert isinstance(missing, Missing) and missing.status == 404 and "not about a resource" in missing.message
