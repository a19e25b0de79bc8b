"""The console as deploy/ runs it in a cluster, on a real API server: its own process (`python -m services.console`)
with no Kubernetes credential of its own, its own NATS user, and the watcher feeding the event stream.

A user logs in with their own Kubernetes token; the console shows what that token may read and changes only what
it may change (RBAC, proven here on the real authorizer): the console is never a side door.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from contracts.natsauth import PASSWORD_ENV, USER_ENV
from runtime.natsserver import NatsServer, free_port
from testbed.kubeapi import Cluster
from testbed.waiting import eventually
from tests.console.conftest import browser, screenshot  # noqa: F401 (a fixture)
from tests.kube.test_least_privilege import installed, kubeconfig_with, secured_nats, token_for  # noqa: F401 (fixtures)
from tests.support.cli import ROOT
from tests.support.kubecases import MDV, deployment_manifest

TIMEOUT = 60
MD_RULE = {"apiGroups": ["airunway.ai"], "resources": ["modeldeployments"]}
HEADER = {"x-jetway-console": "1"}


def token_of(kubeconfig: str) -> str:
    token: str = yaml.safe_load(Path(kubeconfig).read_text())["users"][0]["user"]["token"]
    return token


@contextlib.contextmanager
def service(name: str, env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", f"services.{name}"], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **env}
        )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)


@pytest.fixture
async def console(installed: Cluster, secured_nats: tuple[NatsServer, dict[str, str]], tmp_path: Path) -> AsyncIterator[str]:  # noqa: F811
    """The watcher (its ServiceAccount's token) and the console (no token: the cluster's address and CA only)."""
    cluster = installed
    assert cluster.server is not None
    nats, passwords = secured_nats
    watcher_token = await token_for(cluster.kube, "jetway-watcher")
    cluster_only = yaml.safe_load(await asyncio.to_thread(Path(cluster.server.kubeconfig).read_text))
    cluster_only["users"] = [{"name": "nobody", "user": {}}]  # the console must not speak as anyone of its own
    for context in cluster_only["contexts"]:
        context["context"]["user"] = "nobody"
    (tmp_path / "console.kubeconfig").write_text(yaml.safe_dump(cluster_only))
    port = free_port()
    common = {"JETWAY_MODE": "cluster", "JETWAY_NATS_URL": nats.url, "JETWAY_HEALTH_HOST": "127.0.0.1", "JETWAY_RESYNC_SECONDS": "2"}
    watcher_env = {
        **common,
        USER_ENV: "watcher",
        PASSWORD_ENV: passwords["watcher"],
        "KUBECONFIG": str(kubeconfig_with(cluster.server, watcher_token, tmp_path / "watcher.kubeconfig")),
        "JETWAY_WEBHOOK": "false",
        "JETWAY_HEALTH_PORT": str(free_port()),
    }
    console_env = {
        **common,
        USER_ENV: "console",
        PASSWORD_ENV: passwords["console"],
        "KUBECONFIG": str(tmp_path / "console.kubeconfig"),
        "JETWAY_CONSOLE_HOST": "127.0.0.1",
        "JETWAY_CONSOLE_PORT": str(port),
        "JETWAY_HEALTH_PORT": str(free_port()),
        "JETWAY_ROUTER_METRICS": f"127.0.0.1:{free_port()}",  # no router here: the figures are empty, not an error
        "JETWAY_CONSOLE_RECHECK_SECONDS": "1",  # a revoked token stops within a second (60 by default)
    }
    with service("watcher", watcher_env, tmp_path / "watcher.log"), service("console", console_env, tmp_path / "console.log") as process:
        url = f"http://127.0.0.1:{port}"

        async def up() -> bool:
            assert process.poll() is None, (tmp_path / "console.log").read_text()[-3000:]
            try:
                async with aiohttp.ClientSession() as http, http.get(f"{url}/healthz") as answer:
                    return answer.status == 200
            except aiohttp.ClientError:
                return False

        await eventually(up, timeout=TIMEOUT, message="the console listening")
        try:
            yield url
        finally:  # while the watcher runs: it releases its finalizer, so the namespaces can go after the test
            await delete_deployments(cluster)
    log = (tmp_path / "console.log").read_text()
    assert "Traceback" not in log, log[-3000:]
    assert "permissions violation" not in log.lower(), f"the console was refused a NATS right nats-auth.conf should give: {log[-3000:]}"
    assert watcher_token not in log and not any(p in log for p in passwords.values())


async def delete_deployments(cluster: Cluster) -> None:
    """Every ModelDeployment the test made (in its namespaces), deleted and gone."""
    namespaces = [cluster.namespace, *cluster.namespaces]
    for namespace in namespaces:
        found, _ = await cluster.kube.list(MDV, "ModelDeployment", namespace)
        for md in found:
            await cluster.kube.delete(MDV, "ModelDeployment", md["metadata"]["name"], namespace)

    async def gone() -> bool:
        left = [(await cluster.kube.list(MDV, "ModelDeployment", ns))[0] for ns in namespaces]
        return not any(left)

    await eventually(gone, timeout=TIMEOUT, message="the test's deployments deleted (the watcher's finalizer released)")


async def log_in(client: aiohttp.ClientSession, console: str, token: str) -> aiohttp.ClientResponse:
    """As a browser does: the form (with its check value and cookie), then the post; the answer, read."""
    async with client.get(f"{console}/ui/login") as form:
        found = re.search(r'name="check" value="([^"]+)"', await form.text())
    assert found is not None
    async with client.post(f"{console}/ui/login", data={"token": token, "check": found.group(1)}, allow_redirects=False) as answer:
        await answer.read()
        return answer


async def json_of(answer: aiohttp.ClientResponse) -> Any:
    return await answer.json(content_type=None)


async def test_the_cluster_console_shows_and_changes_only_what_the_users_own_token_allows(
    installed: Cluster,  # noqa: F811
    console: str,
    tmp_path: Path,
) -> None:
    cluster = installed
    namespace = cluster.namespace
    editor = token_of(await cluster.identity("editor", [{**MD_RULE, "verbs": ["get", "list", "watch", "create", "patch", "delete"]}]))
    viewer = token_of(await cluster.identity("viewer", [{**MD_RULE, "verbs": ["get", "list", "watch"]}]))
    nobody = token_of(await cluster.identity("nobody", [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]))
    md = deployment_manifest(cluster, "console-made")
    path = f"{console}/v1/kinds/ModelDeployment"

    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as signed_in, aiohttp.ClientSession() as http:
        # no credential, or one the API server does not take: 401 everywhere, the pages with the login form
        async with http.get(f"{console}/ui/") as answer:
            assert answer.status == 401 and "Kubernetes token" in await answer.text()
        for route in ("/v1/kinds/ModelDeployment", "/v1/watch?kind=ModelDeployment", "/v1/console/router-figures"):
            async with http.get(console + route) as answer:
                assert answer.status == 401, route
            async with http.get(console + route, headers={"Authorization": "Bearer not-a-token"}) as answer:
                assert answer.status == 401, route
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as stranger:
            answer = await log_in(stranger, console, "not-a-token")
            assert answer.status == 401 and "does not take this token" in await answer.text()
            assert "jetway_cluster_session" not in answer.cookies
            answer = await log_in(stranger, console, "with a\nline break")
            assert answer.status == 400 and "one line of printable characters" in await answer.text()
        # login CSRF: a post without the form's check value (another site's form cannot have it) logs nobody in
        async with http.post(f"{console}/ui/login", data={"token": editor}, allow_redirects=False) as answer:
            assert answer.status == 403 and "jetway_cluster_session" not in answer.cookies

        # the editor logs in with their token (a form post) and gets a session cookie, then applies through the console
        answer = await log_in(signed_in, console, editor)
        assert answer.status == 302 and answer.headers["Location"] == "/ui/"
        async with signed_in.get(f"{console}/ui/") as answer:
            assert answer.status == 200
        async with signed_in.post(f"{console}/v1/apply", json=md) as answer:  # a change without the console's header
            assert answer.status == 403
        bad = {**md, "spec": {**md["spec"], "engine": {"type": "teleport"}}}
        async with signed_in.post(f"{console}/v1/apply?dry-run=true", json=bad, headers=HEADER) as answer:
            refused = await json_of(answer)
            assert answer.status == 400 and refused["path"].startswith("spec.engine"), refused
        async with signed_in.post(f"{console}/v1/apply?dry-run=true", json=md, headers=HEADER) as answer:
            assert answer.status == 201 and (await json_of(answer))["action"] == "would_create"
        assert await cluster.kube.get_or_none(MDV, "ModelDeployment", "console-made", namespace) is None  # dry run: nothing
        async with signed_in.post(f"{console}/v1/apply", json=md, headers=HEADER) as answer:
            applied = await json_of(answer)
            assert answer.status == 201 and applied["action"] == "created", applied
        stored = await cluster.kube.get(MDV, "ModelDeployment", "console-made", namespace)
        assert any(m.get("manager") == "jetway-console" for m in stored["metadata"]["managedFields"])
        async with signed_in.post(f"{console}/v1/apply", json=md, headers=HEADER) as answer:
            again = await json_of(answer)
            assert answer.status == 200 and again["action"] == "unchanged" and again["generation"] == applied["generation"], again

        # it reaches the console's list through the watcher and the event stream
        async def listed(token: str) -> list[str]:
            async with http.get(path, params={"namespace": namespace}, headers={"Authorization": f"Bearer {token}"}) as answer:
                assert answer.status == 200
                return [item["metadata"]["name"] for item in (await json_of(answer))["items"]]

        await eventually(lambda: _contains(listed(editor), "console-made"), timeout=TIMEOUT, message="console-made listed")

        # a viewer sees it, and its history, but cannot change or delete it: Kubernetes says no, in its words
        viewer_headers = {"Authorization": f"Bearer {viewer}"}
        assert "console-made" in await listed(viewer)
        async with http.get(f"{path}/console-made/history", params={"namespace": namespace}, headers=viewer_headers) as answer:
            assert answer.status == 200 and (await json_of(answer))["events"]
        async with http.post(
            f"{console}/v1/apply", json={**md, "spec": {**md["spec"], "scaling": {"replicas": 2}}}, headers=viewer_headers
        ) as answer:
            denied = await json_of(answer)
            assert answer.status == 403 and "Kubernetes refused it" in denied["error"] and "viewer" in denied["error"], denied
        async with http.delete(f"{path}/console-made", params={"namespace": namespace}, headers=viewer_headers) as answer:
            assert answer.status == 403
        assert await cluster.kube.get_or_none(MDV, "ModelDeployment", "console-made", namespace) is not None

        # someone who may not read ModelDeployments sees none, and is refused one by name
        nobody_headers = {"Authorization": f"Bearer {nobody}"}
        assert await listed(nobody) == []
        async with http.get(f"{console}/v1/console/router-figures", headers=nobody_headers) as answer:
            assert answer.status == 403  # they name members of every namespace
        for route in (f"{path}/console-made", f"{path}/console-made/history", f"{path}/console-made/objects"):
            async with http.get(route, params={"namespace": namespace}, headers=nobody_headers) as answer:
                assert answer.status == 403, route

        # the editor deletes it through the console: gone from Kubernetes, then from the console's list
        async with signed_in.delete(f"{path}/console-made", params={"namespace": namespace}, headers=HEADER) as answer:
            assert answer.status == 200 and (await json_of(answer))["action"] == "deleted"
        await eventually(lambda: _absent_md(cluster, "console-made"), timeout=TIMEOUT, message="console-made deleted in Kubernetes")
        async with signed_in.post(f"{console}/v1/console/logout", headers=HEADER) as answer:
            assert answer.status == 200
        async with signed_in.get(path) as answer:
            assert answer.status == 401  # the session is over
    log = (tmp_path / "console.log").read_text()  # the console process's own log (the fixture's, same folder)
    assert "console login" in log and not any(token in log for token in (editor, viewer, nobody))  # users' tokens never


async def test_a_namespace_bound_user_sees_that_namespace_only(installed: Cluster, console: str) -> None:  # noqa: F811
    """RBAC granted in one namespace by a RoleBinding: the console lists that namespace's deployments, not another's."""
    cluster = installed
    other = await cluster.other_namespace("other")
    for namespace, name in ((cluster.namespace, "mine"), (other, "theirs")):
        await cluster.kube.create({**deployment_manifest(cluster, name), "metadata": {"name": name, "namespace": namespace}})
    local = token_of(await cluster.identity("local", [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]))
    rbac = "rbac.authorization.k8s.io/v1"
    reader = {"name": "local-md-reader", "namespace": cluster.namespace}
    await cluster.kube.create({"apiVersion": rbac, "kind": "Role", "metadata": reader, "rules": [{**MD_RULE, "verbs": ["get", "list"]}]})
    await cluster.kube.create(
        {
            "apiVersion": rbac,
            "kind": "RoleBinding",
            "metadata": reader,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "local-md-reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "local", "namespace": cluster.namespace}],
        }
    )
    admin = token_of(await cluster.identity("admin", [{**MD_RULE, "verbs": ["get", "list"]}]))

    async with aiohttp.ClientSession() as http:

        async def names(token: str) -> set[str]:
            async with http.get(f"{console}/v1/kinds/ModelDeployment", headers={"Authorization": f"Bearer {token}"}) as answer:
                assert answer.status == 200
                return {item["metadata"]["name"] for item in (await json_of(answer))["items"]}

        await eventually(lambda: _superset(names(admin), {"mine", "theirs"}), timeout=TIMEOUT, message="both deployments listed")
        await eventually(lambda: _equal(names(local), {"mine"}), timeout=TIMEOUT, message="the local user sees its namespace only")


async def test_a_session_stops_on_every_route_once_kubernetes_no_longer_takes_its_token(installed: Cluster, console: str) -> None:  # noqa: F811
    """Even on routes that ask Kubernetes nothing else (the playground's info), for a session and a bearer token."""
    cluster = installed
    token = token_of(await cluster.identity("leaving", [{**MD_RULE, "verbs": ["get", "list"]}]))
    async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as browser_like, aiohttp.ClientSession() as http:
        answer = await log_in(browser_like, console, token)
        assert answer.status == 302
        bearer = {"Authorization": f"Bearer {token}"}
        for client, headers in ((browser_like, {}), (http, bearer)):
            async with client.get(f"{console}/v1/console/info", headers=headers) as answer:
                assert answer.status == 200
        await cluster.kube.delete("v1", "ServiceAccount", "leaving", cluster.namespace)  # its tokens die with it

        async def refused(client: aiohttp.ClientSession, headers: dict[str, str]) -> bool:
            async with client.get(f"{console}/v1/console/info", headers=headers) as answer:
                return answer.status == 401

        await eventually(lambda: refused(browser_like, {}), timeout=TIMEOUT, message="the session refused")
        await eventually(lambda: refused(http, bearer), timeout=TIMEOUT, message="the bearer token refused")


async def _contains(names: Any, name: str) -> bool:
    return name in await names


async def _superset(found: Any, wanted: set[str]) -> bool:
    return wanted <= await found


async def _equal(found: Any, wanted: set[str]) -> bool:
    return await found == wanted


async def _absent_md(cluster: Cluster, name: str) -> bool:
    return await cluster.kube.get_or_none(MDV, "ModelDeployment", name, cluster.namespace) is None


async def test_in_a_browser_the_user_logs_in_with_a_token_and_creates_a_deployment_from_the_form(
    installed: Cluster,  # noqa: F811
    console: str,
    browser: Any,  # noqa: F811
) -> None:
    """The same pages as `jetway up`'s, in chromium: the login form, the live list, and the create form, whose
    deployment is created in Kubernetes as the user who logged in."""
    from playwright.async_api import expect

    cluster = installed
    md_rules = [
        {**MD_RULE, "verbs": ["get", "list", "watch", "create", "patch", "delete"]},
        {"apiGroups": ["airunway.ai"], "resources": ["inferenceproviderconfigs"], "verbs": ["get", "list"]},
    ]
    editor = token_of(await cluster.identity("form-editor", md_rules))
    await cluster.kube.create(deployment_manifest(cluster, "already-there"))
    context = await browser.new_context(viewport={"width": 1280, "height": 800})
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        await page.goto(f"{console}/ui/")
        await screenshot(page, "cluster-login")
        await page.get_by_label("Kubernetes token").fill(editor)
        await page.get_by_role("button", name="Log in").click()
        await expect(page.get_by_role("cell", name="already-there")).to_be_visible(timeout=TIMEOUT * 1000)

        await page.goto(f"{console}/ui/#/create")
        await page.get_by_label("Name", exact=True).fill("from-the-form")
        await page.get_by_label("Namespace").fill(cluster.namespace)
        await expect(page.locator(".verdict")).to_contain_text("Valid: would create", timeout=TIMEOUT * 1000)
        await page.get_by_role("button", name="Create").click()
        await expect(page).to_have_url(f"{console}/ui/#/deployments/{cluster.namespace}/from-the-form", timeout=TIMEOUT * 1000)
        stored = await cluster.kube.get(MDV, "ModelDeployment", "from-the-form", cluster.namespace)
        assert any(m.get("manager") == "jetway-console" for m in stored["metadata"]["managedFields"])
        assert not errors, f"the page's scripts failed: {errors}"
    finally:
        await context.close()
