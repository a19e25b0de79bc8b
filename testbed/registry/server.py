"""A real OCI registry on 127.0.0.1 for the image-resolution tests, and crane to put images in it.

The registry is go-containerregistry's in-memory server (built by testbed/registry/build.py); crane
pushes small images (a one-file layer, the labels and config a test asks for) and says which digest
the registry gave them, so a test compares what Jetway resolves with the registry's own answer.
"""

from __future__ import annotations

import hashlib
import io
import json
import selectors
import subprocess
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class RegistryError(RuntimeError):
    pass


def _layer(name: str, content: bytes) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(content)
        tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


@dataclass
class Registry:
    bin_dir: Path
    work: Path
    host: str = ""  # 127.0.0.1:PORT
    process: subprocess.Popen[str] | None = None
    log: list[str] = field(default_factory=list)

    def start(self, timeout: float = 30.0) -> Registry:
        self.work.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [str(self.bin_dir / "registry")], stdout=subprocess.PIPE, stderr=(self.work / "registry.log").open("w"), text=True
        )
        assert self.process.stdout is not None
        watch = selectors.DefaultSelector()
        watch.register(self.process.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:  # the first line says where it listens
            if watch.select(timeout=max(deadline - time.monotonic(), 0)):
                line = self.process.stdout.readline()
                if line.startswith("listening on "):
                    self.host = line.split()[-1]
                    return self
                if not line:
                    break
        self.stop()
        raise RegistryError(f"the test registry did not start: {(self.work / 'registry.log').read_text()[-2000:]}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def crane(self, *args: str) -> str:
        done = subprocess.run([str(self.bin_dir / "crane"), *args], capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise RegistryError(f"crane {' '.join(args)} failed: {done.stderr.strip()[-2000:]}")
        return done.stdout.strip()

    def ref(self, path: str) -> str:
        return f"{self.host}/{path}"

    def push_labelled(self, path: str, labels: dict[str, str], *, content: bytes = b"hello\n") -> str:
        """An OCI image of one small layer, with these labels (crane leaves its `created` unset); its digest."""
        layer = self.work / f"layer-{len(self.log)}.tar"
        layer.write_bytes(_layer("hello.txt", content))
        base = self.ref(path) + "-base"
        self.log.append(self.crane("append", "--oci-empty-base", "-f", str(layer), "-t", base))
        flags = [f for k, v in labels.items() for f in ("-l", f"{k}={v}")]
        self.log.append(self.crane("mutate", *flags, "--set-platform", "linux/amd64", "-t", self.ref(path), base))
        return self.digest(path)

    def push_with_config(self, path: str, config: dict[str, Any]) -> str:
        """An image whose config is exactly `config` (rootfs filled in), pushed from a `docker save` tarball; its digest."""
        layer = _layer("hello.txt", b"configured\n")
        diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
        body = json.dumps({**config, "rootfs": {"type": "layers", "diff_ids": [diff_id]}}).encode()
        tarball = self.work / f"image-{len(self.log)}.tar"
        with tarfile.open(tarball, "w") as tar:
            for name, data in (
                ("config.json", body),
                ("layer.tar", layer),
                ("manifest.json", json.dumps([{"Config": "config.json", "RepoTags": [], "Layers": ["layer.tar"]}]).encode()),
            ):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        self.log.append(self.crane("push", str(tarball), self.ref(path)))
        return self.digest(path)

    def push_index(self, path: str, *members: str) -> str:
        """An image index of the images at `members` (paths in this registry); its digest."""
        flags = [f for m in members for f in ("-m", self.ref(m))]
        self.log.append(self.crane("index", "append", *flags, "-t", self.ref(path)))
        return self.digest(path)

    def digest(self, path: str) -> str:
        return self.crane("digest", self.ref(path))

    def config(self, path: str) -> dict[str, Any]:
        found: dict[str, Any] = json.loads(self.crane("config", self.ref(path)))
        return found
