"""Event subjects: one per aggregate facet, built from names that are safe NATS tokens.

    jetway.evt.<partition>.<kind>.<namespace>.<name>.<facet>

`partition` places a resource for services that scale out (runtime/leases.py, docs/partitioning.md):
`g` for the cluster-wide inputs every replica needs (provider configs, Gateways, a provider's own
InferencePools, discovery), else one
of `PARTITIONS` numbers, a stable hash of the namespace (of the name for a cluster-scoped resource),
so a ModelDeployment, its facets and the AgentDeployments beside it share one. It is the first token
so that a partition's events are one literal-prefix filter (`jetway.evt.7.>`), which JetStream
serves as fast as one subject.

`facet` is `spec` for the desired state a user applied (the watcher writes it) or the name of
the service that owns a decision about that resource (`selector`, `router`, ...). Each facet
has one writer, so JetStream's expected-last-subject-sequence guards every append: a stale
apply gets a conflict (the `resourceVersion` 409), and two replicas of one service cannot
both record a decision. `Key.history_filter()` is a resource's history.

Kubernetes names may contain dots, which would split a subject, and member names may contain
anything, so names are encoded: `[A-Za-z0-9-]` pass through and every other UTF-8 byte
becomes `_XX` (hex). `_` alone stands for "no namespace" (cluster-scoped kinds).
"""

from __future__ import annotations

import re
from typing import NamedTuple

PREFIX = "jetway.evt"
DLQ_PREFIX = "jetway.dlq"
SIGNAL_PREFIX = "jetway.signal"
SPEC = "spec"
# The other facets, each with exactly one writer (contracts/natsauth.py has the server enforce it).
WATCHER = "watcher"  # the watcher: refusals, API discovery
REPORTED = "reported"  # the watcher: a provider config's own status, as applied
OBSERVED = "observed"  # the watcher: what the cluster shows of a resource's objects
SELECTOR = "selector"
STORAGE = "storage"
WORKLOAD = "workload"
ROUTER = "router"  # the router's prober: pool members' health
GATEWAY = "gateway"  # the Gateway API control plane: a deployment's pool and route, a Gateway's admission
BINDING = "binding"
SCALER = "scaler"  # the autoscaler: a deployment's replica count (contracts/scaling.py ScaleDecided)
NO_NAMESPACE = "_"
# Partitions: fixed for a stream's lifetime (every subject carries one), so the count is a constant, not a
# setting; 16 lets a service run up to 16 replicas that each hold some. `GLOBAL` holds the kinds every
# replica folds whatever it holds (cluster-wide inputs), and is itself held by one replica for the
# decisions about them.
PARTITIONS = 16
GLOBAL = "g"
# an InferencePool here is a provider's own (Jetway's are observed on their deployment): its namespace need not be
# the deployment's, so every shard folds it, as it folds Gateways
GLOBAL_KINDS = frozenset({"InferenceProviderConfig", "AgentProviderConfig", "Gateway", "InferencePool", "Cluster"})
ALL_PARTITIONS = (GLOBAL, *(str(n) for n in range(PARTITIONS)))
_SAFE = re.compile(rb"[A-Za-z0-9-]")
_ESCAPE = re.compile(r"_([0-9A-F]{2})")


def encode_token(text: str) -> str:
    if text == "":
        raise ValueError("a subject token cannot encode an empty name")
    return "".join(chr(b) if _SAFE.match(bytes([b])) else f"_{b:02X}" for b in text.encode("utf-8"))


def decode_token(token: str) -> str:
    if token == NO_NAMESPACE:
        return ""
    if "_" not in token:
        return token  # nothing escaped (most names): every fold reads a key, so this is the hot path
    raw = bytearray()
    i = 0
    while i < len(token):
        if token[i] == "_":
            raw.append(int(token[i + 1 : i + 3], 16))
            i += 3
        else:
            raw.append(ord(token[i]))
            i += 1
    return raw.decode("utf-8")


def _fnv1a(data: bytes) -> int:
    """32-bit FNV-1a, the hash NATS' subject-mapping `partition()` uses."""
    h = 0x811C9DC5
    for byte in data:
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


def partition_of(kind: str, namespace: str, name: str) -> str:
    """The partition token of a resource: `g` for a cluster-wide input, else its namespace's (its name's,
    cluster-scoped) hash; stable across processes and releases (a change would move every resource)."""
    if kind in GLOBAL_KINDS:
        return GLOBAL
    return str(_fnv1a(encode_token(namespace or name).encode()) % PARTITIONS)


class Key(NamedTuple):
    """A resource: kind, namespace ("" when cluster-scoped or ignored) and name."""

    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}" if self.namespace else f"{self.kind}/{self.name}"

    @property
    def kind_token(self) -> str:
        return self.kind.lower()

    @property
    def partition(self) -> str:
        return partition_of(self.kind, self.namespace, self.name)

    def subject(self, facet: str = SPEC) -> str:
        namespace = encode_token(self.namespace) if self.namespace else NO_NAMESPACE
        return f"{PREFIX}.{self.partition}.{self.kind_token}.{namespace}.{encode_token(self.name)}.{facet}"

    def history_filter(self) -> str:
        return self.subject("*")


def kind_filter(kind: str, facet: str = SPEC) -> str:
    """Every resource of a kind, one facet: `jetway.evt.*.modeldeployment.*.*.spec` (`g` for a global kind)."""
    partition = GLOBAL if kind in GLOBAL_KINDS else "*"
    return f"{PREFIX}.{partition}.{kind.lower()}.*.*.{facet}"


def facet_filter(facet: str) -> str:
    """One facet of every resource: `jetway.evt.*.*.*.*.selector`."""
    return f"{PREFIX}.*.*.*.*.{facet}"


def partition_filter(partition: str) -> str:
    """Every event of one partition: `jetway.evt.7.>`."""
    return f"{PREFIX}.{partition}.>"


ALL_EVENTS = f"{PREFIX}.>"


class ParsedSubject(NamedTuple):
    partition: str
    kind_token: str
    namespace: str
    name: str
    facet: str


def parse_subject(subject: str) -> ParsedSubject:
    parts = subject.split(".")
    if len(parts) != 7 or f"{parts[0]}.{parts[1]}" != PREFIX:
        raise ValueError(f"not a Jetway event subject: {subject!r}")
    return ParsedSubject(parts[2], parts[3], decode_token(parts[4]), decode_token(parts[5]), parts[6])


def subject_partition(subject: str) -> str:
    """The partition token of an event subject (cheap: no decoding)."""
    return subject.split(".", 3)[2]


def matcher(filters: list[str] | tuple[str, ...]) -> re.Pattern[str]:
    """One compiled pattern for NATS subject filters (`*` one token, `>` the rest)."""
    alternatives = []
    for subject_filter in filters:
        tokens = []
        for token in subject_filter.split("."):
            tokens.append("[^.]+" if token == "*" else ".+" if token == ">" else re.escape(token))
        alternatives.append(r"\.".join(tokens))
    return re.compile("(?:" + "|".join(alternatives) + r")\Z")
