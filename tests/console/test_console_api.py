"""The console's routes on the apply API, over real HTTP: login, the session cookie, the CSRF header, 401 without."""

from __future__ import annotations

import logging
from typing import Any

import aiohttp
import pytest

from tests.contracts.cases import MD, changed
from tests.support.cli import ROOT
from tests.support.stack import Stack, next_sse_event

PROTECTED = [
    ("GET", "/ui/"),
    ("GET", "/ui/app.js"),
    ("GET", "/ui/style.css"),
    ("GET", "/v1/kinds"),
    ("GET", "/v1/kinds/md"),
    ("GET", "/v1/kinds/md/qwen"),
    ("GET", "/v1/kinds/md/qwen/objects"),
    ("GET", "/v1/kinds/md/qwen/history"),
    ("GET", "/v1/watch?kind=md"),
    ("GET", "/v1/console/info"),
    ("GET", "/v1/console/models"),
    ("POST", "/v1/console/chat"),
    ("POST", "/v1/console/codes"),
    ("POST", "/v1/apply"),
    ("DELETE", "/v1/kinds/md/qwen"),
]


async def logged_in(stack: Stack) -> aiohttp.ClientSession:
    """A client holding a console session (its own cookie jar), through the one-time login link."""
    assert stack.console is not None
    session = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
    async with session.get(stack.console.login_url(stack.api_url), allow_redirects=False) as response:
        assert response.status == 302 and response.headers["Location"] == "/ui/"
        cookie = response.headers["Set-Cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    return session


async def test_without_the_token_or_a_session_every_page_and_api_answers_401(stack: Stack) -> None:
    async with aiohttp.ClientSession() as anonymous:
        for method, path in PROTECTED:
            async with anonymous.request(method, stack.api_url + path) as response:
                assert response.status == 401, (method, path)
                if path.startswith("/ui/"):
                    text = await response.text()
                    assert "jetway console" in text and stack.token not in text
                else:
                    assert (await response.json())["code"] == "unauthorized"
        for forged in ({"Authorization": "Bearer nope"}, {"Cookie": "jetway_session=forged"}):
            async with anonymous.get(f"{stack.api_url}/v1/kinds", headers=forged) as response:
                assert response.status == 401
        async with anonymous.get(f"{stack.api_url}/healthz") as response:
            assert response.status == 200
        # open: the logged-out page's stylesheet (the console's own, nothing secret), so that page looks like the rest
        async with anonymous.get(f"{stack.api_url}/ui/login.css") as response:
            assert response.status == 200 and response.content_type == "text/css"
            assert await response.read() == (ROOT / "services" / "console" / "static" / "style.css").read_bytes()


async def test_a_login_link_works_once_and_its_session_reads_and_changes_with_the_console_header(stack: Stack) -> None:
    assert stack.console is not None
    url = stack.console.login_url(stack.api_url)
    browser = aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))
    try:
        async with browser.get(url) as response:  # followed to /ui/
            assert response.status == 200 and response.url.path == "/ui/"
            page = await response.text()
            assert '<script type="module" src="/ui/app.js">' in page and "default-src 'self'" in response.headers["Content-Security-Policy"]
        async with browser.get("http://" + url.split("://", 1)[1]) as response:
            assert response.status == 401, "a code is good for one login"
        async with aiohttp.ClientSession() as other, other.get(url, allow_redirects=False) as response:
            assert response.status == 401 and "Set-Cookie" not in response.headers
        async with browser.get(f"{stack.api_url}/ui/app.js") as response:
            assert response.status == 200 and response.content_type == "text/javascript"
        async with browser.get(f"{stack.api_url}/ui/..%2Fweb.py") as response:
            assert response.status in (403, 404)
        async with browser.get(f"{stack.api_url}/v1/kinds/md") as response:
            assert response.status == 200

        # a change without the console's header is what a cross-site form would send: refused
        async with browser.post(f"{stack.api_url}/v1/apply", json=MD) as response:
            assert response.status == 403 and "x-jetway-console" in (await response.json())["error"]
        async with browser.delete(f"{stack.api_url}/v1/kinds/md/qwen") as response:
            assert response.status == 403
        async with browser.post(f"{stack.api_url}/v1/apply", json=MD, headers={"x-jetway-console": "1"}) as response:
            assert response.status == 201
        # a session cannot mint login codes: only the token's holder can
        async with browser.post(f"{stack.api_url}/v1/console/codes", headers={"x-jetway-console": "1"}) as response:
            assert response.status == 403
        async with browser.post(f"{stack.api_url}/v1/console/logout", headers={"x-jetway-console": "1"}) as response:
            assert response.status == 200
        async with browser.get(f"{stack.api_url}/v1/kinds/md") as response:
            assert response.status == 401, "logged out"
    finally:
        await browser.close()


async def test_the_token_holder_gets_fresh_login_codes(stack: Stack) -> None:
    async with stack.http.post(f"{stack.api_url}/v1/console/codes", headers=stack.auth) as response:
        body = await response.json()
    assert response.status == 200 and body["expires_in"] == 600
    assert body["url"].startswith(f"{stack.api_url}/ui/login?code=") and stack.token not in body["url"]
    async with aiohttp.ClientSession() as fresh, fresh.get(body["url"], allow_redirects=False) as login:
        assert login.status == 302


async def test_the_watch_sends_a_snapshot_then_each_change_and_deletion(stack: Stack) -> None:
    await stack.apply(MD)
    async with stack.http.get(f"{stack.api_url}/v1/watch?kind=ModelDeployment", headers=stack.auth) as response:
        assert response.status == 200 and response.content_type == "text/event-stream"

        kind, snapshot = await next_sse_event(response)
        assert kind == "snapshot" and [i["metadata"]["name"] for i in snapshot["items"]] == ["qwen"]
        await stack.apply(changed(MD, {"metadata.name": "second"}))
        seen: dict[str, Any] = {}
        while "second" not in seen:
            kind, item = await next_sse_event(response)
            assert kind == "changed"
            seen[item["metadata"]["name"]] = item
        await stack.delete("/v1/kinds/md/second")
        while True:
            kind, item = await next_sse_event(response)
            if kind == "deleted":
                assert (item["name"], item["namespace"]) == ("second", "default")
                break


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("/v1/watch?kind=nope", "kind"),
        ("/v1/watch", "kind"),
        ("/v1/kinds/md/qwen/history?limit=0", "limit"),
        ("/v1/kinds/md/qwen/history?until=x", "until"),
        ("/v1/kinds/md/qwen/history?after=-1", "after"),
        ("/v1/kinds/md/qwen/history?until=1&since=x", "since"),
        ("/v1/kinds/md/qwen/history?since=1", "until"),
    ],
)
async def test_bad_parameters_are_400_naming_the_field(stack: Stack, path: str, field: str) -> None:
    status, body = await stack.get(path)
    assert (status, body["path"], body["code"]) == (400, field, "invalid_request")
    assert body["error"].startswith(f"{field}: ")


async def test_history_pages_through_events_and_replays_the_state_as_of_one(stack: Stack) -> None:
    await stack.apply(MD)
    await stack.apply(changed(MD, {"spec.resources.gpu.count": 2}))
    status, first = await stack.get("/v1/kinds/md/qwen/history?limit=1")
    assert status == 200 and len(first["events"]) == 1 and first["next_after"] == first["events"][0]["seq"]
    applied = first["events"][0]
    assert (applied["type"], applied["producer"], applied["summary"]) == ("ResourceApplied.v1", "watcher", "generation 1")
    _, rest = await stack.get(f"/v1/kinds/md/qwen/history?after={first['next_after']}&limit=1000")
    assert "generation 2" in [e["summary"] for e in rest["events"]]
    _, then = await stack.get(f"/v1/kinds/md/qwen/history?until={applied['seq']}")
    assert then["state"]["spec"]["resources"]["gpu"]["count"] == 1 and then["state"]["metadata"]["generation"] == 1
    # the diff between two points: the state as of `until`, and what changed since `since`
    second = next(e for e in rest["events"] if e["summary"] == "generation 2")
    _, diff = await stack.get(f"/v1/kinds/md/qwen/history?since={applied['seq']}&until={second['seq']}")
    assert diff["state"]["spec"]["resources"]["gpu"]["count"] == 2 and diff["existed_since"] is True
    count = {"path": "spec.resources.gpu.count", "change": "changed", "old": 1, "new": 2}
    assert count in diff["changes"]
    # a re-apply changes the spec, never when the resource was made: the replay agrees with the live state
    assert {c["path"] for c in diff["changes"] if c["path"].startswith("metadata.")} == {"metadata.generation", "metadata.resourceVersion"}
    _, live = await stack.get("/v1/kinds/md/qwen")
    assert diff["state"]["metadata"]["creationTimestamp"] == live["metadata"]["created_at"]
    status, _ = await stack.get("/v1/kinds/md/never/history")
    assert status == 404


async def test_secrets_stay_out_of_the_log(stack: Stack, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    assert stack.console is not None
    url = stack.console.login_url(stack.api_url)
    code = url.rsplit("=", 1)[1]
    async with aiohttp.ClientSession() as browser, browser.get(url, allow_redirects=False) as response:
        session = response.cookies["jetway_session"].value
    for secret in (stack.token, code, session):
        assert secret not in caplog.text
