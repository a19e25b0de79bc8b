"""The workload service's registry edge: a Direct vLLM image's tag resolved to its digest.

Through python-dxf, a client of the OCI distribution API (docs/dependencies.md): the manifest the tag
names (its digest checked against the bytes served), then, best effort, the image's config for when
it was built and from which revision (`created`, the `org.opencontainers.image.created` and
`org.opencontainers.image.revision` labels; for an index, the linux/amd64 image's). Anonymous, as AI
Runway resolves: no credentials are read, so none can appear in a message, and errors are put in
Jetway's words (a status code and the registry's error code), never an exception's text.

Settings (runtime/settings.py, `images`): `JETWAY_IMAGE_RESOLUTION` is `registry` or `off` (default: `registry` in a
cluster, `off` standalone and in `jetway render`); loopback registries (127.0.0.0/8, localhost,
[::1]) are reached over plain HTTP, and so are those `JETWAY_REGISTRY_PLAIN_HTTP` names
(comma-separated `host[:port]`); every other registry over HTTPS.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import ipaddress
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import requests
from dxf import DXF, exceptions

from contracts.pipeline import ImageResolution
from runtime import settings
from services.workload import images

DOCKER_HUB = "registry-1.docker.io"
TIMEOUT = 20.0  # seconds for one resolution, under the runner's 30 s acknowledgement wait
CONFIG_LIMIT = 4 << 20  # an image config larger than this is not read (its provenance is best effort)
MANIFEST_TYPES = ("application/vnd.oci.image.manifest.v1+json", "application/vnd.docker.distribution.manifest.v2+json")
INDEX_TYPES = ("application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json")
PLATFORM = ("linux", "amd64")  # the image an index's provenance is read from, as go-containerregistry picks by default

_COMPONENT = r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*"
_PATH = re.compile(rf"{_COMPONENT}(?:/{_COMPONENT})*")
_TAG = re.compile(r"[\w][\w.-]{0,127}")
_DIGEST = re.compile(r"sha256:[a-f0-9]{64}")


class Unresolvable(Exception):
    """Why a reference could not be resolved, in words fit for a status message."""


@dataclass(frozen=True)
class Location:
    """Where a reference lives: the registry host (with port), the repository path on it, the tag or digest."""

    host: str
    path: str
    tag: str
    digest: str = ""


def locate(reference: str) -> Location:
    """Docker's naming rules: a first component with a `.` or `:`, or `localhost`, names the registry;
    otherwise it is Docker Hub, where a one-part name is an official image (`library/<name>`)."""
    text = reference.strip()
    name, _, digest = text.partition("@")
    slash, colon = name.rfind("/"), name.rfind(":")
    tag = ""
    if colon > slash:
        name, tag = name[:colon], name[colon + 1 :]
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        host, path = first, rest
    else:
        host, path = DOCKER_HUB, name
    if host in ("docker.io", "index.docker.io"):
        host = DOCKER_HUB
    if host == DOCKER_HUB and "/" not in path:
        path = "library/" + path
    if not _PATH.fullmatch(path) or (tag and not _TAG.fullmatch(tag)) or (digest and not _DIGEST.fullmatch(digest)):
        raise Unresolvable("not a valid image reference")
    if not tag and not digest:
        tag = "latest"
    return Location(host, path, tag, digest)


def plain_http(host: str, named: frozenset[str] = frozenset()) -> bool:
    """Loopback registries, and those named, speak plain HTTP; all others HTTPS."""
    if host in named:
        return True
    bare = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    bare = bare.strip("[]")
    if bare == "localhost":
        return True
    try:
        return ipaddress.ip_address(bare).is_loopback
    except ValueError:
        return False


def _registry_errors(response: requests.Response | None) -> str:
    """The registry's own error codes and messages (`MANIFEST_UNKNOWN: manifest unknown`), briefly."""
    if response is None:
        return ""
    try:
        body = response.json()
    except ValueError:
        return ""
    errors = body.get("errors") if isinstance(body, dict) else None
    words = []
    for error in errors if isinstance(errors, list) else []:
        if isinstance(error, dict):
            code, message = str(error.get("code") or "")[:64], str(error.get("message") or "")[:120]
            words.append(": ".join(w for w in (code, message) if w))
    return "; ".join(words[:3])


def _explained(exc: BaseException, host: str) -> str:
    if isinstance(exc, Unresolvable):
        return str(exc)
    if isinstance(exc, exceptions.DXFUnauthorizedError):
        return f"registry {host} refused anonymous access (HTTP 401)"
    if isinstance(exc, exceptions.DXFAuthInsecureError):
        return f"registry {host} asks for credentials over plain HTTP"
    if isinstance(exc, exceptions.DXFDigestMismatchError):
        return f"registry {host} served content that does not match its digest"
    if isinstance(exc, requests.HTTPError):
        code = exc.response.status_code if exc.response is not None else 0
        detail = _registry_errors(exc.response)
        return f"registry {host} answered HTTP {code}" + (f" ({detail})" if detail else "")
    if isinstance(exc, requests.exceptions.SSLError):
        return f"TLS with registry {host} failed"
    if isinstance(exc, requests.Timeout):
        return f"registry {host} did not answer in time"
    if isinstance(exc, requests.ConnectionError):
        return f"cannot reach registry {host}"
    if isinstance(exc, ValueError | KeyError | TypeError):
        return f"registry {host} answered with something that is not an image manifest"
    return f"resolving through registry {host} failed ({type(exc).__name__})"


def _sha256(content: bytes) -> str:
    return "sha256:" + hashlib.sha256(content).hexdigest()


def _manifest(client: DXF, ref: str) -> tuple[str, dict[str, Any]]:
    """(digest, manifest) of what `ref` (a tag or a digest) names, the digest checked against the bytes."""
    _, response = client.get_manifest_and_response(ref)
    content = response.content
    digest = _sha256(content)
    served = response.headers.get("Docker-Content-Digest")
    if served and served.startswith("sha256:") and served != digest:
        raise exceptions.DXFDigestMismatchError(digest, served)
    if ref.startswith("sha256:") and ref != digest:
        raise exceptions.DXFDigestMismatchError(digest, ref)
    manifest = json.loads(content)
    if not isinstance(manifest, dict):
        raise ValueError("not a manifest")
    if "mediaType" not in manifest:
        manifest["mediaType"] = response.headers.get("Content-Type", "").split(";")[0].strip()
    return digest, manifest


def _config(client: DXF, manifest: dict[str, Any]) -> dict[str, Any]:
    """The image config of a manifest (for an index, of its linux/amd64 image), or {} when there is none to read."""
    if manifest.get("mediaType") in INDEX_TYPES or "manifests" in manifest:
        wanted = [
            m
            for m in manifest.get("manifests") or []
            if isinstance(m, dict) and ((m.get("platform") or {}).get("os"), (m.get("platform") or {}).get("architecture")) == PLATFORM
        ]
        if not wanted or not isinstance(wanted[0].get("digest"), str):
            return {}
        _, manifest = _manifest(client, wanted[0]["digest"])
    config = manifest.get("config")
    if not isinstance(config, dict) or not isinstance(config.get("digest"), str) or int(config.get("size") or 0) > CONFIG_LIMIT:
        return {}
    chunks = client.pull_blob(config["digest"])
    assert not isinstance(chunks, tuple)  # without size=True it is the chunks alone
    blob = bytearray()
    for chunk in chunks:  # the chunks check the blob's digest once all are read
        blob += chunk
        if len(blob) > CONFIG_LIMIT:
            return {}
    parsed = json.loads(bytes(blob))
    return parsed if isinstance(parsed, dict) else {}


def _anonymous(client: Any, response: requests.Response) -> None:
    client.authenticate(response=response)  # a bearer token for anonymous pulls, where the registry hands them out


def lookup(
    reference: str, *, named_plain: frozenset[str] = frozenset(), timeout: float = TIMEOUT, now: datetime | None = None
) -> ImageResolution:
    """Resolve one reference (blocking); never raises: a failure is the resolution's `error`."""
    requested = reference.strip()
    host = "?"
    try:
        where = locate(requested)
        host = where.host
        client = DXF(host, where.path, auth=_anonymous, insecure=plain_http(host, named_plain), timeout=timeout)
        with client:
            digest, manifest = _manifest(client, where.digest or where.tag)
            try:
                config = _config(client, manifest)
            except Exception:  # provenance is best effort: the digest stands without it
                config = {}
    except Exception as exc:
        return ImageResolution(requested=requested, error=_explained(exc, host))
    labels = (config.get("config") or {}).get("Labels") or {}
    labels = labels if isinstance(labels, Mapping) else {}
    created = images.created_at(config.get("created") or "", labels)
    repository = images.split(requested).repository
    return ImageResolution(
        requested=requested,
        resolved=f"{repository}@{digest}",
        digest=digest,
        created_at=created,
        revision=images.revision_of(labels),
        age=images.age(created, now or datetime.now(UTC)),
    )


class ImageResolver(Protocol):
    async def resolve(self, reference: str) -> ImageResolution: ...


@dataclass(frozen=True)
class RegistryResolver:
    """Resolves through the image's registry, off the event loop, within `timeout` seconds."""

    named_plain: frozenset[str] = frozenset()
    timeout: float = TIMEOUT

    async def resolve(self, reference: str) -> ImageResolution:
        per_request = max(self.timeout / 2, 1.0)
        work = asyncio.to_thread(lookup, reference, named_plain=self.named_plain, timeout=per_request)
        try:
            return await asyncio.wait_for(work, self.timeout)
        except TimeoutError:
            host = "?"
            with contextlib.suppress(Unresolvable):
                host = locate(reference).host
            return ImageResolution(requested=reference.strip(), error=f"registry {host} did not answer within {self.timeout:g} s")


def configured(images: settings.Images, *, cluster: bool) -> RegistryResolver | None:
    """The resolver the settings ask for, or None when image resolution is off (by default, outside a cluster)."""
    if (images.resolution or ("registry" if cluster else "off")) == "off":
        return None
    return RegistryResolver(named_plain=frozenset(images.plain_http))
