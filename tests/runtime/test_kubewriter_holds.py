"""When the writer's cache shows an object as it would be written (`holds`, pure): then it is not written."""

from __future__ import annotations

from runtime.kubewriter import holds

WANTED = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "qwen", "labels": {"app": "qwen"}},
    "spec": {"replicas": 1, "template": {"metadata": {"annotations": {}}, "spec": {"containers": [{"name": "vllm", "image": "v1"}]}}},
}


def live(**spec: object) -> dict[str, object]:
    """WANTED as a server shows it: defaults and other writers' fields added, the empty map dropped."""
    containers = [{"name": "vllm", "image": "v1", "imagePullPolicy": "IfNotPresent"}]
    template = {"metadata": {"labels": {"pod-template-hash": "x"}}, "spec": {"containers": containers, "restartPolicy": "Always"}}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "qwen", "labels": {"app": "qwen", "other": "label"}, "resourceVersion": "7"},
        "spec": {"replicas": 1, "progressDeadlineSeconds": 600, "template": template, **spec},
    }


def test_what_others_added_and_an_empty_map_the_server_dropped_do_not_count() -> None:
    assert holds(live(), WANTED)


def test_a_field_changed_or_gone_does() -> None:
    assert not holds(live(replicas=3), WANTED)
    unlabelled = live()
    unlabelled["metadata"] = {"name": "qwen"}
    assert not holds(unlabelled, WANTED)


def test_a_list_must_match_item_by_item() -> None:
    sidecar = live()
    sidecar["spec"]["template"]["spec"]["containers"].append({"name": "sidecar", "image": "s"})  # type: ignore[index]
    assert not holds(sidecar, WANTED)
    moved = live()
    moved["spec"]["template"]["spec"]["containers"][0]["image"] = "v2"  # type: ignore[index]
    assert not holds(moved, WANTED)
