"""The NATS fixture is a real JetStream server with its own store, on a free port."""

from __future__ import annotations

import nats as nats_client

from tests.support.nats import NatsEndpoint


async def test_fixture_serves_jetstream_and_keeps_its_store_across_restarts(nats: NatsEndpoint) -> None:
    nc = await nats_client.connect(nats.url)
    js = nc.jetstream()
    await js.add_stream(name="FIXTURE", subjects=["fixture.>"])
    ack = await js.publish("fixture.one", b"hello")
    assert ack.seq == 1
    await nc.close()

    nats.restart()
    nc = await nats_client.connect(nats.url)
    msg = await nc.jetstream().get_msg("FIXTURE", 1)
    assert msg.data == b"hello"
    await nc.close()
