"""The timeline's diff between two points, as plain data: `timeline.diff` over two states, `timeline.compare`
over a resource's events. No stream, no HTTP."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from contracts.events import Envelope, ResourceApplied
from contracts.subjects import Key
from services.console import timeline

BEFORE: dict[str, Any] = {
    "kind": "ModelDeployment",
    "metadata": {"name": "qwen", "generation": 1, "annotations": {"airunway.ai/health": "a"}},
    "spec": {"replicas": 1, "engine": {"type": "vllm", "args": ["--a", "--b"]}, "gone": {"deep": True}},
    "status": {
        "conditions": [
            {"type": "Validated", "status": "True"},
            {"type": "Ready", "status": "False", "reason": "Waiting"},
        ]
    },
}

AFTER: dict[str, Any] = {
    "kind": "ModelDeployment",
    "metadata": {"name": "qwen", "generation": 2, "annotations": {"airunway.ai/health": "b"}},
    "spec": {"replicas": 2, "engine": {"type": "vllm", "args": ["--a", "--c", "--d"]}, "storage": [{"size": "1Gi"}]},
    "status": {
        "conditions": [  # reordered: matched by type, not by index
            {"type": "Ready", "status": "True"},
            {"type": "Validated", "status": "True"},
            {"type": "Scheduled", "status": "True"},
        ]
    },
}


def test_the_diff_lists_added_removed_and_changed_fields_with_their_paths_in_a_stable_order() -> None:
    assert timeline.diff(BEFORE, AFTER) == [
        {"path": "metadata.generation", "change": "changed", "old": 1, "new": 2},
        {"path": 'metadata.annotations["airunway.ai/health"]', "change": "changed", "old": "a", "new": "b"},
        {"path": "spec.replicas", "change": "changed", "old": 1, "new": 2},
        {"path": "spec.engine.args[1]", "change": "changed", "old": "--b", "new": "--c"},
        {"path": "spec.engine.args[2]", "change": "added", "new": "--d"},
        {"path": "spec.gone", "change": "removed", "old": {"deep": True}},
        {"path": "spec.storage", "change": "added", "new": [{"size": "1Gi"}]},
        {"path": "status.conditions[type=Ready].status", "change": "changed", "old": "False", "new": "True"},
        {"path": "status.conditions[type=Ready].reason", "change": "removed", "old": "Waiting"},
        {"path": "status.conditions[type=Scheduled]", "change": "added", "new": {"type": "Scheduled", "status": "True"}},
    ]
    assert timeline.diff(BEFORE, AFTER) == timeline.diff(BEFORE, AFTER)  # stable: the same answer every time


def test_the_diff_backwards_swaps_added_and_removed() -> None:
    forward = timeline.diff(BEFORE, AFTER)
    backward = timeline.diff(AFTER, BEFORE)
    assert {c["path"] for c in forward} == {c["path"] for c in backward}
    swap = {"added": "removed", "removed": "added", "changed": "changed"}
    assert sorted(c["change"] for c in backward) == sorted(swap[c["change"]] for c in forward)


def test_no_change_is_an_empty_diff_and_a_resource_that_did_not_exist_is_all_added_or_removed() -> None:
    assert timeline.diff(BEFORE, BEFORE) == []
    assert timeline.diff(None, None) == []
    assert timeline.diff(None, {"kind": "K", "spec": {"x": 1}}) == [
        {"path": "kind", "change": "added", "new": "K"},
        {"path": "spec", "change": "added", "new": {"x": 1}},
    ]
    assert timeline.diff({"spec": {}}, None) == [{"path": "spec", "change": "removed", "old": {}}]


def test_a_value_of_another_kind_is_one_change_and_true_is_not_one() -> None:
    assert timeline.diff({"a": {"b": 1}}, {"a": [1]}) == [{"path": "a", "change": "changed", "old": {"b": 1}, "new": [1]}]
    assert timeline.diff({"a": 1}, {"a": True}) == [{"path": "a", "change": "changed", "old": 1, "new": True}]
    assert timeline.diff({"a": 1}, {"a": 1.0}) == []
    assert timeline.diff({"a": None}, {"a": 0}) == [{"path": "a", "change": "changed", "old": None, "new": 0}]


def test_lists_of_objects_without_a_distinct_name_are_compared_by_index() -> None:
    old = {"l": [{"name": "x", "v": 1}, {"name": "x", "v": 2}]}
    new = {"l": [{"name": "x", "v": 1}]}
    assert timeline.diff(old, new) == [{"path": "l[1]", "change": "removed", "old": {"name": "x", "v": 2}}]
    named = timeline.diff({"l": [{"name": "a", "v": 1}]}, {"l": [{"name": "b", "v": 1}, {"name": "a", "v": 2}]})
    assert named == [
        {"path": "l[name=a].v", "change": "changed", "old": 1, "new": 2},
        {"path": "l[name=b]", "change": "added", "new": {"name": "b", "v": 1}},
    ]


def test_compare_folds_the_events_up_to_each_point() -> None:
    key = Key("ModelDeployment", "default", "qwen")

    def applied(seq: int, replicas: int) -> Envelope:
        event = ResourceApplied(kind=key.kind, namespace=key.namespace, name=key.name, generation=seq, spec={"replicas": replicas})
        return Envelope(id=str(seq), subject=key.subject("spec"), producer="watcher", time=datetime.now(UTC), event=event, seq=seq)

    events = [applied(1, 1), applied(2, 2)]
    answer = timeline.compare(events, key, 1, 2)
    assert answer["since"] == 1 and answer["existed_since"] is True
    assert answer["state"]["spec"] == {"replicas": 2}
    assert {"path": "spec.replicas", "change": "changed", "old": 1, "new": 2} in answer["changes"]
    assert [c["path"] for c in answer["changes"]] == ["metadata.generation", "metadata.resourceVersion", "spec.replicas"]
    # backwards: the state as of the later point is the earlier one's, the change reversed
    back = timeline.compare(events, key, 2, 1)
    assert back["state"]["spec"] == {"replicas": 1}
    assert {"path": "spec.replicas", "change": "changed", "old": 2, "new": 1} in back["changes"]
    # before the resource existed: everything is added
    assert {c["change"] for c in timeline.compare(events, key, 0, 1)["changes"]} == {"added"}
    assert timeline.compare([], key, 1, 2) == {"state": None, "since": 1, "existed_since": False, "changes": []}
