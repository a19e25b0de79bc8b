"""The admission webhook: the rules of `jetway validate`, the spec's defaults and the update-time
immutability rules, served to the API server over TLS (AdmissionReview v1).

`/validate` allows or denies with every problem as a field path and its rule; `/mutate`
answers with a JSON patch that writes the defaults into the spec. `review` is pure; the
server around it turns any malformed request into a 400 with a reason, never a 500.
"""

from __future__ import annotations

import base64
import json
import logging
import ssl
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from contracts.admission import Known, admit, judge
from contracts.documents import DocumentError, load_json
from contracts.kinds import KINDS
from contracts.rules.provider import ProviderLookup
from runtime.kube import Kube, KubeError, NotFound

if TYPE_CHECKING:
    from services.watcher.handlers import WatcherService

PROVIDER_API = "airunway.ai/v1alpha1"

log = logging.getLogger("jetway.webhook")
REVIEW = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}
MAX_BODY = 3 * 1024 * 1024  # the API server sends at most ~3 MiB objects


def _desired(obj: dict[str, Any]) -> dict[str, Any]:
    """What admission judges: identity, labels, annotations and spec (status and server fields aside)."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, dict) else {}
    keep = {k: meta[k] for k in ("name", "namespace", "labels", "annotations") if meta.get(k)}
    doc = {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "metadata": keep}
    if "spec" in obj:
        doc["spec"] = obj["spec"]
    return doc


def named_provider(request: dict[str, Any]) -> str | None:
    """The `spec.provider.name` of a ModelDeployment under review, to look up before judging it."""
    obj = request.get("object")
    if request.get("operation") not in ("CREATE", "UPDATE") or not isinstance(obj, dict) or obj.get("kind") != "ModelDeployment":
        return None
    provider = (obj.get("spec") or {}).get("provider") if isinstance(obj.get("spec"), dict) else None
    name = provider.get("name") if isinstance(provider, dict) else None
    return name if isinstance(name, str) and name else None


def review(
    request: dict[str, Any], *, mutate: bool, allow_link_local: bool = False, provider: ProviderLookup | None = None
) -> dict[str, Any]:
    """The AdmissionResponse for one AdmissionRequest; `provider` is what looking its named provider up gave."""
    uid = request.get("uid", "")
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    if request.get("operation") not in ("CREATE", "UPDATE") or not isinstance(request.get("object"), dict):
        return response
    obj = request["object"]
    old = request.get("oldObject") if request.get("operation") == "UPDATE" else None
    previous = admit(_desired(old)).obj if isinstance(old, dict) else None
    recorded = ((old.get("status") or {}).get("provider") or {}).get("name") if isinstance(old, dict) else None
    # the mutating webhook only defaults: the named provider is the validating webhook's to judge
    found = None if mutate or provider is None else provider
    known = Known(
        old=previous,
        recorded_provider=recorded if isinstance(recorded, str) else None,
        providers=None if found is None else (lambda _name: found),
        allow_link_local=allow_link_local,
    )
    verdict = judge(_desired(obj), known)
    if verdict.warnings:
        response["warnings"] = list(verdict.warnings)
    if mutate:
        if verdict.obj is not None and verdict.ok:
            spec = verdict.obj.wire().get("spec")
            if spec is not None and spec != obj.get("spec"):
                patch = [{"op": "add", "path": "/spec", "value": spec}]
                response["patchType"] = "JSONPatch"
                response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
        return response  # problems are the validating webhook's to report
    if not verdict.ok:
        name = (obj.get("metadata") or {}).get("name", "")
        kind = obj.get("kind", "resource")
        lines = [f"{p.path}: {p.message}" if p.path else p.message for p in verdict.problems]
        response["allowed"] = False
        response["status"] = {
            "code": 422,
            "reason": "Invalid",
            "message": f'{kind} "{name}" is invalid: ' + "; ".join(lines),
            "details": {
                "name": name,
                "kind": str(KINDS[kind].plural if kind in KINDS else kind),
                "causes": [{"field": p.path, "message": p.message, "reason": "FieldValueInvalid"} for p in verdict.problems],
            },
        }
    return response


Lookup = Callable[[str], Awaitable[ProviderLookup]]


def cluster_lookup(watcher: WatcherService, kube: Kube) -> Lookup:
    """The projection first; a provider it does not know yet is asked of the API server, as AI Runway's
    webhook falls back from its cache, and the answer's kind decides (contracts/rules/provider.py)."""

    async def lookup(name: str) -> ProviderLookup:
        known = watcher.known_provider(name)
        if known.outcome == "found":
            return known
        try:
            obj = await kube.get(PROVIDER_API, "InferenceProviderConfig", name)
        except NotFound:
            installed = kube.discovery.find(PROVIDER_API, "InferenceProviderConfig") is not None
            return ProviderLookup("not-found" if installed else "not-installed")
        except KubeError as exc:
            return ProviderLookup("forbidden" if exc.status in (401, 403) else "unavailable", reason=f"{exc.status} {exc.reason}")
        except (OSError, TimeoutError) as exc:
            return ProviderLookup("unavailable", reason=type(exc).__name__)
        admitted = admit(obj if isinstance(obj, dict) else {})
        spec = getattr(admitted.obj, "spec", None)
        return ProviderLookup("found", spec=spec) if spec is not None else ProviderLookup("unavailable", reason="its spec is not valid")

    return lookup


def build_app(*, allow_link_local: bool = False, lookup: Lookup | None = None) -> web.Application:
    async def handle(request: web.Request, mutate: bool) -> web.Response:
        try:
            body = load_json(await request.read())  # depth-bounded, like every document we read
        except DocumentError:
            return web.json_response({"error": "the body must be an AdmissionReview in JSON"}, status=400)
        if not isinstance(body, dict) or body.get("kind") != "AdmissionReview" or not isinstance(body.get("request"), dict):
            return web.json_response({"error": "expected an AdmissionReview with a request"}, status=400)
        name = named_provider(body["request"]) if lookup is not None and not mutate else None
        found = await lookup(name) if lookup is not None and name else None
        answer = review(body["request"], mutate=mutate, allow_link_local=allow_link_local, provider=found)
        if not answer["allowed"]:
            log.info("denied %s: %s", body["request"].get("kind", {}), answer["status"]["message"])
        return web.json_response({**REVIEW, "response": answer})

    async def validate(request: web.Request) -> web.Response:
        return await handle(request, False)

    async def mutate(request: web.Request) -> web.Response:
        return await handle(request, True)

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app = web.Application(client_max_size=MAX_BODY)
    app.router.add_post("/validate", validate)
    app.router.add_post("/mutate", mutate)
    app.router.add_get("/healthz", healthz)
    return app


async def serve(app: web.Application, host: str, port: int, context: ssl.SSLContext | None) -> web.AppRunner:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port, ssl_context=context).start()
    return runner
