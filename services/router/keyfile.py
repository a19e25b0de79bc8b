"""The client keys document, read from a file and read again when it changes.

In a cluster the file is the mounted Secret `jetway-client-keys` (JETWAY_CLIENT_KEYS_FILE);
standalone, the secret store's entry `client-keys` that `jetway keys` writes. `refresh()` is
called each tick from the event loop: a `stat` tells whether the file changed, and only then is
it read and parsed in a thread, so a rotated Secret is picked up within a tick and the loop
never waits on a read. A missing file is an empty ring (no key accepted); a malformed one keeps
the last good ring. Each outcome is logged once per change of the file, with its path, a count
and the rules broken, never a value.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

from runtime.secrets import FileSecrets
from services.router.keys import SECRET_NAME, Gate, KeyRing, KeysError, parse_keys

log = logging.getLogger("jetway.router.keys")

Signature = tuple[int, int, int, int, int]  # device, inode, size, mtime and ctime (ns): a rewrite or a Secret swap moves one
MISSING: Signature = (0, 0, 0, 0, 0)
_NEVER = object()


def signature(path: Path) -> Signature | None:
    """The file's signature, MISSING when there is none; None when it cannot be looked at (a permissions problem)."""
    try:
        found = os.stat(path)  # follows the symlinks a Secret volume swaps on rotation
    except (FileNotFoundError, NotADirectoryError):
        return MISSING
    except OSError:
        return None
    return (found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns)


def read(path: Path) -> tuple[Signature, bytes | None]:
    """The file's bytes with the signature of what was read (None: missing), for a thread."""
    try:
        with open(path, "rb") as handle:
            found = os.fstat(handle.fileno())
            data = handle.read()
    except (FileNotFoundError, NotADirectoryError):
        return MISSING, None
    return (found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns, found.st_ctime_ns), data


class KeyFile:
    """The ring in the keys document at `path`; `ring` is always usable (empty until a good document is read)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.ring = KeyRing()
        self.error: str | None = None  # why the file is not in use now (missing, unreadable, malformed); None when it is
        self._seen: object = _NEVER  # the signature last acted on (None: the file could not be looked at)
        self._reading = False

    @classmethod
    def in_store(cls, store: FileSecrets) -> KeyFile:
        """The secret store's entry `client-keys` (standalone: `<data dir>/secrets/client-keys`)."""
        return cls(store.directory / SECRET_NAME)

    def load(self) -> bool:
        """Read the file now if it changed, blocking: for a start-up before the loop serves, and for tests."""
        found = signature(self.path)
        if found == self._seen:
            return False
        try:
            seen, data = read(self.path)
        except OSError as exc:
            return self._unreadable(found, exc)
        return self._take(seen, data)

    async def refresh(self) -> bool:
        """Pick up a changed file without blocking the loop; True when the ring changed (then `Limiter.retain` it)."""
        # A stat of a local file (a Secret volume is tmpfs) costs microseconds: done here, the thread is
        # only taken when there is something to read.
        found = signature(self.path)
        if self._reading or found == self._seen:
            return False
        self._reading = True
        try:
            seen, data = await asyncio.to_thread(read, self.path)
        except OSError as exc:
            return self._unreadable(found, exc)
        finally:
            self._reading = False
        return self._take(seen, data)

    def _take(self, seen: Signature, data: bytes | None) -> bool:
        self._seen = seen
        before = self.ring
        if data is None:
            self.ring, self.error = KeyRing(), f"no client keys file at {self.path}: no key is accepted"
            log.warning("%s", self.error)
            return before != self.ring
        try:
            ring = parse_keys(data)
        except KeysError as exc:
            self.error = f"client keys file {self.path} is malformed, keeping the {len(self.ring.keys)} keys read before: {exc}"
            log.error("%s", self.error)
            return False
        self.ring, self.error = ring, None
        log.info("client keys: %d keys from %s", len(ring.keys), self.path)
        return before != ring

    def _unreadable(self, found: Signature | None, exc: OSError) -> bool:
        self._seen = found  # tried again when the file (or its permissions) change
        reason = exc.strerror or type(exc).__name__
        self.error = f"client keys file {self.path} cannot be read ({reason}), keeping the {len(self.ring.keys)} keys read before"
        log.error("%s", self.error)
        return False

    async def watch(self, interval: float, gate: Gate | None) -> None:
        """Every `interval` seconds, read the file again if it changed; a gate forgets the counts of keys gone."""
        while True:
            await asyncio.sleep(interval)
            if await self.refresh() and gate is not None:
                gate.limiter.retain(self.ring)
