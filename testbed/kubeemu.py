"""A Kubernetes API emulator over real HTTP on 127.0.0.1, for tests (no kube-apiserver installs here).

What it does as a real API server does (tests/kube/test_emulator.py checks each, and runs the
same checks against a real cluster when KUBECONFIG is set):

- one global resourceVersion counter; `409 Conflict` on an update with a stale one;
- uid, creationTimestamp; `generation` bumped when anything but metadata and status changes;
- the status subresource apart from the main resource (each ignores the other's changes);
- create, get, list, update (PUT), delete; merge, strategic-merge (as merge) and JSON patch;
- server-side apply with field managers: ownership per field (list-maps merged by key),
  conflicts without `force`, fields a manager stops applying are removed;
- label selectors (equality and set-based) on list and watch;
- list-then-watch from a resourceVersion, bookmarks, `410 Gone` (an ERROR event) for a version
  older than the retained history;
- finalizers and `deletionTimestamp`; owner-reference garbage collection (background);
- discovery that changes when a CustomResourceDefinition is added or removed;
- custom resources defaulted and validated against their CRD's schema, CEL rules included;
- the size limits: a request body of 3 MiB (413), annotations of 256 KiB and a ConfigMap's or
  Secret's data of 1 MiB (422), an object of ~1.5 MiB in etcd (500; measured here on its JSON,
  which etcd's protobuf is close to for the big strings that reach it);
- metadata-only reads (`Accept: application/json;as=PartialObjectMetadata[List];g=meta.k8s.io;v=v1`),
  down to a real server's quirks: a list asking for the object form is 406, a watch asking for the
  List form an empty stream, an empty PartialObjectMetadataList has `"items": null`.

Test hooks: `drop_watches()` cuts every open watch, `compact()` forgets history (the next
watch from an old version gets 410), `requests` counts mutating calls per field manager.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextvars
import copy
import json
import re
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from testbed.crdschema import validate_resource

_FIELD_VALIDATION: contextvars.ContextVar[str] = contextvars.ContextVar("field_validation", default="Warn")
_WARNINGS: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("warnings", default=None)

Obj = dict[str, Any]
Path = tuple[Any, ...]
LIST_MAP_KEYS = {
    "conditions": "type",
    "containers": "name",
    "initContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "ownerReferences": "uid",
    "ports": "name",
    "listeners": "name",
    "addresses": "value",
    "webhooks": "name",
}
SET_LISTS = {"finalizers"}
MAX_BODY = 3 * 1024 * 1024  # kube-apiserver's limit on a request body
MAX_ANNOTATIONS = 256 * 1024  # keys and values together
MAX_DATA = 1024 * 1024  # a ConfigMap's or Secret's values
MAX_STORED = 1536 * 1024  # etcd's --max-request-bytes default
META_GROUP = "meta.k8s.io"
META_VERSIONS = ("v1", "v1beta1")
MEDIA_TYPES = "application/json, application/yaml, application/vnd.kubernetes.protobuf"
IDENTITY = {"apiVersion", "kind"}
META_IDENTITY = {
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "managedFields",
    "selfLink",
    "generateName",
    "deletionGracePeriodSeconds",
}


@dataclass
class Kind:
    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    status: bool = True  # a status subresource
    crd: Obj | None = None  # the CRD that defines it (for validation)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


BUILTIN = [
    Kind("", "v1", "Namespace", "namespaces", False),
    Kind("", "v1", "Pod", "pods", True),
    Kind("", "v1", "Service", "services", True),
    Kind("", "v1", "Secret", "secrets", True, status=False),
    Kind("", "v1", "ConfigMap", "configmaps", True, status=False),
    Kind("", "v1", "ServiceAccount", "serviceaccounts", True, status=False),
    Kind("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims", True),
    Kind("", "v1", "Event", "events", True, status=False),
    Kind("apps", "v1", "Deployment", "deployments", True),
    Kind("batch", "v1", "Job", "jobs", True),
    Kind("rbac.authorization.k8s.io", "v1", "Role", "roles", True, status=False),
    Kind("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", True, status=False),
    Kind("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles", False, status=False),
    Kind("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", "clusterrolebindings", False, status=False),
    Kind("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", False),
    Kind("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration", "validatingwebhookconfigurations", False, status=False),
    Kind("admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration", "mutatingwebhookconfigurations", False, status=False),
    Kind("coordination.k8s.io", "v1", "Lease", "leases", True, status=False),
]


class Refused(Exception):
    def __init__(self, code: int, reason: str, message: str, causes: list[Obj] | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.causes = code, reason, message, causes or []

    def status(self) -> Obj:
        body: Obj = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": self.message, "code": self.code}
        if self.reason:  # an etcd error reaches the client with none
            body["reason"] = self.reason
        if self.causes:
            body["details"] = {"causes": self.causes}
        return body


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- field paths, for server-side apply --------------------------------------------------------


def leaves(value: Any, prefix: Path = ()) -> dict[Path, Any]:
    """Every leaf of an object as path → value; list-maps keyed, set-lists by value, other lists atomic."""
    if isinstance(value, dict):
        if not value and prefix:
            return {prefix: {}}
        out: dict[Path, Any] = {}
        for key, item in value.items():
            out.update(leaves(item, (*prefix, key)))
        return out
    name = prefix[-1] if prefix else None
    if isinstance(value, list) and name in LIST_MAP_KEYS and all(isinstance(i, dict) and LIST_MAP_KEYS[name] in i for i in value) and value:
        key = LIST_MAP_KEYS[name]
        out = {}
        for item in value:
            out.update(leaves(item, (*prefix, ("@", key, item[key]))))
        return out
    if isinstance(value, list) and name in SET_LISTS:
        return {(*prefix, ("#", item)): True for item in value}
    return {prefix: value}


def _child(container: Any, part: Any, create: bool) -> Any:
    if isinstance(part, tuple) and part[0] == "@":
        for item in container:
            if item.get(part[1]) == part[2]:
                return item
        if not create:
            return None
        item = {part[1]: part[2]}
        container.append(item)
        return item
    if part not in container:
        if not create:
            return None
        container[part] = {}
    return container[part]


def set_at(obj: Obj, path: Path, value: Any) -> None:
    node: Any = obj
    for i, part in enumerate(path[:-1]):
        following = path[i + 1]
        if isinstance(node, dict) and part not in node:
            node[part] = [] if isinstance(following, tuple) else {}
        node = _child(node, part, True)
    last = path[-1]
    if isinstance(last, tuple) and last[0] == "#":
        if last[1] not in node:
            node.append(last[1])
    elif isinstance(last, tuple) and last[0] == "@":
        _child(node, last, True)
    else:
        node[last] = copy.deepcopy(value)


def get_at(obj: Obj, path: Path) -> Any:
    node: Any = obj
    for part in path:
        if isinstance(part, tuple) and part[0] == "#":
            return True if isinstance(node, list) and part[1] in node else None
        if node is None or not isinstance(node, dict | list):
            return None
        node = _child(node, part, False) if isinstance(part, tuple) or isinstance(node, dict) else None
    return node


def remove_at(obj: Obj, path: Path) -> None:
    parents: list[tuple[Any, Any]] = []
    node: Any = obj
    for part in path[:-1]:
        if node is None:
            return
        parents.append((node, part))
        node = _child(node, part, False)
    if node is None:
        return
    last = path[-1]
    if isinstance(last, tuple) and last[0] == "#":
        if last[1] in node:
            node.remove(last[1])
    elif isinstance(last, tuple) and last[0] == "@":
        node[:] = [i for i in node if i.get(last[1]) != last[2]]
    elif isinstance(node, dict):
        node.pop(last, None)
    for container, part in reversed(parents):  # prune emptied parents, as the server does for applied fields
        child = _child(container, part, False)
        if child in ({}, []) and isinstance(container, dict):
            container.pop(part, None)
        elif child == {} and isinstance(part, tuple):
            continue
        else:
            break


def _at_path(obj: Any, path: str) -> Any:
    """The value at a field path as validation errors name it (`spec.volumes[0].name`)."""
    node = obj
    for part in re.findall(r"[^.\[\]]+", path):
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        elif isinstance(node, dict):
            node = node.get(part)
        else:
            return None
    return node


def _decoded(value: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return value.encode()


def metadata_form(accept: str) -> tuple[str, str] | None:
    """The PartialObjectMetadata form (kind, version) an Accept header asks for, None for whole objects; the
    first media range a server can answer decides, as a real one negotiates."""
    if not accept.strip():
        return None
    for media_range in accept.split(","):
        media, *rest = (part.strip() for part in media_range.split(";"))
        if media not in ("application/json", "application/*", "*/*"):
            continue
        params = dict(p.split("=", 1) for p in rest if "=" in p)
        form = params.get("as")
        if form is None:
            return None
        known = form in ("PartialObjectMetadata", "PartialObjectMetadataList")
        if known and params.get("g") == META_GROUP and params.get("v") in META_VERSIONS:
            return form, params["v"]
        raise Refused(406, "NotAcceptable", f"only the following media types are accepted: {MEDIA_TYPES}")
    raise Refused(406, "NotAcceptable", f"406: Not Acceptable\n\nAvailable representations: {MEDIA_TYPES}")


def partial(obj: Obj, version: str) -> Obj:
    return {"kind": "PartialObjectMetadata", "apiVersion": f"{META_GROUP}/{version}", "metadata": copy.deepcopy(obj["metadata"])}


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def json_patch(target: Obj, ops: list[Obj]) -> Obj:
    doc = copy.deepcopy(target)
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].lstrip("/").split("/")]
        parent: Any = doc
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent[part]
        last = parts[-1]
        kind = op["op"]
        if kind == "test":
            current = parent[int(last)] if isinstance(parent, list) else parent.get(last)
            if current != op["value"]:
                raise Refused(422, "Invalid", f"test operation failed at {op['path']}")
        elif kind in ("add", "replace"):
            if isinstance(parent, list):
                index = len(parent) if last == "-" else int(last)
                if kind == "add":
                    parent.insert(index, op["value"])
                else:
                    parent[index] = op["value"]
            else:
                parent[last] = op["value"]
        elif kind == "remove":
            if isinstance(parent, list):
                parent.pop(int(last))
            else:
                parent.pop(last)
        else:
            raise Refused(400, "BadRequest", f"unsupported JSON patch op {kind!r}")
    return doc


_SELECTOR = re.compile(r"\s*(!?)([\w./-]+)\s*(?:(=|==|!=)\s*([\w./-]*)|\s+(in|notin)\s*\(([^)]*)\))?\s*")


def matches(labels: dict[str, str], selector: str | None) -> bool:
    if not selector:
        return True
    requirements = re.findall(r"(?:[^,(]|\([^)]*\))+", selector)
    for requirement in requirements:
        found = _SELECTOR.fullmatch(requirement)
        if not found:
            raise Refused(400, "BadRequest", f"unable to parse requirement: {requirement!r}")
        negate, key, op, value, set_op, values = found.groups()
        if op in ("=", "=="):
            ok = labels.get(key) == value
        elif op == "!=":
            ok = labels.get(key) != value
        elif set_op:
            options = {v.strip() for v in values.split(",")}
            ok = (labels.get(key) in options) if set_op == "in" else (labels.get(key) not in options)
        else:
            ok = (key not in labels) if negate else (key in labels)
        if not ok:
            return False
    return True


@dataclass
class Watcher:
    kind: Kind
    namespace: str | None
    selector: str | None
    queue: asyncio.Queue[Obj | None] = field(default_factory=asyncio.Queue)


@dataclass
class KubeEmulator:
    history_limit: int = 5000
    bookmark_interval: float = 1.0
    kinds: dict[tuple[str, str], Kind] = field(default_factory=dict)  # (group, plural) → kind
    objects: dict[tuple[str, str, str, str], Obj] = field(default_factory=dict)  # (group, plural, namespace, name)
    managers: dict[tuple[str, str, str, str], dict[str, set[Path]]] = field(default_factory=dict)
    log: list[tuple[int, str, Kind, Obj]] = field(default_factory=list)
    watchers: list[Watcher] = field(default_factory=list)
    requests: Counter[str] = field(default_factory=Counter)
    # every call as a real server's apiserver_request_total labels it: (verb, resource, subresource)
    calls: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    rv: int = 1000
    oldest: int = 1000
    url: str = ""
    _runner: web.AppRunner | None = None

    def __post_init__(self) -> None:
        self.forbidden: set[tuple[str, str]] = set()  # (method, kind) answered 403, as a missing RBAC rule would
        self.watches_open = asyncio.Event()
        self.watches_open.set()
        for kind in BUILTIN:
            self.kinds[(kind.group, kind.plural)] = kind

    # --- the store -------------------------------------------------------------------------

    def _key(self, kind: Kind, namespace: str, name: str) -> tuple[str, str, str, str]:
        return (kind.group, kind.plural, namespace if kind.namespaced else "", name)

    def _bump(self) -> str:
        self.rv += 1
        return str(self.rv)

    def _emit(self, kind_type: str, kind: Kind, obj: Obj) -> None:
        snapshot = copy.deepcopy(obj)
        self.log.append((int(obj["metadata"]["resourceVersion"]), kind_type, kind, snapshot))
        if len(self.log) > self.history_limit:
            self.oldest = self.log[0][0]
            del self.log[: len(self.log) - self.history_limit]
        for watcher in self.watchers:
            if self._visible(watcher, kind, snapshot):
                watcher.queue.put_nowait({"type": kind_type, "object": snapshot})

    @staticmethod
    def _visible(watcher: Watcher, kind: Kind, obj: Obj) -> bool:
        meta = obj["metadata"]
        return (
            (watcher.kind.group, watcher.kind.plural) == (kind.group, kind.plural)  # a CRD's kind is served anew on each change
            and (watcher.namespace is None or meta.get("namespace") == watcher.namespace)
            and matches(meta.get("labels") or {}, watcher.selector)
        )

    def _schema_check(self, kind: Kind, obj: Obj, old: Obj | None) -> Obj:
        if kind.crd is None:
            return obj
        strict = _FIELD_VALIDATION.get() == "Strict"
        pruned: list[str] | None = None if strict else []
        defaulted, errors = validate_resource(obj, kind.crd, old, pruned=pruned)
        errors = [e for e in errors if not e.startswith("metadata")]
        unknown = [e.split(":", 1)[0] for e in errors if e.endswith(": unknown field")]
        if unknown:  # strict field validation: a 400 naming them, as the server's strict decoder answers
            raise Refused(400, "BadRequest", "strict decoding error: " + ", ".join(f'unknown field "{u}"' for u in unknown))
        warnings = _WARNINGS.get()
        if pruned and warnings is not None and _FIELD_VALIDATION.get() != "Ignore":  # the default, Warn: pruned, and said
            warnings += [f'unknown field "{p}"' for p in pruned]
        if old is not None:  # ratcheting, as API servers do since 1.30: a value left as it was is not judged again
            errors = [e for e in errors if _at_path(obj, e.split(":", 1)[0]) != _at_path(old, e.split(":", 1)[0])]
        if errors:
            name = obj["metadata"].get("name", "")
            raise Refused(
                422,
                "Invalid",
                f'{kind.kind} "{name}" is invalid: {"; ".join(errors)}',
                [{"field": e.split(":", 1)[0], "message": e.split(":", 1)[-1].strip()} for e in errors],
            )
        return defaulted

    @staticmethod
    def _content(obj: Obj) -> Obj:
        return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}

    @staticmethod
    def _check_size(kind: Kind, obj: Obj) -> None:
        """What a real server refuses by size: validation first (422), then etcd (500)."""
        invalid = f'{kind.kind} "{obj["metadata"].get("name", "")}" is invalid'
        annotations = obj["metadata"].get("annotations") or {}
        if sum(len(k) + len(v) for k, v in annotations.items()) > MAX_ANNOTATIONS:
            raise Refused(422, "Invalid", f"{invalid}: metadata.annotations: Too long: may not be more than {MAX_ANNOTATIONS} bytes")
        if kind.group == "" and kind.kind in ("ConfigMap", "Secret"):
            text, encoded = ("data", "binaryData") if kind.kind == "ConfigMap" else ("stringData", "data")
            size = sum(len(v.encode()) for v in (obj.get(text) or {}).values())
            size += sum(len(_decoded(v)) for v in (obj.get(encoded) or {}).values())
            if size > MAX_DATA:
                where = "[]" if kind.kind == "ConfigMap" else "data"  # as a real server names them
                raise Refused(422, "Invalid", f"{invalid}: {where}: Too long: may not be more than {MAX_DATA} bytes")
        if len(json.dumps(obj, separators=(",", ":"))) > MAX_STORED:
            raise Refused(500, "", "etcdserver: request is too large")

    def _store(self, kind: Kind, obj: Obj, old: Obj | None, event: str) -> Obj:
        meta = obj["metadata"]
        meta["resourceVersion"] = self._bump()
        if old is not None and self._content(old) != self._content(obj):
            meta["generation"] = old["metadata"].get("generation", 1) + 1
        key = self._key(kind, meta.get("namespace", ""), meta["name"])
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            self.objects.pop(key, None)
            self.managers.pop(key, None)
            self._emit("DELETED", kind, obj)
            self._collect(kind, meta["uid"])
            self._crd_gone(kind, obj)
            return obj
        self.objects[key] = obj
        self._emit(event, kind, obj)
        if kind.kind == "CustomResourceDefinition" and (old is None or old.get("spec") != obj.get("spec")):
            self._register_crd(obj)
        return obj

    def _register_crd(self, crd: Obj) -> None:
        spec = crd["spec"]
        for version in spec["versions"]:
            if version.get("served", True):
                subresources = version.get("subresources") or {}
                self._end_watches(self.kinds.get((spec["group"], spec["names"]["plural"])))
                self.kinds[(spec["group"], spec["names"]["plural"])] = Kind(
                    spec["group"],
                    version["name"],
                    spec["names"]["kind"],
                    spec["names"]["plural"],
                    spec["scope"] == "Namespaced",
                    status="status" in subresources,
                    crd=crd,
                )

    def _crd_gone(self, kind: Kind, obj: Obj) -> None:
        if kind.kind == "CustomResourceDefinition":
            self._end_watches(self.kinds.pop((obj["spec"]["group"], obj["spec"]["names"]["plural"]), None))

    def _end_watches(self, kind: Kind | None) -> None:
        """End the open watches on a custom resource, as a real server does when its CRD's spec changes
        (the kind is served anew) or the CRD goes; clients watch again from the last version they saw."""
        for watcher in self.watchers:
            if kind is not None and watcher.kind is kind:
                watcher.queue.put_nowait(None)

    def _collect(self, owner: Kind, uid: str) -> None:
        """Background garbage collection: dependents of a removed owner go too; a cluster-scoped one of a
        namespaced owner stays, as a real collector leaves it (an invalid reference: OwnerRefInvalidNamespace)."""
        for key, obj in list(self.objects.items()):
            owners = obj["metadata"].get("ownerReferences") or []
            if any(o.get("uid") == uid for o in owners) and key in self.objects:
                kind = self.kinds.get((key[0], key[1]))
                if kind is not None and (kind.namespaced or not owner.namespaced):
                    self.delete(kind, key[2], key[3])

    def _assign(self, key: tuple[str, str, str, str], manager: str, obj: Obj, status_only: bool, old: Obj | None = None) -> None:
        """An update's manager takes over the fields it set or changed; unchanged fields keep their owners."""
        owned = self.managers.setdefault(key, {})
        found = leaves(self._managed_view(obj, status_only, True))
        fields = {p for p, v in found.items() if old is None or get_at(old, p) != v}
        for other in owned:
            if other != manager:
                owned[other] -= fields
        owned[manager] = owned.get(manager, set()) | fields

    @staticmethod
    def _managed_view(obj: Obj, status_only: bool, without_status: bool) -> Obj:
        if status_only:
            return {"status": obj.get("status", {})}
        view = {k: v for k, v in obj.items() if k not in IDENTITY and k != "metadata" and not (without_status and k == "status")}
        meta = {k: v for k, v in obj.get("metadata", {}).items() if k not in META_IDENTITY}
        if meta:
            view["metadata"] = meta
        return view

    def _expose_managers(self, key: tuple[str, str, str, str], obj: Obj) -> None:
        owned = self.managers.get(key, {})
        obj["metadata"]["managedFields"] = [
            {"manager": m, "operation": "Apply", "apiVersion": obj.get("apiVersion")} for m, fields in sorted(owned.items()) if fields
        ]

    # --- verbs -----------------------------------------------------------------------------

    def get(self, kind: Kind, namespace: str, name: str) -> Obj:
        obj = self.objects.get(self._key(kind, namespace, name))
        if obj is None:
            raise Refused(404, "NotFound", f'{kind.plural}.{kind.group or "core"} "{name}" not found')
        return obj

    def create(self, kind: Kind, namespace: str, body: Obj, manager: str) -> Obj:
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            if meta.get("generateName"):
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
            else:
                raise Refused(422, "Invalid", "metadata.name: Required value: name or generateName is required")
        if kind.namespaced:
            meta["namespace"] = namespace or meta.get("namespace") or "default"
        else:
            meta.pop("namespace", None)
        if self._key(kind, meta.get("namespace", ""), meta["name"]) in self.objects:
            raise Refused(409, "AlreadyExists", f'{kind.plural} "{meta["name"]}" already exists')
        obj["apiVersion"], obj["kind"] = kind.api_version, kind.kind
        if kind.status:
            obj.pop("status", None)
        obj = self._schema_check(kind, obj, None)
        meta = obj["metadata"]
        meta.update({"uid": str(uuid.uuid4()), "creationTimestamp": now(), "generation": 1})
        for drop in ("resourceVersion", "deletionTimestamp", "managedFields"):
            meta.pop(drop, None)
        self._check_size(kind, obj)
        key = self._key(kind, meta.get("namespace", ""), meta["name"])
        self._assign(key, manager, obj, False)
        stored = self._store(kind, obj, None, "ADDED")
        self._expose_managers(key, stored)
        return stored

    def update(self, kind: Kind, namespace: str, name: str, body: Obj, manager: str, subresource: str | None) -> Obj:
        old = self.get(kind, namespace, name)
        given = body.get("metadata", {}).get("resourceVersion")
        if given and given != old["metadata"]["resourceVersion"]:
            raise Refused(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {kind.plural} "{name}": the object has been modified; '
                "please apply your changes to the latest version and try again",
            )
        return self._write(kind, old, copy.deepcopy(body), manager, subresource)

    def _write(self, kind: Kind, old: Obj, new: Obj, manager: str, subresource: str | None) -> Obj:
        meta_old = old["metadata"]
        if subresource == "status":
            merged = copy.deepcopy(old)
            merged["status"] = new.get("status", {})
            new = merged
        else:
            new.setdefault("metadata", {})
            for keep in ("uid", "creationTimestamp", "generation", "deletionTimestamp", "namespace", "name"):
                if keep in meta_old:
                    new["metadata"][keep] = meta_old[keep]
                else:
                    new["metadata"].pop(keep, None)
            if kind.status:
                if "status" in old:
                    new["status"] = old["status"]
                else:
                    new.pop("status", None)
        new["apiVersion"], new["kind"] = kind.api_version, kind.kind
        new = self._schema_check(kind, new, old)
        self._check_size(kind, new)
        key = self._key(kind, meta_old.get("namespace", ""), meta_old["name"])
        self._assign(key, manager, new, subresource == "status", old)
        stored = self._store(kind, new, old, "MODIFIED")
        self._expose_managers(key, stored)
        return stored

    def patch(self, kind: Kind, namespace: str, name: str, patch: Any, content_type: str, query: Any, subresource: str | None) -> Obj:
        manager = query.get("fieldManager") or "unknown"
        if content_type == "application/apply-patch+yaml":
            return self.apply(kind, namespace, name, patch, manager, query.get("force") == "true", subresource)
        old = self.get(kind, namespace, name)
        if content_type == "application/json-patch+json":
            new = json_patch(old, patch)
        elif content_type in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
            new = merge_patch(old, patch)
        else:
            raise Refused(415, "UnsupportedMediaType", f"the body of the request was in an unknown format: {content_type}")
        given = (patch.get("metadata") or {}).get("resourceVersion") if isinstance(patch, dict) else None
        if given and given != old["metadata"]["resourceVersion"]:
            raise Refused(409, "Conflict", f'Operation cannot be fulfilled on {kind.plural} "{name}": the object has been modified')
        return self._write(kind, old, new, manager, subresource)

    def apply(self, kind: Kind, namespace: str, name: str, applied: Obj, manager: str, force: bool, subresource: str | None) -> Obj:
        key = self._key(kind, namespace, name)
        existing = self.objects.get(key)
        applied = copy.deepcopy(applied)
        status_only = subresource == "status"
        if existing is None:
            if status_only:
                raise Refused(404, "NotFound", f'{kind.plural} "{name}" not found')
            applied.setdefault("metadata", {})["name"] = name
            created = self.create(kind, namespace, applied, manager)
            return created
        view = self._managed_view(applied, status_only, kind.status)
        wanted = leaves(view)
        owned = self.managers.setdefault(key, {})
        conflicts = sorted(
            {
                str(p)
                for other, fields in owned.items()
                if other != manager
                for p in fields & set(wanted)
                if get_at(existing, p) != wanted[p] and not isinstance(p[-1], tuple)
            }
        )
        if conflicts and not force:
            raise Refused(409, "Conflict", f"Apply failed with {len(conflicts)} conflict(s): {', '.join(conflicts)}")
        new = copy.deepcopy(existing)
        previous = owned.get(manager, set())
        others = set().union(*(f for m, f in owned.items() if m != manager)) if len(owned) > 1 else set()
        scope = ("status",) if status_only else None
        for path in previous - set(wanted):
            if path not in others and (scope is None) == (path[:1] != ("status",)):
                remove_at(new, path)
        for path, value in wanted.items():
            set_at(new, path, value)
        new = self._schema_check(kind, new, existing)
        self._check_size(kind, new)  # before the managers change: a refused apply owns nothing
        changed = {p for p in wanted if get_at(existing, p) != wanted[p]}
        for other in owned:
            if other != manager:
                owned[other] -= changed  # a field applied with the value it has is shared, not taken
        kept = {p for p in previous if (p[:1] == ("status",)) != status_only}  # what this manager owns in the other scope
        owned[manager] = kept | set(wanted)
        if new == existing:
            return existing  # a no-op apply writes nothing and moves no version
        stored = self._store(kind, new, existing, "MODIFIED")
        self._expose_managers(key, stored)
        return stored

    def delete(self, kind: Kind, namespace: str, name: str) -> Obj:
        obj = self.get(kind, namespace, name)
        meta = obj["metadata"]
        if meta.get("finalizers"):
            if not meta.get("deletionTimestamp"):
                updated = copy.deepcopy(obj)
                updated["metadata"]["deletionTimestamp"] = now()
                return self._store(kind, updated, obj, "MODIFIED")
            return obj
        updated = copy.deepcopy(obj)
        updated["metadata"]["deletionTimestamp"] = now()
        return self._store(kind, updated, obj, "DELETED")

    def items(self, kind: Kind, namespace: str | None, selector: str | None) -> list[Obj]:
        return [
            o
            for (g, p, ns, _), o in sorted(self.objects.items())
            if (g, p) == (kind.group, kind.plural)
            and (namespace is None or ns == namespace)
            and matches(o["metadata"].get("labels") or {}, selector)
        ]

    # --- test hooks ------------------------------------------------------------------------

    def hold_watches(self) -> None:
        """Drop every watch and keep new ones waiting until `release_watches` (a network partition)."""
        self.watches_open.clear()
        self.drop_watches()

    def release_watches(self) -> None:
        self.watches_open.set()

    def writes_to(self, kind: str, name: str) -> int:
        """How many times an object was stored (created or changed): no-op writes do not count, as on a real server."""
        return sum(1 for _, t, k, o in self.log if k.kind == kind and o["metadata"]["name"] == name and t in ("ADDED", "MODIFIED"))

    def drop_watches(self) -> None:
        for watcher in self.watchers:
            watcher.queue.put_nowait(None)

    def compact(self) -> None:
        self.log.clear()
        self.oldest = self.rv

    def store_unchecked(self, obj: Obj) -> Obj:
        """Store an object as an older schema would have let it in (the CRD's rules of today are not applied)."""
        group, _, version = obj["apiVersion"].rpartition("/")
        kind = next(k for k in self.kinds.values() if (k.group, k.version, k.kind) == (group, version, obj["kind"]))
        saved, kind.crd = kind.crd, None
        try:
            return self.create(kind, obj["metadata"].get("namespace", ""), obj, "test")
        finally:
            kind.crd = saved

    def install(self, crd: Obj) -> Obj:
        """Add a CRD directly (a test's kubectl apply)."""
        kind = self.kinds[("apiextensions.k8s.io", "customresourcedefinitions")]
        return self.create(kind, "", crd, "test")

    # --- HTTP ------------------------------------------------------------------------------

    def _discovery(self, group: str, version: str) -> Obj:
        resources = []
        for kind in self.kinds.values():
            if (kind.group, kind.version) == (group, version):
                verbs = ["create", "delete", "get", "list", "patch", "update", "watch"]
                resources.append(
                    {
                        "name": kind.plural,
                        "singularName": kind.kind.lower(),
                        "namespaced": kind.namespaced,
                        "kind": kind.kind,
                        "verbs": verbs,
                    }
                )
                if kind.status:
                    resources.append(
                        {
                            "name": f"{kind.plural}/status",
                            "singularName": "",
                            "namespaced": kind.namespaced,
                            "kind": kind.kind,
                            "verbs": ["get", "patch", "update"],
                        }
                    )
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": resources,
        }

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        # each request runs in a task of its own: its field validation and its warnings are its own too
        _FIELD_VALIDATION.set(request.query.get("fieldValidation") or "Warn")
        warnings: list[str] = []
        _WARNINGS.set(warnings)
        try:
            response = await self._route(request)
            for warning in warnings:
                response.headers.add("Warning", f'299 - "{warning}"')
            return response
        except Refused as refusal:
            return web.json_response(refusal.status(), status=refusal.code)
        except (ValueError, KeyError, TypeError) as exc:
            return web.json_response(Refused(400, "BadRequest", f"bad request: {exc}").status(), status=400)

    async def _route(self, request: web.Request) -> web.StreamResponse:
        path = request.path.rstrip("/")
        parts = path.strip("/").split("/")
        if path == "/version":
            return web.json_response({"major": "1", "minor": "37", "gitVersion": "v1.37.0-jetway-emulator"})
        if path == "/api":
            return web.json_response({"kind": "APIVersions", "versions": ["v1"]})
        if path == "/apis":
            groups: dict[str, set[str]] = {}
            for kind in self.kinds.values():
                if kind.group:
                    groups.setdefault(kind.group, set()).add(kind.version)
            listed = [
                {
                    "name": g,
                    "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in sorted(vs)],
                    "preferredVersion": {"groupVersion": f"{g}/{sorted(vs)[0]}", "version": sorted(vs)[0]},
                }
                for g, vs in sorted(groups.items())
            ]
            return web.json_response({"kind": "APIGroupList", "apiVersion": "v1", "groups": listed})
        if parts[0] == "api":
            group, version, rest = "", parts[1], parts[2:]
        elif parts[0] == "apis" and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise Refused(404, "NotFound", f"the server could not find the requested resource ({path})")
        if not rest:
            if not any((k.group, k.version) == (group, version) for k in self.kinds.values()):
                raise Refused(404, "NotFound", f"the server could not find the requested resource ({path})")
            return web.json_response(self._discovery(group, version))
        namespace = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        plural = rest[0]
        found = self.kinds.get((group, plural))
        if found is None or found.version != version:
            raise Refused(404, "NotFound", f"the server could not find the requested resource ({path})")
        kind = found
        name = rest[1] if len(rest) > 1 else None
        subresource = rest[2] if len(rest) > 2 else None
        if subresource not in (None, "status") or (subresource == "status" and not kind.status):
            raise Refused(404, "NotFound", f"the server could not find the requested resource ({path})")
        ns = namespace or ""
        query = request.query
        method = request.method
        if (method, kind.kind) in self.forbidden and not (len(rest) > 2 and rest[2] == "status"):
            raise Refused(
                403,
                "Forbidden",
                f'{kind.plural}.{kind.group or "core"} "{rest[1] if len(rest) > 1 else ""}" is forbidden: the test took away {method}',
            )
        if method != "GET":
            self.requests[query.get("fieldManager") or method] += 1
        verb = method if method != "GET" else ("GET" if name else "WATCH" if query.get("watch") in ("1", "true") else "LIST")
        self.calls[(verb, kind.plural, subresource or "")] += 1
        form = metadata_form(request.headers.get("Accept", "")) if method == "GET" else None
        if method == "GET" and name is None:
            if query.get("watch") in ("1", "true"):
                self.requests[f"watch {kind.kind}"] += 1
                await self.watches_open.wait()  # a test holding watches back: changes pile up meanwhile
                return await self._watch(request, kind, namespace, form)
            self.requests[f"list {kind.kind}"] += 1
            if form is not None and form[0] == "PartialObjectMetadata":
                raise Refused(
                    406, "NotAcceptable", f"you requested PartialObjectMetadata, but the requested object is a list (*{kind.kind}List)"
                )
            items = self.items(kind, namespace if kind.namespaced else None, query.get("labelSelector"))
            at = {"resourceVersion": str(self.rv)}
            if form is not None:
                partials = [partial(o, form[1]) for o in items] or None  # null, not [], as a real server sends
                return web.json_response(
                    {"kind": "PartialObjectMetadataList", "apiVersion": f"{META_GROUP}/{form[1]}", "metadata": at, "items": partials}
                )
            # a real server's list items carry no apiVersion or kind (the list says them once)
            bare = [{k: v for k, v in o.items() if k not in ("apiVersion", "kind")} for o in items]
            return web.json_response({"kind": f"{kind.kind}List", "apiVersion": kind.api_version, "metadata": at, "items": bare})
        if request.content_length is not None and request.content_length > MAX_BODY:
            raise Refused(413, "RequestEntityTooLarge", f"Request entity too large: limit is {MAX_BODY}")
        body = await request.json() if request.can_read_body else None
        if method == "GET":
            one = self.get(kind, ns, name or "")
            if form is not None and form[0] == "PartialObjectMetadataList":
                wrong = f"you requested PartialObjectMetadataList, but the requested object is not a list (*{kind.kind})"
                raise Refused(406, "NotAcceptable", wrong)
            return web.json_response(one if form is None else partial(one, form[1]))
        if method == "POST" and name is None:
            return web.json_response(self.create(kind, ns, body or {}, query.get("fieldManager") or "unknown"), status=201)
        if method == "PUT" and name:
            return web.json_response(self.update(kind, ns, name, body or {}, query.get("fieldManager") or "unknown", subresource))
        if method == "PATCH" and name:
            return web.json_response(self.patch(kind, ns, name, body, request.content_type, query, subresource))
        if method == "DELETE" and name:
            return web.json_response(self.delete(kind, ns, name))
        raise Refused(405, "MethodNotAllowed", f"{method} is not supported on {path}")

    async def _watch(self, request: web.Request, kind: Kind, namespace: str | None, form: tuple[str, str] | None) -> web.StreamResponse:
        query = request.query
        since = query.get("resourceVersion", "")
        timeout = float(query.get("timeoutSeconds", "300"))
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        if form is not None and form[0] == "PartialObjectMetadataList":
            return response  # a real server ends such a watch at once, with no event and no error
        watcher = Watcher(kind, namespace if kind.namespaced else None, query.get("labelSelector"))

        async def send(event: Obj) -> None:
            if form is not None and event["type"] != "ERROR":
                event = {"type": event["type"], "object": partial(event["object"], form[1])}
            await response.write(json.dumps(event).encode() + b"\n")

        if since and since != "0" and int(since) < self.oldest:
            await send(
                {
                    "type": "ERROR",
                    "object": {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "status": "Failure",
                        "code": 410,
                        "reason": "Expired",
                        "message": "The resourceVersion for the provided watch is too old.",
                    },
                }
            )
            return response
        backlog = (
            [{"type": "ADDED", "object": copy.deepcopy(o)} for o in self.items(kind, watcher.namespace, watcher.selector)]
            if not since or since == "0"
            else [{"type": t, "object": o} for rv, t, k, o in self.log if rv > int(since) and self._visible(watcher, k, o)]
        )
        self.watchers.append(watcher)  # registered before any await: nothing falls between the backlog and the live events
        deadline = asyncio.get_running_loop().time() + timeout
        try:
            for event in backlog:
                await send(event)
            while True:
                remaining = deadline - asyncio.get_running_loop().time()
                if remaining <= 0:
                    break
                try:
                    next_event: Obj | None = await asyncio.wait_for(watcher.queue.get(), min(remaining, self.bookmark_interval))
                except TimeoutError:
                    if query.get("allowWatchBookmarks") in ("true", "1"):
                        await send(
                            {
                                "type": "BOOKMARK",
                                "object": {
                                    "kind": kind.kind,
                                    "apiVersion": kind.api_version,
                                    "metadata": {"resourceVersion": str(self.rv)},
                                },
                            }
                        )
                    continue
                if next_event is None:  # dropped by a test
                    break
                await send(next_event)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self.watchers.remove(watcher)
        return response

    async def start(self) -> KubeEmulator:
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        self.drop_watches()
        if self._runner is not None:
            await self._runner.cleanup()
