"""Reading manifests from files or stdin: YAML streams, JSON documents and arrays, `kind: List`."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contracts.documents import MAX_DECODED_BYTES, DocumentError, TooDeep, load_json, load_yaml_all


class Unreadable(Exception):
    """The input could not be read or parsed at all (exit code 2)."""


@dataclass(frozen=True)
class Document:
    source: str  # the file name as given, or "-" for stdin
    index: int  # 1-based position in the file
    body: Any


def _parse(text: str, source: str) -> list[Any]:
    """The documents of one file, within the bounds every entry point uses (contracts/documents.py)."""
    # A local file has no body limit: its documents may stand for a few times its own size, never
    # for what an alias bomb expands to.
    max_bytes = max(MAX_DECODED_BYTES, 4 * len(text))
    try:
        if text.lstrip().startswith(("{", "[")):
            try:
                value = load_json(text)
            except TooDeep:
                raise
            except DocumentError:
                pass  # JSON documents in a YAML stream ("{...}\n---\n{...}") are YAML; read them as such
            else:
                return value if isinstance(value, list) else [value]
        documents = load_yaml_all(text, max_bytes=max_bytes)
    except DocumentError as exc:
        raise Unreadable(f"{source}: {exc}") from None
    return [d for d in documents if d is not None]


def _expand_lists(documents: list[Any]) -> list[Any]:
    out: list[Any] = []
    for doc in documents:
        if isinstance(doc, dict) and doc.get("kind") == "List" and isinstance(doc.get("items"), list):
            out.extend(doc["items"])
        else:
            out.append(doc)
    return out


def read_text(source: str) -> str:
    try:
        if source == "-":  # bytes, decoded strictly: a C locale's stdin would smuggle bad bytes in as surrogates
            return sys.stdin.buffer.read().decode("utf-8")
        return Path(source).read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise Unreadable(f"{source}: no such file") from exc
    except IsADirectoryError as exc:
        raise Unreadable(f"{source}: is a directory") from exc
    except PermissionError as exc:
        raise Unreadable(f"{source}: permission denied") from exc
    except UnicodeDecodeError as exc:
        raise Unreadable(f"{source}: not UTF-8 text") from exc
    except OSError as exc:
        raise Unreadable(f"{source}: {exc.strerror or exc}") from exc


def parse_documents(text: str, source: str) -> list[Document]:
    return [Document(source, i, body) for i, body in enumerate(_expand_lists(_parse(text, source)), start=1)]


def load_documents(source: str) -> list[Document]:
    return parse_documents(read_text(source), source)


MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


def expand_sources(sources: list[str]) -> list[str]:
    """Files as given; a directory stands for its manifest files, recursively, in name order."""
    out: list[str] = []
    for source in sources:
        path = Path(source)
        if source != "-" and path.is_dir():
            out += sorted(str(p) for p in path.rglob("*") if p.is_file() and p.suffix in MANIFEST_SUFFIXES)
        else:
            out.append(source)
    return out
