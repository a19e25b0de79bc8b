"""The apply API through real HTTP, on the real watcher service and a real NATS."""

from __future__ import annotations

from typing import Any

import aiohttp

from contracts.admission import admit
from contracts.subjects import facet_filter
from runtime.bus import connect
from runtime.eventstore import EventStore
from tests.contracts.cases import AD, APC, IPC, MD, changed
from tests.support.stack import Stack

ECHO: dict[str, Any] = {
    "apiVersion": "airdress.co/v1alpha1",
    "kind": "InferencePoolMember",
    "metadata": {"name": "echo", "labels": {"tier": "demo"}},
    "spec": {"backend": "echo", "models": [{"name": "echo"}]},
}


async def stored_events(stack: Stack) -> int:
    nc = await connect(stack.nats_url, name="count")
    try:
        return len(await EventStore(nc, producer="t").read(facet_filter("spec")))
    finally:
        await nc.close()


async def test_apply_answers_created_unchanged_configured_with_generations_and_versions(stack: Stack) -> None:
    status, created = await stack.apply(ECHO)
    assert status == 201
    assert created == {
        "kind": "InferencePoolMember",
        "name": "echo",
        "action": "created",
        "generation": 1,
        "previous_generation": None,
        "resource_version": created["resource_version"],
    }
    status, same = await stack.apply(ECHO)
    assert (status, same["action"], same["generation"], same["resource_version"]) == (200, "unchanged", 1, created["resource_version"])
    events = await stored_events(stack)

    status, spec_change = await stack.apply(changed(ECHO, {"spec.draining": True}))
    assert (spec_change["action"], spec_change["generation"], spec_change["previous_generation"]) == ("configured", 2, 1)
    assert spec_change["resource_version"] > created["resource_version"]
    _, label_change = await stack.apply(changed(ECHO, {"spec.draining": True, "metadata.labels": {"tier": "prod"}}))
    assert (label_change["action"], label_change["generation"]) == ("configured", 3)
    _, note = await stack.apply(
        changed(ECHO, {"spec.draining": True, "metadata.labels": {"tier": "prod"}, "metadata.annotations": {"owner": "ops"}})
    )
    assert (note["action"], note["generation"]) == ("configured", 3), "annotations alone do not bump the generation"
    assert await stored_events(stack) == events + 3

    _, view = await stack.get("/v1/kinds/InferencePoolMember/echo")
    assert view["metadata"]["resourceVersion"] == str(note["resource_version"])
    assert view["metadata"]["generation"] == 3 and view["metadata"]["labels"] == {"tier": "prod"}


async def test_defaults_make_equivalent_manifests_unchanged(stack: Stack) -> None:
    await stack.apply(ECHO)
    spelled_out = changed(
        ECHO,
        {
            "spec.draining": False,
            "spec.url": "",
            "spec.authSecretRef": "",
            "spec.transport": "http-direct",
            "spec.traits": {"supportsMultiConversation": True},
        },
    )
    assert (await stack.apply(spelled_out))[1]["action"] == "unchanged"


async def test_dry_run_says_what_would_happen_and_stores_nothing(stack: Stack) -> None:
    status, would = await stack.apply(ECHO, dry_run=True)
    assert (status, would["action"]) == (200, "would_create")
    assert (await stack.get("/v1/kinds/InferencePoolMember/echo"))[0] == 404
    await stack.apply(ECHO)
    before = await stored_events(stack)
    assert (await stack.apply(changed(ECHO, {"spec.draining": True}), dry_run=True))[1]["action"] == "would_update"
    assert (await stack.apply(ECHO, dry_run=True))[1]["action"] == "unchanged"
    assert await stored_events(stack) == before


async def test_stale_resource_version_is_a_409_and_changes_nothing(stack: Stack) -> None:
    _, first = await stack.apply(ECHO)
    _, second = await stack.apply(changed(ECHO, {"spec.draining": True}))
    before = await stored_events(stack)
    stale = changed(ECHO, {"metadata.resourceVersion": str(first["resource_version"]), "spec.models": [{"name": "other"}]})
    status, body = await stack.apply(stale)
    assert status == 409
    assert body["path"] == "metadata.resourceVersion" and "stale" in body["error"]
    assert await stored_events(stack) == before
    _, view = await stack.get("/v1/kinds/InferencePoolMember/echo")
    assert view["spec"]["models"] == [{"name": "echo"}] and view["spec"]["draining"] is True

    current = changed(stale, {"metadata.resourceVersion": str(second["resource_version"])})
    status, applied = await stack.apply(current)
    assert (status, applied["action"], applied["generation"]) == (200, "configured", 3)
    assert (
        await stack.apply(
            changed(
                ECHO,
                {"metadata.resourceVersion": "999"},
            )
        )
    )[0] == 409
    assert (await stack.apply(changed(ECHO, {"metadata.name": "fresh", "metadata.resourceVersion": "1"})))[0] == 409


async def test_without_resource_version_the_last_writer_wins(stack: Stack) -> None:
    await stack.apply(ECHO)
    await stack.apply(changed(ECHO, {"spec.models": [{"name": "a"}]}))
    status, last = await stack.apply(changed(ECHO, {"spec.models": [{"name": "b"}]}))
    assert (status, last["generation"]) == (200, 3)
    assert (await stack.get("/v1/kinds/InferencePoolMember/echo"))[1]["spec"]["models"] == [{"name": "b"}]


async def test_rejections_carry_every_problem_with_paths_in_the_validate_words(stack: Stack) -> None:
    bad = changed(ECHO, {"spec.backend": "triton", "spec.weight": 2, "spec.models": [{"name": "m", "contextWindow": -1}]})
    status, body = await stack.apply(bad)
    assert status == 400
    assert body["path"] == "spec.backend"
    assert body["error"] == 'must be one of vllm-openai, echo (got "triton")'
    expected = admit(bad).problems
    assert body["errors"] == [{"path": p.path, "message": p.message} for p in expected]
    assert {e["path"] for e in body["errors"]} == {"spec.backend", "spec.weight", "spec.models[0].contextWindow"}

    status, body = await stack.apply(changed(ECHO, {"apiVersion": "v1alpha1"}))
    assert (status, body["path"]) == (400, "apiVersion")
    assert body["error"] == "unsupported apiVersion 'v1alpha1'; this operator speaks 'airdress.co/v1alpha1'"
    assert (await stack.get("/v1/kinds/InferencePoolMember"))[1]["items"] == []


async def test_yaml_bodies_and_bad_bodies(stack: Stack) -> None:
    yaml_body = b"apiVersion: airdress.co/v1alpha1\nkind: InferencePoolMember\nmetadata: {name: y}\nspec: {backend: echo, models: []}\n"
    assert (await stack.apply(None, raw=yaml_body, content_type="application/yaml"))[0] == 201
    status, body = await stack.apply(None, raw=yaml_body + b"---\n" + yaml_body, content_type="application/yaml")
    assert status == 400 and "one manifest per request" in body["error"]
    status, body = await stack.apply(None, raw=b"{not json", content_type="application/json")
    assert status == 400 and body["error"].startswith("cannot parse the manifest")
    assert (await stack.apply(None, raw=b"[1, 2]", content_type="application/json"))[0] == 400
    status, body = await stack.apply(None, raw=b"hello", content_type="text/plain")
    assert status == 415 and body["code"] == "unsupported_media_type"
    status, body = await stack.apply(None, raw=b"x" * (5 * 1024 * 1024), content_type="application/json")
    assert status == 413


async def test_every_route_wants_the_token(stack: Stack) -> None:
    routes = [
        ("POST", "/v1/apply"),
        ("GET", "/v1/kinds"),
        ("GET", "/v1/kinds/ipm"),
        ("GET", "/v1/kinds/ipm/echo"),
        ("GET", "/v1/kinds/ipm/echo/status"),
        ("DELETE", "/v1/kinds/ipm/echo"),
    ]
    for method, path in routes:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": stack.token}):
            async with stack.http.request(method, stack.api_url + path, headers=headers, json=ECHO) as response:
                assert response.status == 401, (method, path, headers)
                assert (await response.json())["code"] == "unauthorized"
    async with stack.http.get(stack.api_url + "/healthz") as response:
        assert response.status == 200
    async with stack.http.get(stack.api_url + "/metrics") as response:  # open too: a Prometheus scraper has no token
        assert response.status == 200 and "jetway_events_handled" in await response.text()


async def test_reads_kinds_lists_one_status_and_404s(stack: Stack) -> None:
    await stack.apply(ECHO)
    _, kinds = await stack.get("/v1/kinds")
    member_kind = next(k for k in kinds["kinds"] if k["kind"] == "InferencePoolMember")
    assert member_kind["api_version"] == "airdress.co/v1alpha1" and member_kind["summary_condition_types"] == ["Healthy"]
    assert {k["kind"] for k in kinds["kinds"]} == {
        "ModelDeployment",
        "InferenceProviderConfig",
        "AgentProviderConfig",
        "AgentDeployment",
        "InferencePoolMember",
    }
    status, listing = await stack.get("/v1/kinds/inferencepoolmembers")
    assert status == 200 and listing["kind"] == "InferencePoolMember" and [i["metadata"]["name"] for i in listing["items"]] == ["echo"]
    status, one = await stack.get("/v1/kinds/ipm/echo")
    meta = one["metadata"]
    assert {"generation", "observed_generation", "resourceVersion", "labels", "created_at", "updated_at", "last_reconciled_at"} <= set(meta)
    status, state = await stack.get("/v1/kinds/InferencePoolMember/echo/status")
    assert set(state) >= {"kind", "name", "generation", "observed_generation", "phase", "conditions", "last_reconciled_at"}
    assert state["phase"] in ("Pending", "Healthy", "Failed")
    for config in (IPC, APC):  # kinds whose status has no phase of its own: one a client can read, not null
        assert (await stack.apply(config))[0] in (200, 201)
        status, provider = await stack.get(f"/v1/kinds/{config['kind']}/{config['metadata']['name']}/status")
        assert status == 200 and provider["phase"] == "Pending", provider
    ready = changed(IPC, {"status": {"ready": True}})
    assert (await stack.apply(ready))[0] == 200
    assert (await stack.get(f"/v1/kinds/InferenceProviderConfig/{IPC['metadata']['name']}/status"))[1]["phase"] == "Ready"
    assert (await stack.get("/v1/kinds/Widget"))[0] == 404
    status, missing = await stack.get("/v1/kinds/ipm/nope")
    assert status == 404 and missing["code"] == "not_found" and missing["message"] == missing["error"]


async def test_delete_answers_deleted_then_noop(stack: Stack) -> None:
    await stack.apply(ECHO)
    assert (await stack.delete("/v1/kinds/InferencePoolMember/echo"))[1] == {
        "kind": "InferencePoolMember",
        "name": "echo",
        "action": "deleted",
    }
    assert (await stack.get("/v1/kinds/InferencePoolMember/echo"))[0] == 404
    assert (await stack.delete("/v1/kinds/InferencePoolMember/echo"))[1]["action"] == "noop"
    _, again = await stack.apply(ECHO)
    assert (again["action"], again["generation"]) == ("created", 1)


async def test_member_namespace_is_accepted_and_ignored(stack: Stack) -> None:
    status, result = await stack.apply(changed(ECHO, {"metadata.namespace": "team-a"}))
    assert status == 201 and "namespace" not in result
    _, view = await stack.get("/v1/kinds/ipm/echo")
    assert "namespace" not in view["metadata"]
    assert (await stack.apply(changed(ECHO, {"metadata.namespace": "team-b"})))[1]["action"] == "unchanged"


async def test_every_jetway_kind_is_served_with_namespaces_and_update_rules(stack: Stack) -> None:
    status, md = await stack.apply(changed(MD, {"metadata.namespace": "team"}))
    assert (status, md["namespace"]) == (201, "team")
    assert (await stack.get("/v1/kinds/md/qwen"))[0] == 404, "namespaced kinds default to the default namespace"
    status, view = await stack.get("/v1/kinds/md/qwen?namespace=team")
    assert status == 200 and view["metadata"]["namespace"] == "team" and view["spec"]["serving"] == {"mode": "aggregated"}
    status, body = await stack.apply(changed(MD, {"metadata.namespace": "team", "spec.model.id": "other/model"}))
    assert status == 400 and body["path"] == "spec.model.id" and "immutable" in body["error"]
    assert (await stack.apply(AD))[0] == 201
    status, listing = await stack.get("/v1/kinds/AgentDeployment?namespace=default")
    assert [i["metadata"]["name"] for i in listing["items"]] == ["sre-bot"]


async def test_members_pointing_at_metadata_addresses_are_refused(stack: Stack) -> None:
    member = changed(ECHO, {"spec.backend": "vllm-openai", "spec.url": "http://169.254.169.254/latest"})
    status, body = await stack.apply(member)
    assert status == 400 and body["path"] == "spec.url" and "cloud metadata address" in body["error"]
    status, body = await stack.apply(changed(member, {"spec.url": "http://[fe80::1]:8000"}))
    assert status == 400 and "link-local" in body["error"]
    assert (await stack.apply(changed(member, {"spec.url": "http://10.1.2.3:8000"})))[0] == 201, "private LAN addresses are fine"


async def test_no_bad_input_yields_a_500(stack: Stack) -> None:
    weird: list[Any] = [
        None,
        1,
        "x",
        [],
        {},
        {"kind": 5},
        {"kind": "InferencePoolMember"},
        {"apiVersion": "airdress.co/v1alpha1", "kind": "InferencePoolMember", "metadata": "x", "spec": []},
        {"metadata": {"name": {"a": 1}}},
    ]
    for doc in weird:
        async with stack.http.post(stack.api_url + "/v1/apply", json=doc, headers=stack.auth) as response:
            assert 400 <= response.status < 500, doc
    async with stack.http.post(
        stack.api_url + "/v1/apply", data=b"\xff\xfe", headers={**stack.auth, "Content-Type": "application/yaml"}
    ) as r:
        assert r.status == 400
    async with aiohttp.ClientSession() as session, session.get(stack.api_url + "/v1/nowhere", headers=stack.auth) as response:
        assert response.status == 404
