"""`jetway keys create|list|delete`: the router's client keys (docs/router.md, "Client keys").

Standalone, the keys document is the secret store's entry `client-keys` (`<data dir>/secrets`),
which a `jetway up --client-keys required` router reads again within a tick. For a cluster,
`--secret-manifest` prints the Secret `jetway-client-keys` instead of writing anything; `--from
FILE` (or - for stdin) is the document to change: the keys document itself, or the Secret as
`kubectl get secret jetway-client-keys -o json` prints it. A new key is printed once: only its
SHA-256 is kept anywhere.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import json
import math
import sys
from dataclasses import dataclass

import yaml

from cli.config import data_dir
from runtime.secrets import FileSecrets
from services.router.keys import (
    LIMIT_WORDS,
    NAME_WORDS,
    SECRET_NAME,
    SECRET_OBJECT,
    TENANT_WORDS,
    WEIGHT_WORDS,
    ClientKey,
    KeyRing,
    KeysError,
    hash_key,
    models_problems,
    name_rule,
    new_key,
    now_rfc3339,
    parse_keys,
    tenant_rule,
    weight_rule,
)

USAGE = 2
NAMESPACE = "jetway-system"


class Refused(Exception):
    """Bad input or an unusable document: the message names the flag or file and the rule."""


@dataclass(frozen=True)
class Request:
    """A `keys create`'s flags, checked."""

    name: str
    models: tuple[str, ...]
    rpm: int | None
    tpm: int | None
    weight: float | None = None
    tenant: str | None = None


def limit(flag: str, value: str | None) -> int | None:
    if value is None:
        return None
    if not (value.isascii() and value.isdigit() and int(value) >= 1):
        raise Refused(f"{flag}: {LIMIT_WORDS} (got {value!r}); leave it out for unlimited")
    return int(value)


def weight(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if weight_rule(number) is not None:
        raise Refused(f"--weight: {WEIGHT_WORDS} (got {value!r})")
    return int(number) if number.is_integer() else number


def tenant(value: str | None) -> str | None:
    if value is not None and tenant_rule(value) is not None:
        raise Refused(f"--tenant: {TENANT_WORDS} (got {value!r})")
    return value


def models(value: str | None) -> tuple[str, ...]:
    if value is None:
        return ()
    names = [name.strip() for name in value.split(",")]
    problems = models_problems(names, "--models")
    if problems:
        raise Refused(f"{'; '.join(problems)} (model names separated by commas; leave --models out for every model)")
    return tuple(names)


def checked(args: argparse.Namespace) -> Request:
    """The create flags as a Request, or Refused naming the first flag that breaks its rule."""
    if name_rule(args.name) is not None:
        raise Refused(f"NAME: {NAME_WORDS} (got {args.name!r})")
    return Request(
        args.name,
        models(args.models),
        limit("--rpm", args.rpm),
        limit("--tpm", args.tpm),
        weight(getattr(args, "weight", None)),
        tenant(getattr(args, "tenant", None)),
    )


def secret_manifest(ring: KeyRing, namespace: str) -> dict[str, object]:
    """The Secret the router mounts (`stringData`: kubectl encodes it); it holds hashes only."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": SECRET_OBJECT, "namespace": namespace, "labels": {"app.kubernetes.io/part-of": "jetway"}},
        "stringData": {SECRET_NAME: ring.dump().decode()},
    }


def document_in(raw: bytes, source: str) -> KeyRing:
    """The ring in `raw`: a keys document, or a Secret (JSON or YAML) holding one under `client-keys`."""
    try:
        found = yaml.safe_load(raw)  # YAML reads JSON too
    except yaml.YAMLError:
        found = None
    if isinstance(found, dict) and found.get("kind") == "Secret":
        raw = secret_entry(found, source)
    try:
        return parse_keys(raw)
    except KeysError as exc:
        raise Refused(f"{source}: {exc}") from None


def secret_entry(secret: dict[str, object], source: str) -> bytes:
    string_data, data = secret.get("stringData"), secret.get("data")
    if isinstance(string_data, dict) and isinstance(string_data.get(SECRET_NAME), str):
        return str(string_data[SECRET_NAME]).encode()
    if isinstance(data, dict) and isinstance(data.get(SECRET_NAME), str):
        try:
            return base64.b64decode(str(data[SECRET_NAME]), validate=True)
        except (binascii.Error, ValueError):
            raise Refused(f"{source}: data.{SECRET_NAME}: must be base64") from None
    raise Refused(f"{source}: a Secret without {SECRET_NAME} in data or stringData")


def read_from(path: str) -> KeyRing:
    source = "--from -" if path == "-" else f"--from {path}"
    try:
        raw = sys.stdin.buffer.read() if path == "-" else open(path, "rb").read()  # noqa: SIM115
    except OSError as exc:
        raise Refused(f"{source}: {exc.strerror}") from None
    return document_in(raw, source)


def stored(store: FileSecrets) -> KeyRing:
    raw = store.get(SECRET_NAME)
    if raw is None:
        return KeyRing()
    try:
        return parse_keys(raw)
    except KeysError as exc:
        raise Refused(
            f"the secret store's {SECRET_NAME} ({store.directory / SECRET_NAME}): {exc}; fix it, or start afresh with "
            f"`jetway secret delete {SECRET_NAME}`"
        ) from None


def describe(key: ClientKey) -> str:
    every = "every model" if not key.models else ", ".join(key.models)
    limits = f"models: {every}; rpm: {key.rpm or 'unlimited'}; tpm: {key.tpm or 'unlimited'}"
    if key.weight is not None:
        limits += f"; weight: {key.weight:g}"
    return limits if key.tenant is None else f"{limits}; tenant: {key.tenant}"


def source_ring(args: argparse.Namespace, store: FileSecrets) -> KeyRing:
    """The document to change or list: --from FILE with --secret-manifest, else the secret store's."""
    manifest = getattr(args, "secret_manifest", False)
    if args.from_file and not manifest and args.action != "list":
        raise Refused("--from: only with --secret-manifest (standalone keys live in the secret store; see --data-dir)")
    if args.from_file:
        return read_from(args.from_file)
    return KeyRing() if manifest else stored(store)


def create(args: argparse.Namespace, store: FileSecrets) -> int:
    request = checked(args)
    ring = source_ring(args, store)
    if ring.named(request.name) is not None:
        raise Refused(f"NAME: a key named {request.name!r} exists; delete it first (jetway keys delete {request.name})")
    key = new_key()
    client = ClientKey(request.name, hash_key(key), request.models, request.rpm, request.tpm, now_rfc3339(), request.weight, request.tenant)
    ring = ring.with_key(client)
    note = "shown once: only its SHA-256 is kept, the key cannot be shown again"
    if args.secret_manifest:
        # stdout is the manifest, for `| kubectl apply -f -`: the key goes to the terminal
        sys.stdout.write(json.dumps(secret_manifest(ring, args.namespace), indent=2) + "\n")
        print(f"jetway keys: key {request.name}: {key}", file=sys.stderr)
        print(f"jetway keys: {note} ({describe(client)})", file=sys.stderr)
        if not args.from_file:
            print(
                f"jetway keys: without --from the Secret holds this key only: applied, it replaces the keys of {SECRET_OBJECT}",
                file=sys.stderr,
            )
        return 0
    store.set(SECRET_NAME, ring.dump())
    print(key, flush=True)
    print(f"✓ key {request.name} created ({describe(client)}); the key above is {note}", file=sys.stderr)
    return 0


def delete(args: argparse.Namespace, store: FileSecrets) -> int:
    if args.secret_manifest and not args.from_file:
        raise Refused("--secret-manifest: delete needs --from FILE, the document to delete from")
    ring = source_ring(args, store)
    found = ring.named(args.name) is not None
    if args.secret_manifest:
        sys.stdout.write(json.dumps(secret_manifest(ring.without(args.name), args.namespace), indent=2) + "\n")
    elif found:
        store.set(SECRET_NAME, ring.without(args.name).dump())
    print(f"✓ key {args.name} {'deleted' if found else 'noop (not found)'}", file=sys.stderr)
    return 0


def listed(ring: KeyRing) -> list[dict[str, object]]:
    """What `keys list -o json` prints of each key: its fields with its weight (1 when absent) and its tenant (null:
    its own), and the hash's first 8 characters, never the whole hash (nor the key, which is kept nowhere)."""
    return [
        {
            "name": key.name,
            "models": list(key.models),
            "rpm": key.rpm,
            "tpm": key.tpm,
            "weight": key.weight or 1,
            "tenant": key.tenant,
            "created": key.created,
            "sha256_prefix": key.sha256[:8],
        }
        for key in ring
    ]


def listing(args: argparse.Namespace, store: FileSecrets) -> int:
    ring = source_ring(args, store)
    if getattr(args, "output", "text") == "json":
        print(json.dumps(listed(ring), indent=2))
        return 0
    if not ring.keys:
        print("no client keys (make one: jetway keys create NAME)", file=sys.stderr)
        return 0
    rows = [("NAME", "MODELS", "RPM", "TPM", "WEIGHT", "TENANT", "CREATED", "SHA256")]
    for key in ring:
        limits = (str(key.rpm or "unlimited"), str(key.tpm or "unlimited"))
        share = (f"{key.weight or 1:g}", key.tenant or "-")
        rows.append((key.name, ",".join(key.models) or "*", *limits, *share, key.created or "-", key.sha256[:8] + "…"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    return 0


def run(args: argparse.Namespace) -> int:
    store = FileSecrets(data_dir(args.data_dir) / "secrets")
    action = {"create": create, "delete": delete, "list": listing}[args.action]
    try:
        return action(args, store)
    except Refused as exc:
        print(f"jetway keys {args.action}: error: {exc}", file=sys.stderr)
        return USAGE
    except KeysError as exc:  # a key the ring refuses (a hash already there: not seen with 256 random bits)
        print(f"jetway keys {args.action}: error: {exc}", file=sys.stderr)
        return USAGE
    except OSError as exc:
        print(f"jetway keys {args.action}: error: {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 1
