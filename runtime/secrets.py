"""Secret values, kept out of the event stream.

Manifests name secrets (`authSecretRef`, `caFileRef`); values are looked up here on every
use, so a rotated secret takes effect without re-applying anything. Standalone, the store is
a folder of files readable by the user only; in a cluster, Kubernetes Secrets (see
services/watcher). A value is never logged, never put in an event, a status or an error.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

from contracts.rules.poolmember import SECRET_NAME_WORDS, is_secret_name


class SecretSource(Protocol):
    def get(self, name: str) -> bytes | None: ...


class BadSecretName(ValueError):
    pass


class FileSecrets:
    """One file per secret in `<data dir>/secrets`, mode 0600, folder 0700."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _path(self, name: str) -> Path:
        if not is_secret_name(name):
            raise BadSecretName(f"secret name {name!r} {SECRET_NAME_WORDS.removeprefix('must be a secret name: ')}")
        return self.directory / name

    def get(self, name: str) -> bytes | None:
        try:
            return self._path(name).read_bytes()
        except (FileNotFoundError, BadSecretName, IsADirectoryError):
            return None

    def set(self, name: str, value: bytes) -> None:
        path = self._path(name)
        self.directory.mkdir(parents=True, exist_ok=True)
        os.chmod(self.directory, 0o700)
        temporary = path.with_name(f".{name}.tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(value)
        os.replace(temporary, path)  # readers see the old value or the new one, never half

    def delete(self, name: str) -> bool:
        try:
            self._path(name).unlink()
        except FileNotFoundError:
            return False
        return True

    def names(self) -> list[str]:
        if not self.directory.exists():
            return []
        return sorted(p.name for p in self.directory.iterdir() if p.is_file() and not p.name.startswith("."))


def bearer_token(raw: bytes) -> str:
    """A token file's value without the trailing newline editors add."""
    return raw.decode("utf-8").strip()
