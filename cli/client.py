"""A small client of the apply API, and the commands built on it: apply, get, delete, diff.

Exit codes follow the Airdress CLI: 0 ok, 1 internal, 2 usage, 3 refused (400/404/413/415),
4 auth (401), 5 network (unreachable, 502-504), 6 conflict (409).
"""

from __future__ import annotations

import difflib
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TextIO

import yaml

from cli.config import ClientConfig
from cli.manifests import Document, Unreadable, expand_sources, load_documents
from cli.refs import parse_kind
from contracts import yamlstream
from contracts.admission import admit
from contracts.kinds import KINDS

OK, INTERNAL, USAGE, REFUSED, AUTH, NETWORK, CONFLICT = 0, 1, 2, 3, 4, 5, 6


class ApiError(Exception):
    def __init__(self, status: int, body: dict[str, Any], what: str) -> None:
        self.status = status
        self.body = body
        message = body.get("error") if isinstance(body.get("error"), str) else json.dumps(body)
        super().__init__(f"{what}: {message}")

    @property
    def exit_code(self) -> int:
        if self.status == 401:
            return AUTH
        if self.status == 409:
            return CONFLICT
        if self.status in (502, 503, 504):
            return NETWORK
        if 400 <= self.status < 500:
            return REFUSED
        return INTERNAL


class Unreachable(Exception):
    exit_code = NETWORK  # as ApiError's: a caller reports either the same way


@dataclass
class Api:
    config: ClientConfig
    timeout: float = 30.0

    def call(self, method: str, path: str, body: Any = None, what: str = "request") -> dict[str, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            self.config.api_url + path,
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self.config.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return dict(json.loads(response.read() or b"{}"))
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                parsed = json.loads(raw) if raw else {}
            except ValueError:
                parsed = {"error": raw.decode(errors="replace")[:200]}
            raise ApiError(exc.code, parsed if isinstance(parsed, dict) else {"error": str(parsed)}, what) from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
            reason = getattr(exc, "reason", exc)
            raise Unreachable(f"cannot reach the apply API at {self.config.api_url}: {reason} (is `jetway up` running?)") from None


def _print_refusal(error: ApiError, where: str, err: TextIO) -> None:
    problems = error.body.get("errors")
    if isinstance(problems, list) and problems:
        for problem in problems:
            path = problem.get("path")
            print(f"error: {where}: {path + ': ' if path else ''}{problem.get('message')}", file=err)
    else:
        path = error.body.get("path")
        print(f"error: {where}: {path + ': ' if path else ''}{error.body.get('error', error)}", file=err)


def _documents(files: list[str], err: TextIO) -> list[Document] | None:
    documents: list[Document] = []
    for source in expand_sources(files):
        try:
            found = load_documents(source)
        except Unreadable as exc:
            print(f"error: {exc}", file=err)
            return None
        if not found:
            print(f"error: manifest file {source} contains no documents", file=err)
            return None
        documents += found
    return documents


def _label(result: dict[str, Any]) -> str:
    namespace = result.get("namespace")
    return f"{result['kind']}/{namespace + '/' if namespace and namespace != 'default' else ''}{result['name']}"


def apply(api: Api, files: list[str], *, dry_run: bool, output: str, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """Apply every document in order; stop at the first failure."""
    documents = _documents(files, err)
    if documents is None:
        return USAGE
    applied: list[dict[str, Any]] = []
    query = "?dry-run=true" if dry_run else ""
    for index, doc in enumerate(documents):
        where = f"document #{doc.index} from {doc.source}"
        try:
            result = api.call("POST", f"/v1/apply{query}", doc.body, what="apply manifest")
        except ApiError as exc:
            if output == "json":
                print(json.dumps({"applied": applied, "failed_at_index": index, "error": str(exc), "status": exc.status}), file=out)
            else:
                _print_refusal(exc, where, err)
            return exc.exit_code
        applied.append(result)
        if output != "json":
            action = result["action"].replace("_", " ")
            glyph = "✓" if result["action"] in ("created", "configured") else "→" if result["action"] == "unchanged" else " "
            print(f"{glyph} {_label(result)} {action}".strip(), file=out)
            for warning in result.get("warnings", []):
                print(f"! {_label(result)}: warning: {warning}", file=err)
    if output == "json":
        print(json.dumps({"applied": applied, "dry_run": dry_run}), file=out)
    return OK


def _age(created: str | None) -> str:
    if not created:
        return "-"
    seconds = (datetime.now(UTC) - datetime.fromisoformat(created.replace("Z", "+00:00"))).total_seconds()
    if seconds < 60:
        return "<1m"
    if seconds < 3600:
        return f"{int(seconds // 60)}m"
    if seconds < 48 * 3600:
        return f"{int(seconds // 3600)}h"
    return f"{int(seconds // 86400)}d"


def kube_yaml(view: dict[str, Any]) -> dict[str, Any]:
    """An API ResourceView as `kubectl get -o yaml` users expect it (camelCase metadata)."""
    meta = view["metadata"]
    metadata: dict[str, Any] = {"name": meta["name"]}
    if "namespace" in meta:
        metadata["namespace"] = meta["namespace"]
    renames = {
        "generation": "generation",
        "observed_generation": "observedGeneration",
        "resourceVersion": "resourceVersion",
        "uid": "uid",
        "labels": "labels",
        "annotations": "annotations",
        "created_at": "createdAt",
        "updated_at": "updatedAt",
        "last_reconciled_at": "lastReconciledAt",
    }
    for source, target in renames.items():
        value = meta.get(source)
        if value not in (None, {}, ""):
            metadata[target] = value
    return {"apiVersion": view["apiVersion"], "kind": view["kind"], "metadata": metadata, "spec": view["spec"], "status": view["status"]}


def get(api: Api, kind: str | None, name: str | None, *, namespace: str | None, output: str, out: TextIO = sys.stdout) -> int:
    if kind is None:
        listing = api.call("GET", "/v1/kinds", what="list kinds")
        if output == "json":
            print(json.dumps(listing, indent=2), file=out)
            return OK
        print(f"{'KIND':<26}{'APIVERSION':<24}CONDITIONS", file=out)
        for item in listing["kinds"]:
            print(f"{item['kind']:<26}{item['api_version']:<24}{','.join(item['summary_condition_types'])}", file=out)
        return OK
    info = parse_kind(kind)
    query = f"?namespace={urllib.parse.quote(namespace)}" if namespace else ""
    if name is not None:
        view = api.call("GET", f"/v1/kinds/{info.kind}/{urllib.parse.quote(name, safe='')}{query}", what="read resource")
        if output == "json":
            print(json.dumps(kube_yaml(view), indent=2), file=out)
        else:
            print(yaml.safe_dump(kube_yaml(view), sort_keys=False), end="", file=out)
        return OK
    listing = api.call("GET", f"/v1/kinds/{info.kind}{query}", what="list resources")
    items = listing.get("items", [])
    if output in ("json", "yaml"):
        documents = [kube_yaml(v) for v in items]
        print(json.dumps(documents, indent=2) if output == "json" else yaml.safe_dump_all(documents, sort_keys=False), end="", file=out)
        return OK
    if not items:
        print(f"(no {info.kind} resources)", file=out)
        return OK
    columns = COLUMNS.get(info.kind, COLUMNS["InferencePoolMember"])
    headers = (["NAMESPACE"] if info.namespaced else []) + [c[0] for c in columns]
    rows = [([v["metadata"].get("namespace", "")] if info.namespaced else []) + [str(c[1](v)) for c in columns] for v in items]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    for row in [headers, *rows]:
        print("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip(), file=out)
    return OK


def _condition(view: dict[str, Any], type_: str) -> str:
    return next((c["status"] for c in view["status"].get("conditions", []) if c["type"] == type_), "—")


def _observed(view: dict[str, Any]) -> str:
    observed = view["metadata"].get("observed_generation")
    return "—" if observed is None else str(observed)


COLUMNS: dict[str, list[tuple[str, Any]]] = {
    "InferencePoolMember": [
        ("NAME", lambda v: v["metadata"]["name"]),
        ("GEN", lambda v: v["metadata"]["generation"]),
        ("OBS", _observed),
        ("RV", lambda v: v["metadata"]["resourceVersion"]),
        ("PHASE", lambda v: v["status"].get("phase", "")),
        ("AGE", lambda v: _age(v["metadata"].get("created_at"))),
    ],
    "ModelDeployment": [
        ("NAME", lambda v: v["metadata"]["name"]),
        ("PHASE", lambda v: v["status"].get("phase", "")),
        ("PROVIDER", lambda v: v["status"].get("provider", {}).get("name", "—")),
        ("ENGINE", lambda v: v["status"].get("engine", {}).get("type", "—")),
        ("READY", lambda v: v["status"].get("replicas", {}).get("ready", 0)),
        ("GEN", lambda v: v["metadata"]["generation"]),
        ("OBS", _observed),
        ("AGE", lambda v: _age(v["metadata"].get("created_at"))),
    ],
    "InferenceProviderConfig": [
        ("NAME", lambda v: v["metadata"]["name"]),
        ("READY", lambda v: str(v["status"].get("ready", "—")).lower()),
        ("VERSION", lambda v: v["status"].get("version", "—")),
        ("GEN", lambda v: v["metadata"]["generation"]),
        ("AGE", lambda v: _age(v["metadata"].get("created_at"))),
    ],
    "AgentProviderConfig": [
        ("NAME", lambda v: v["metadata"]["name"]),
        ("READY", lambda v: str(v["status"].get("ready", "—")).lower()),
        ("BACKEND", lambda v: v["spec"]["capabilities"]["backend"]),
        ("GEN", lambda v: v["metadata"]["generation"]),
        ("AGE", lambda v: _age(v["metadata"].get("created_at"))),
    ],
    "AgentDeployment": [
        ("NAME", lambda v: v["metadata"]["name"]),
        ("FRAMEWORK", lambda v: v["spec"]["framework"]["name"]),
        ("PHASE", lambda v: v["status"].get("phase", "")),
        ("READY", lambda v: _condition(v, "Ready")),
        ("GEN", lambda v: v["metadata"]["generation"]),
        ("AGE", lambda v: _age(v["metadata"].get("created_at"))),
    ],
}


def console_login(api: Api, out: TextIO = sys.stdout) -> int:
    """A one-time login link for the web console (docs/console.md): the API token stays in jetway.json."""
    issued = api.call("POST", "/v1/console/codes", what="ask for a console login code")
    minutes = int(issued.get("expires_in", 600)) // 60
    print(f"# one-time login link for the Jetway console, valid {minutes} minutes:", file=out)
    print(issued["url"], file=out)
    return OK


def objects(api: Api, kind: str, name: str, *, namespace: str | None, out: TextIO = sys.stdout) -> int:
    """The objects the running Jetway recorded for a resource, as a YAML stream."""
    info = parse_kind(kind)
    query = f"?namespace={urllib.parse.quote(namespace)}" if namespace else ""
    found = api.call("GET", f"/v1/kinds/{info.kind}/{urllib.parse.quote(name, safe='')}/objects{query}", what="read objects")
    # the text the console's deployment page shows (GET /v1/console/rendered/...), byte for byte
    print(yamlstream.recorded(info.kind, name, found["objects"]), end="", file=out)
    return OK


def delete(api: Api, kind: str, name: str, *, namespace: str | None, out: TextIO = sys.stdout) -> int:
    info = parse_kind(kind)
    query = f"?namespace={urllib.parse.quote(namespace)}" if namespace else ""
    result = api.call("DELETE", f"/v1/kinds/{info.kind}/{urllib.parse.quote(name, safe='')}{query}", what="delete resource")
    suffix = "deleted" if result["action"] == "deleted" else "noop (not found)"
    print(f"✓ {info.kind}/{name} {suffix}", file=out)
    return OK


def delete_files(api: Api, files: list[str], *, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    documents = _documents(files, err)
    if documents is None:
        return USAGE
    for doc in documents:
        body: dict[str, Any] = doc.body if isinstance(doc.body, dict) else {}
        meta: dict[str, Any] = body["metadata"] if isinstance(body.get("metadata"), dict) else {}
        if not isinstance(body.get("kind"), str) or not isinstance(meta.get("name"), str):
            print(f"error: document #{doc.index} in {doc.source}: missing 'kind' or 'metadata.name'", file=err)
            return USAGE
        code = delete(api, body["kind"], meta["name"], namespace=meta.get("namespace"), out=out)
        if code:
            return code
    return OK


def diff(api: Api, files: list[str], *, out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """What applying would change: a dry run on the server, and the spec as a unified diff."""
    documents = _documents(files, err)
    if documents is None:
        return USAGE
    differs = False
    for doc in documents:
        where = f"document #{doc.index} from {doc.source}"
        try:
            result = api.call("POST", "/v1/apply?dry-run=true", doc.body, what="diff manifest")
        except ApiError as exc:
            _print_refusal(exc, where, err)
            return exc.exit_code
        if result["action"] == "unchanged":
            print(f"→ {_label(result)} unchanged", file=out)
            continue
        differs = True
        verdict = admit(doc.body)
        new = verdict.obj.wire() if verdict.obj is not None else doc.body
        info = KINDS[result["kind"]]
        query = f"?namespace={urllib.parse.quote(result['namespace'])}" if result.get("namespace") else ""
        try:
            current = api.call("GET", f"/v1/kinds/{info.kind}/{urllib.parse.quote(result['name'], safe='')}{query}", what="read")
            old = {"metadata": {"labels": current["metadata"].get("labels") or {}}, "spec": current["spec"]}
        except ApiError:
            old = {}
        fresh = {"metadata": {"labels": new.get("metadata", {}).get("labels") or {}}, "spec": new.get("spec", {})}
        before = yaml.safe_dump(old, sort_keys=True).splitlines(keepends=True) if old else []
        after = yaml.safe_dump(fresh, sort_keys=True).splitlines(keepends=True)
        label = _label(result)
        out.writelines(difflib.unified_diff(before, after, f"{label} (stored)", f"{label} ({doc.source})"))
    return 1 if differs else OK
