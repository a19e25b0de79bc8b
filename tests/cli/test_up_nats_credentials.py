"""D11 (issue 11): the embedded NATS of `jetway up` takes no client without credentials, so a local process
cannot publish events past the apply API's token and validation. The password lives in the data dir
(mode 0600), clients use it from there, and it is never printed."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import nats
import pytest
from nats.errors import NoServersError

from tests.cli.test_up import jetway, start_up


async def test_a_client_without_the_password_is_refused_and_the_password_never_shows(tmp_path: Path) -> None:
    data = tmp_path / "jetway"
    up = await start_up(data)
    try:
        password_file = data / "nats-password"
        password = password_file.read_text().strip()
        assert stat.S_IMODE(os.stat(password_file).st_mode) == 0o600 and len(password) >= 32
        assert stat.S_IMODE(os.stat(data / "nats" / "nats-server.conf").st_mode) == 0o600
        shown = next(line for line in up.lines if "NATS JetStream" in line)
        url = next(word for word in shown.split() if word.startswith("nats://"))
        assert url.startswith("nats://127.0.0.1:") and "@" not in url

        # anyone else on the machine: no credentials, a wrong password
        for intruder in (url, url.replace("nats://", "nats://jetway:wrong@")):
            with pytest.raises((NoServersError, nats.errors.Error, OSError)) as refused:
                await nats.connect(intruder, allow_reconnect=False, connect_timeout=2, max_reconnect_attempts=0)
            assert "uthorization" in str(refused.value) or isinstance(refused.value, NoServersError), refused.value

        # the clients that should get in, do: they read the URL with its credentials from jetway.json
        config = json.loads((data / "jetway.json").read_text())
        client = await nats.connect(config["nats_url"], allow_reconnect=False, connect_timeout=10)
        try:
            await client.flush()
            assert client.is_connected
        finally:
            await client.close()
        code, _, err = await jetway(data, "apply", "-f", "examples/echo-member.yaml")
        assert code == 0, err
        code, out, err = await jetway(data, "events", "ipm/echo")
        assert code == 0 and "ResourceApplied" in out, err
        assert password not in out and password not in err
    finally:
        assert await up.stop() == 0
    assert password not in up.text
