"""`jetway nats-users secret`: the Secret of each service's NATS password for a cluster (docs/cluster.md).

The users and their rights are contracts/natsauth.py's (`jetway generate` writes them to
deploy/base/nats-auth.conf); this draws the passwords, and with `--keep FILE` keeps them in FILE
so a dev stack (tilt/Tiltfile) applies the same Secret on every reload instead of a new one."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from contracts.natsauth import SERVICES, new_password, secret_manifest, valid_password


def kept_passwords(path: Path) -> dict[str, str]:
    """The passwords saved in `path`, with fresh ones for users it lacks, saved back readable by us only."""
    try:
        found = json.loads(path.read_text()) if path.exists() else {}
    except (OSError, ValueError) as exc:
        raise SystemExit(f"jetway nats-users: cannot read {path}: {type(exc).__name__}") from None
    if not isinstance(found, dict):
        found = {}
    passwords = {s.user: found[s.user] if valid_password(str(found.get(s.user, ""))) else new_password() for s in SERVICES}
    if passwords != found:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(mode=0o600)
        path.chmod(0o600)
        path.write_text(json.dumps(passwords))
    return passwords


def run(args: argparse.Namespace) -> int:
    passwords = kept_passwords(Path(args.keep)) if args.keep else {s.user: new_password() for s in SERVICES}
    sys.stdout.write(json.dumps(secret_manifest(passwords, namespace=args.namespace), indent=2) + "\n")
    return 0
