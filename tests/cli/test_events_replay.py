"""`jetway events` and `jetway replay` against a real stream, through the real command."""

from __future__ import annotations

import asyncio
import json
import subprocess

import yaml

from contracts.events import ResourceApplied, ResourceDeleted, StatusCondition, StatusReported, StatusSlice
from contracts.subjects import Key
from runtime.bus import connect, ensure_streams
from runtime.eventstore import EventStore
from tests.support.cli import jetway_command, run_jetway
from tests.support.nats import NatsEndpoint

GPU = Key("InferencePoolMember", "", "gpu-a")
MD = Key("ModelDeployment", "team", "qwen.v1")


async def fill(url: str) -> None:
    nc = await connect(url, name="fill")
    await ensure_streams(nc.jetstream())
    store = EventStore(nc, producer="watcher")
    await store.append(
        GPU.subject(), ResourceApplied(kind=GPU.kind, namespace="", name=GPU.name, generation=1, spec={"backend": "echo"})
    )  # 1
    await store.append(
        MD.subject(), ResourceApplied(kind=MD.kind, namespace="team", name=MD.name, generation=1, spec={"model": {"id": "q"}})
    )  # 2
    healthy = StatusSlice(phase="Healthy", conditions=(StatusCondition(type="Healthy", status="True", reason="ProbeSucceeded"),))
    await EventStore(nc, producer="router").append(GPU.subject("router"), StatusReported(generation=1, status=healthy))  # 3
    await store.append(
        GPU.subject(), ResourceApplied(kind=GPU.kind, namespace="", name=GPU.name, generation=2, spec={"backend": "echo", "draining": True})
    )  # 4
    await store.append(MD.subject(), ResourceDeleted(kind=MD.kind, namespace="team", name=MD.name))  # 5
    await nc.close()


def test_events_lists_history_filtered_by_resource_and_sequence(nats: NatsEndpoint) -> None:
    asyncio.run(fill(nats.url))
    everything = run_jetway("events", "--nats", nats.url)
    assert everything.returncode == 0, everything.stderr
    lines = everything.stdout.splitlines()
    assert lines[0].split()[:3] == ["SEQ", "TIME", "TYPE"]
    assert [line.split()[0] for line in lines[1:]] == ["1", "2", "3", "4", "5"]
    assert "InferencePoolMember/gpu-a [router by router]" in lines[3] and "phase Healthy; Healthy=True (ProbeSucceeded)" in lines[3]

    one = run_jetway("events", "ipm/gpu-a", "--nats", nats.url).stdout.splitlines()
    assert [line.split()[0] for line in one[1:]] == ["1", "3", "4"]
    namespaced = run_jetway("events", "md/team/qwen.v1", "--nats", nats.url).stdout.splitlines()
    assert [line.split()[2] for line in namespaced[1:]] == ["ResourceApplied.v1", "ResourceDeleted.v1"]
    since = run_jetway("events", "--since", "4", "--nats", nats.url).stdout.splitlines()
    assert [line.split()[0] for line in since[1:]] == ["4", "5"]

    missing = run_jetway("events", "ipm/gpu-z", "--nats", nats.url)  # a typo: said so, exit 1 (it was "(no events)", 0)
    assert missing.returncode == 1 and "no events for ipm/gpu-z: no such resource" in missing.stderr, missing
    assert run_jetway("events", "--since", "99", "--nats", nats.url).returncode == 0  # nothing new yet is no error

    as_json = [json.loads(line) for line in run_jetway("events", "ipm/gpu-a", "-o", "json", "--nats", nats.url).stdout.splitlines()]
    assert [e["seq"] for e in as_json] == [1, 3, 4]
    assert as_json[1]["event"]["status"]["phase"] == "Healthy" and as_json[1]["producer"] == "router"


def test_replay_shows_what_jetway_believed_at_a_point(nats: NatsEndpoint) -> None:
    asyncio.run(fill(nats.url))
    before = run_jetway("replay", "--until", "3", "--nats", nats.url)
    assert before.returncode == 0, before.stderr
    assert before.stdout.startswith("# state as of sequence 3")
    docs = list(yaml.safe_load_all(before.stdout))
    by_name = {d["metadata"]["name"]: d for d in docs}
    assert by_name["gpu-a"]["metadata"]["generation"] == 1
    assert by_name["gpu-a"]["status"]["phase"] == "Healthy"
    assert by_name["qwen.v1"]["metadata"]["namespace"] == "team"

    now = list(yaml.safe_load_all(run_jetway("replay", "--nats", nats.url).stdout))
    assert [d["metadata"]["name"] for d in now] == ["gpu-a"], "the deleted deployment is gone"
    assert now[0]["spec"]["draining"] is True and now[0]["metadata"]["resourceVersion"] == "4"

    gone = run_jetway("replay", "md/team/qwen.v1", "--nats", nats.url)
    assert gone.returncode == 1 and "did not exist" in gone.stdout
    was = run_jetway("replay", "md/team/qwen.v1", "--until", "2", "--nats", nats.url)
    assert was.returncode == 0 and "qwen.v1" in was.stdout


def test_follow_prints_new_events_as_they_are_stored(nats: NatsEndpoint) -> None:
    asyncio.run(fill(nats.url))
    process = subprocess.Popen(
        [*jetway_command(), "events", "ipm/gpu-a", "--follow", "--since", "4", "--nats", nats.url], stdout=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().startswith("    SEQ")
        assert process.stdout.readline().split()[0] == "4"

        async def one_more() -> None:
            nc = await connect(nats.url, name="more")
            await EventStore(nc, producer="watcher").append(GPU.subject(), ResourceDeleted(kind=GPU.kind, namespace="", name=GPU.name))
            await nc.close()

        asyncio.run(one_more())
        line = process.stdout.readline()
        assert line.split()[0] == "6" and "ResourceDeleted.v1" in line
    finally:
        process.terminate()
        process.wait(10)


def test_bad_references_and_no_server_give_clear_errors(nats: NatsEndpoint) -> None:
    bad = run_jetway("events", "widget/x", "--nats", nats.url)
    assert bad.returncode == 2 and "unknown kind 'widget'" in bad.stderr
    assert run_jetway("events", "--since", "yesterday", "--nats", nats.url).returncode == 2
    nats.stop()
    down = run_jetway("events", "--nats", nats.url)
    assert down.returncode == 5 and "cannot reach NATS" in down.stderr and "Traceback" not in down.stderr


def test_without_a_running_jetway_the_error_says_how_to_start_one(tmp_path) -> None:  # type: ignore[no-untyped-def]
    result = run_jetway("events", env={"JETWAY_DATA_DIR": str(tmp_path), "NATS_URL": ""})
    assert result.returncode == 5 and "jetway up" in result.stderr
