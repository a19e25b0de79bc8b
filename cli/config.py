"""Where `jetway up` keeps its data and how the other commands find it (`jetway.json`)."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from runtime import settings

CONFIG_NAME = "jetway.json"


class NotRunning(Exception):
    pass


def data_dir(explicit: str | None = None) -> Path:
    """--data-dir, else $JETWAY_DATA_DIR, else a per-user folder."""
    if explicit:
        return Path(explicit).expanduser()
    configured = settings.read().cli.data_dir
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "jetway"


@dataclass(frozen=True)
class ClientConfig:
    api_url: str
    router_url: str
    token: str
    nats_url: str

    def write(self, directory: Path) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / CONFIG_NAME
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # the token is the user's alone
        with os.fdopen(fd, "w") as handle:
            json.dump(asdict(self), handle, indent=2)
        os.chmod(path, 0o600)
        return path


def load(explicit_dir: str | None = None) -> ClientConfig:
    path = data_dir(explicit_dir) / CONFIG_NAME
    try:
        raw = json.loads(path.read_text())
        return ClientConfig(raw["api_url"], raw["router_url"], raw["token"], raw["nats_url"])
    except FileNotFoundError:
        raise NotRunning(f"no {path}: start Jetway with `jetway up` (or pass --data-dir / set JETWAY_DATA_DIR)") from None
    except (ValueError, KeyError) as exc:
        raise NotRunning(f"{path} is not a Jetway client config ({exc}); restart `jetway up` to rewrite it") from None


def nats_url(explicit_url: str | None, explicit_dir: str | None) -> str:
    if explicit_url:
        return explicit_url
    if os.environ.get("NATS_URL"):
        return os.environ["NATS_URL"]
    return load(explicit_dir).nats_url
