"""`KIND/NAME` references as users type them: `md/qwen`, `modeldeployment/team-a/qwen`, `ipm/echo`."""

from __future__ import annotations

from contracts.kinds import KINDS, KindInfo, resolve_kind
from contracts.subjects import Key


class BadReference(ValueError):
    pass


def parse_kind(text: str) -> KindInfo:
    info = resolve_kind(text)
    if info is None:
        raise BadReference(
            f"unknown kind {text!r} (known: {', '.join(KINDS)}; short names: {', '.join(n for i in KINDS.values() for n in i.short_names)})"
        )
    return info


def parse_ref(text: str, namespace: str | None = None) -> Key:
    """KIND/NAME or KIND/NAMESPACE/NAME; namespaced kinds default to the `default` namespace."""
    parts = text.split("/")
    if len(parts) not in (2, 3) or not all(parts):
        raise BadReference(f"expected KIND/NAME or KIND/NAMESPACE/NAME, got {text!r}")
    info = parse_kind(parts[0])
    if len(parts) == 3:
        if not info.namespaced:
            raise BadReference(f"{info.kind} is not namespaced: use {parts[0]}/NAME")
        return Key(info.kind, parts[1], parts[2])
    return Key(info.kind, (namespace or "default") if info.namespaced else "", parts[1])
