"""`jetway up` prints a one-time console login link, `jetway console` another; neither prints the token."""

from __future__ import annotations

import re
from pathlib import Path

import aiohttp

from tests.cli.test_up import jetway, start_up

LINK = re.compile(r"http://127\.0\.0\.1:\d+/ui/login\?code=[A-Za-z0-9_-]+")


async def test_up_and_jetway_console_print_one_time_login_links_and_never_the_token(tmp_path: Path) -> None:
    data = tmp_path / "jetway"
    up = await start_up(data)
    try:
        printed = LINK.search(up.text)
        assert printed is not None, up.text
        code, out, err = await jetway(data, "console")
        assert code == 0, err
        fresh = LINK.search(out)
        assert fresh is not None and fresh.group() != printed.group()
        token = up.config()["token"]
        assert token not in up.text and token not in out + err
        async with aiohttp.ClientSession() as browser:
            for link in (printed.group(), fresh.group()):
                async with browser.get(link, allow_redirects=False) as response:
                    assert response.status == 302 and "jetway_session=" in response.headers["Set-Cookie"]
                async with browser.get(link, allow_redirects=False) as response:
                    assert response.status == 401, "used once"
    finally:
        assert await up.stop() == 0
    code, _, err = await jetway(data, "console")
    assert code == 5 and "cannot reach the apply API" in err
