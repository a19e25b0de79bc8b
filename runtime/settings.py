"""Every `JETWAY_*` setting, declared once: its variable, rule, default and help, in one typed tree.

The environment is read here and nowhere else. A process parses it once at start (`process()`; `load(environ)`
for a mapping of one's own), and what it builds gets typed values: `settings.router.port` is an int within
its bounds, never a string to parse again. A bad value stops the start with one line that names the variable,
its rule and what was given: `JETWAY_LEASE_TTL_SECONDS must be a number of seconds from 1 to 600 (got '0')`.

docs/settings.md is generated from this tree (`python -m runtime.settings --markdown`), and a test keeps it
current. Why a small tree of our own and not pydantic-settings: docs/dependencies.md, "Settings".
"""

from __future__ import annotations

import functools
import math
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import Field, dataclass, field, fields
from typing import Any

SETTING = "jetway.setting"  # the metadata key a leaf field carries


class Invalid(ValueError):
    """A setting's value breaks its rule; the message names the variable (runtime/entry.py prints it and stops)."""


# --- rules: how a value is read, and the words that say so -----------------------------------------------


@dataclass(frozen=True)
class Text:
    """Any text; `optional`: empty or unset is None (not configured)."""

    optional: bool = False
    words: str = "text"

    def parse(self, text: str) -> Any:
        return (text.strip() or None) if self.optional else text

    def describe(self) -> str:
        return self.words


@dataclass(frozen=True)
class Choice:
    options: tuple[str, ...]

    def parse(self, text: str) -> Any:
        value = text.strip().lower()
        if value not in self.options:
            raise Invalid(self.describe())
        return value

    def describe(self) -> str:
        return f"one of {', '.join(self.options)}"


TRUE, FALSE = ("true", "on", "1", "yes"), ("false", "off", "0", "no")


@dataclass(frozen=True)
class Flag:
    words: str = "true or false"

    def parse(self, text: str) -> Any:
        value = text.strip().lower()
        if value in TRUE:
            return True
        if value in FALSE:
            return False
        raise Invalid(self.describe())

    def describe(self) -> str:
        return self.words


@dataclass(frozen=True)
class Number:
    """A finite number within [least, most] (`above`: strictly above `least`); `whole` for an integer."""

    least: float = -math.inf
    most: float = math.inf
    above: bool = False
    whole: bool = False
    unit: str = ""  # "seconds", "events": said after "number of"

    def parse(self, text: str) -> Any:
        try:
            value: float = int(text) if self.whole else float(text)
        except ValueError:
            raise Invalid(self.describe()) from None
        low_ok = value > self.least if self.above else value >= self.least
        if not (math.isfinite(value) and low_ok and value <= self.most):
            raise Invalid(self.describe())
        return value

    def describe(self) -> str:
        kind = "whole number" if self.whole else "number"
        noun = f"{kind} of {self.unit}" if self.unit else kind
        if self.above and self.least == 0:
            head = f"a positive {noun}"
            return head if math.isinf(self.most) else f"{head}, at most {self.most:g}"
        if math.isfinite(self.least) and math.isfinite(self.most):
            return f"a {noun} from {self.least:g} to {self.most:g}"
        if math.isfinite(self.least):
            return f"a {noun}, {self.least:g} or more" if not self.above else f"a {noun} above {self.least:g}"
        return f"a {noun}"


def seconds(most: float = math.inf) -> Number:
    return Number(least=0, most=most, above=True, unit="seconds")


def whole(least: int = 1, most: float = math.inf, unit: str = "") -> Number:
    return Number(least=least, most=most, whole=True, unit=unit)


PORT = Number(least=1, most=65535, whole=True, unit="")


@dataclass(frozen=True)
class OrWord:
    """A `rule`'s value, or a word that stands for `value` ("unlimited", "forever")."""

    rule: Number
    word: str
    value: Any

    def parse(self, text: str) -> Any:
        if text.strip().lower() == self.word:
            return self.value
        try:
            return self.rule.parse(text)
        except Invalid:
            raise Invalid(self.describe()) from None

    def describe(self) -> str:
        return f"{self.rule.describe()}, or '{self.word}'"


@dataclass(frozen=True)
class Names:
    """A comma-separated list; blanks dropped."""

    words: str = "names, comma-separated"

    def parse(self, text: str) -> Any:
        return tuple(part.strip() for part in text.split(",") if part.strip())

    def describe(self) -> str:
        return self.words


@dataclass(frozen=True)
class PortSpan:
    def parse(self, text: str) -> Any:
        low, dash, high = text.strip().partition("-")
        try:
            first, last = PORT.parse(low), PORT.parse(high)
        except Invalid:
            raise Invalid(self.describe()) from None
        if not dash or first > last:
            raise Invalid(self.describe())
        return (first, last)

    def describe(self) -> str:
        return "two ports LOW-HIGH, LOW at most HIGH"


@dataclass(frozen=True)
class Setting:
    env: str
    rule: Any  # one of the rules above: parse(text) -> value, describe() -> words
    default: Any
    help: str
    shown: str | None = None  # how the default reads in docs/settings.md when its value says too little
    secret: bool = False  # never echoed back in an error


def setting(env: str, rule: Any, default: Any, help: str, *, shown: str | None = None, secret: bool = False) -> Any:
    return field(default=default, metadata={SETTING: Setting(env, rule, default, help, shown, secret)})


# --- the tree ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Process:
    """How a service process (`python -m services.<name>`, runtime/entry.py) runs."""

    mode: str = setting(
        "JETWAY_MODE",
        Choice(("standalone", "cluster")),
        "standalone",
        "`cluster`: talk to Kubernetes (in-cluster account, else $KUBECONFIG)",
    )
    log_level: str = setting("JETWAY_LOG_LEVEL", Choice(("debug", "info", "warning", "error")), "info", "the lowest level logged")
    health_host: str = setting("JETWAY_HEALTH_HOST", Text(), "0.0.0.0", "where `/healthz`, `/readyz` and `/metrics` are served")
    health_port: int = setting("JETWAY_HEALTH_PORT", PORT, 8090, "the port of `/healthz`, `/readyz` and `/metrics`")
    dev_reload: bool = setting("JETWAY_DEV_RELOAD", Flag(), False, "the Tilt stack: drain and start again when a source file changes")

    @property
    def cluster(self) -> bool:
        return self.mode == "cluster"


@dataclass(frozen=True)
class Nats:
    """The connection to NATS: where, and as which user (contracts/natsauth.py says what each user may do)."""

    url: str = setting("JETWAY_NATS_URL", Text(words="nats:// URLs, comma-separated"), "nats://127.0.0.1:4222", "the NATS server(s)")
    user: str = setting("JETWAY_NATS_USER", Text(), "", "this service's own NATS user (deploy/: the Secret `jetway-nats-users`)")
    password: str = setting("JETWAY_NATS_PASSWORD", Text(), "", "that user's password; set both or neither", secret=True)

    def __post_init__(self) -> None:
        if bool(self.user) != bool(self.password):
            raise Invalid("JETWAY_NATS_USER and JETWAY_NATS_PASSWORD go together: set both or neither")


@dataclass(frozen=True)
class Streams:
    """What the event stream keeps (docs/event-store.md)."""

    history_per_facet: int = setting(
        "JETWAY_HISTORY_PER_FACET",
        OrWord(whole(1, unit="events"), "unlimited", -1),
        64,
        "events kept per facet: the latest ones, so the current state is always there (`unlimited`: -1)",
    )
    deleted_history: float = setting(
        "JETWAY_DELETED_HISTORY_SECONDS",
        OrWord(seconds(), "forever", 0.0),
        7 * 24 * 3600.0,
        "how long after its deletion a resource's history is purged (`forever`: 0, never)",
    )


@dataclass(frozen=True)
class Snapshots:
    """When each runner stores a snapshot of its projection (runtime/snapshots.py)."""

    enabled: bool = setting("JETWAY_SNAPSHOTS", Flag(words="on or off"), True, "snapshots written and read at all")
    every_events: int = setting("JETWAY_SNAPSHOT_EVERY_EVENTS", whole(1, unit="events"), 10_000, "a snapshot after this many folded events")
    every_seconds: float = setting(
        "JETWAY_SNAPSHOT_EVERY_SECONDS", seconds(), 300.0, "or this long after the last one, when anything was folded"
    )


@dataclass(frozen=True)
class Leases:
    """Replicas share a service's partitions through leases (runtime/leases.py, docs/partitioning.md)."""

    replica: str | None = setting(
        "JETWAY_REPLICA", Text(optional=True), None, "this process's name among the replicas", shown="the host name (a pod's name)"
    )
    ttl: float = setting(
        "JETWAY_LEASE_TTL_SECONDS",
        Number(least=1, most=600, unit="seconds"),
        10.0,
        "how long a lease outlives its last renewal: a replica that dies gives its share up within it",
    )


@dataclass(frozen=True)
class Kube:
    """A service writing Kubernetes objects (`JETWAY_MODE=cluster`)."""

    resync_seconds: float = setting("JETWAY_RESYNC_SECONDS", seconds(), 30.0, "how often a cluster service re-asserts what it wrote")


@dataclass(frozen=True)
class Scaler:
    """The autoscaler (services/scaler/, docs/autoscaling.md)."""

    tick: float = setting(
        "JETWAY_SCALER_TICK_SECONDS",
        Number(least=0.05, most=60, unit="seconds"),
        1.0,
        "how often every autoscaled deployment is decided again",
    )
    stale: float = setting(
        "JETWAY_SCALER_STALE_SECONDS",
        Number(least=1, most=600, unit="seconds"),
        15.0,
        "a member's load reading older than this is forgotten (three of the router's probe ticks)",
    )


@dataclass(frozen=True)
class Dial:
    """Which member addresses Jetway dials (the watcher admits, the router connects)."""

    allow_link_local: bool = setting(
        "JETWAY_ALLOW_LINK_LOCAL", Flag(), False, "members at link-local addresses (cloud metadata's) may be applied and dialled"
    )


@dataclass(frozen=True)
class Watcher:
    """The watcher in a cluster: ingest, status and the admission webhook (standalone, `jetway up` runs it)."""

    watch_namespace: str | None = setting(
        "JETWAY_WATCH_NAMESPACE", Text(optional=True), None, "in a cluster: the namespace watched", shown="every namespace"
    )


@dataclass(frozen=True)
class Webhook:
    """The watcher's admission webhook (in a cluster), and its certificate."""

    enabled: bool = setting("JETWAY_WEBHOOK", Flag(), True, "serve the admission webhook")
    port: int = setting("JETWAY_WEBHOOK_PORT", PORT, 9443, "its TLS port")
    cert_dir: str | None = setting(
        "JETWAY_WEBHOOK_CERT_DIR", Text(optional=True), None, "a mounted `tls.crt` and `tls.key` (cert-manager's)", shown="issued by Jetway"
    )
    namespace: str = setting(
        "JETWAY_NAMESPACE", Text(), "jetway-system", "the namespace of the certificate's Secret and the webhook's Service"
    )
    secret: str = setting("JETWAY_WEBHOOK_SECRET", Text(), "jetway-webhook-tls", "the Secret Jetway issues the certificate into")
    service: str = setting("JETWAY_WEBHOOK_SERVICE", Text(), "jetway-webhook", "the Service the certificate names")
    name: str = setting("JETWAY_WEBHOOK_NAME", Text(), "jetway", "the webhook configurations given the CA bundle")


@dataclass(frozen=True)
class Gateway:
    """The Gateway API control plane (services/gateway, in a cluster)."""

    gateway: str | None = setting(
        "JETWAY_GATEWAY", Text(optional=True, words="namespace/name"), None, "the Gateway to attach routes to", shown="discovered"
    )
    epp_image: str | None = setting(
        "JETWAY_EPP_IMAGE", Text(optional=True, words="an image reference"), None, "the endpoint picker's image", shown="the pinned one"
    )


@dataclass(frozen=True)
class Images:
    """Direct vLLM image tags resolved to digests (services/workload/registry.py)."""

    resolution: str | None = setting(
        "JETWAY_IMAGE_RESOLUTION",
        Choice(("registry", "off")),
        None,
        "`registry`: ask the registry for each tag's digest",
        shown="registry in a cluster, off standalone",
    )
    plain_http: tuple[str, ...] = setting(
        "JETWAY_REGISTRY_PLAIN_HTTP", Names(words="hosts, comma-separated"), (), "registries reached over plain HTTP (besides loopback)"
    )


@dataclass(frozen=True)
class Router:
    """The router (docs/router.md): where it listens, its limits, its policy, its client keys, its held requests, its prober."""

    host: str = setting("JETWAY_ROUTER_HOST", Text(), "0.0.0.0", "where the router listens")
    port: int = setting("JETWAY_ROUTER_PORT", PORT, 8080, "its port")
    header_timeout: float = setting("JETWAY_ROUTER_HEADER_TIMEOUT", seconds(), 10.0, "a request's headers arrive within this; then 408")
    body_timeout: float = setting("JETWAY_ROUTER_BODY_TIMEOUT", seconds(), 60.0, "its body within this after the headers")
    idle_timeout: float = setting(
        "JETWAY_ROUTER_IDLE_TIMEOUT", seconds(), 75.0, "a keep-alive connection with no request is closed after this"
    )
    max_connections: int = setting("JETWAY_ROUTER_MAX_CONNECTIONS", whole(1), 4096, "connections past this get a 503")
    drain_timeout: float = setting("JETWAY_ROUTER_DRAIN_TIMEOUT", seconds(), 30.0, "on stop, requests in progress may finish within this")
    policy: str = setting(
        "JETWAY_ROUTER_POLICY", Choice(("prefix-cache", "least-outstanding", "round-robin")), "prefix-cache", "how a member is picked"
    )
    prefix_weight: float = setting("JETWAY_ROUTER_PREFIX_WEIGHT", Number(least=0), 3.0, "prefix-cache: a whole prompt cached is worth this")
    queue_weight: float = setting("JETWAY_ROUTER_QUEUE_WEIGHT", Number(least=0), 2.0, "the most loaded candidate costs this")
    kv_weight: float = setting("JETWAY_ROUTER_KV_WEIGHT", Number(least=0), 1.0, "a full KV cache costs this")
    load_bound: float = setting("JETWAY_ROUTER_LOAD_BOUND", Number(least=1), 1.25, "no member past this multiple of the average load")
    block_chars: int = setting("JETWAY_ROUTER_BLOCK_CHARS", whole(1), 64, "characters per hashed prompt block")
    max_blocks: int = setting("JETWAY_ROUTER_MAX_BLOCKS", whole(1), 256, "blocks hashed per prompt")
    index_blocks: int = setting("JETWAY_ROUTER_INDEX_BLOCKS", whole(1), 262_144, "block hashes the prefix index remembers")
    client_keys: str | None = setting(
        "JETWAY_ROUTER_CLIENT_KEYS",
        Choice(("required", "off")),
        None,
        "`required`: only requests with a client key",
        shown="required in a cluster, off standalone",
    )
    client_keys_file: str = setting(
        "JETWAY_CLIENT_KEYS_FILE",
        Text(),
        "/var/run/jetway/client-keys/client-keys",
        "the keys' file (the mounted Secret `jetway-client-keys`)",
    )
    limits: str = setting(
        "JETWAY_ROUTER_LIMITS",
        Choice(("shared", "replica")),
        "shared",
        "`shared`: a client key's rpm and tpm hold across all router replicas (a ledger in NATS KV); `replica`: each "
        "replica counts its own",
    )
    records: float = setting(
        "JETWAY_ROUTER_RECORDS",
        Number(least=0, most=1),
        1.0,
        "the fraction of routed requests that leave a routing record (stream JETWAY_ROUTING); 0: none",
    )
    warm_seconds: float = setting(
        "JETWAY_ROUTER_WARM_SECONDS",
        Number(least=0, unit="seconds"),
        120.0,
        "at start, the routing records of this many seconds back teach a replica where prefixes and sessions went; 0: none",
    )
    records_max_age: float = setting(
        "JETWAY_ROUTING_RECORDS_MAX_AGE", seconds(), 86400.0, "how long routing records are kept (when the stream is made)"
    )
    records_max_bytes: int = setting(
        "JETWAY_ROUTING_RECORDS_MAX_BYTES",
        whole(1 << 20, unit="bytes"),
        256 << 20,
        "the routing records' stream's size; the oldest go first (when the stream is made)",
    )
    hold_max: int = setting(
        "JETWAY_ROUTER_HOLD_MAX",
        whole(0, unit="requests"),
        64,
        "requests held per model while it starts from zero (a member marked scale-from-zero, none ready); past it a 503 "
        "at once; 0: none held",
    )
    hold_seconds: float = setting(
        "JETWAY_ROUTER_HOLD_SECONDS", seconds(3600), 60.0, "how long a request is held for a model starting from zero; then a 503"
    )
    fair_per_member: int = setting(
        "JETWAY_ROUTER_FAIR_PER_MEMBER",
        whole(0, unit="requests"),
        0,
        "requests in flight from this router to one member before a model's requests queue, released fairly by client key "
        "in tokens (docs/router.md, Fair tenants); 0: no queue",
    )
    fair_queue_max: int = setting(
        "JETWAY_ROUTER_FAIR_QUEUE_MAX", whole(1, unit="requests"), 256, "requests waiting per model when its members are full; then a 503"
    )
    fair_tenant_max: int = setting(
        "JETWAY_ROUTER_FAIR_TENANT_MAX",
        whole(1, unit="requests"),
        64,
        "of them, requests of one client key (its share of the queue); past it a 429",
    )
    fair_seconds: float = setting(
        "JETWAY_ROUTER_FAIR_SECONDS", seconds(3600), 30.0, "how long a request waits in the fair queue for a free member; then a 503"
    )
    probe_interval: float = setting("JETWAY_PROBE_INTERVAL", seconds(), 5.0, "how often every member is probed")
    secrets_dir: str = setting(
        "JETWAY_SECRETS_DIR", Text(), "/var/run/jetway/secrets", "the members' credentials (the mounted secret store)"
    )


@dataclass(frozen=True)
class Console:
    """The web console in a cluster (services/console, docs/console.md)."""

    host: str = setting("JETWAY_CONSOLE_HOST", Text(), "0.0.0.0", "where the pages are served")
    port: int = setting("JETWAY_CONSOLE_PORT", PORT, 8080, "their port")
    router_url: str = setting("JETWAY_ROUTER_URL", Text(), "http://jetway-router:8080/v1", "the router the playground relays to")
    router_metrics: str = setting(
        "JETWAY_ROUTER_METRICS",
        Text(words="host:port"),
        "jetway-router-metrics:8090",
        "a name for every router pod, and their `/metrics` port",
    )
    recheck_seconds: float = setting(
        "JETWAY_CONSOLE_RECHECK_SECONDS", seconds(3600), 60.0, "how soon a revoked or expired user token stops working"
    )
    kube_ca_file: str | None = setting(
        "JETWAY_KUBE_CA_FILE", Text(optional=True), None, "the API server's CA inside a pod", shown="the service account's"
    )


@dataclass(frozen=True)
class Cli:
    """The `jetway` command."""

    data_dir: str | None = setting(
        "JETWAY_DATA_DIR",
        Text(optional=True),
        None,
        "where `jetway up` keeps its data",
        shown="$XDG_DATA_HOME/jetway or ~/.local/share/jetway",
    )
    debug: bool = setting("JETWAY_DEBUG", Flag(), False, "print the traceback of an unexpected error")


@dataclass(frozen=True)
class Testing:
    """For the test suite's parallel workers."""

    free_ports: tuple[int, int] | None = setting(
        "JETWAY_FREE_PORTS", PortSpan(), None, "hand out free ports from this range only", shown="any the kernel gives"
    )


@dataclass(frozen=True)
class Settings:
    process: Process = field(default_factory=Process)
    nats: Nats = field(default_factory=Nats)
    streams: Streams = field(default_factory=Streams)
    snapshots: Snapshots = field(default_factory=Snapshots)
    leases: Leases = field(default_factory=Leases)
    kube: Kube = field(default_factory=Kube)
    scaler: Scaler = field(default_factory=Scaler)
    dial: Dial = field(default_factory=Dial)
    watcher: Watcher = field(default_factory=Watcher)
    webhook: Webhook = field(default_factory=Webhook)
    gateway: Gateway = field(default_factory=Gateway)
    images: Images = field(default_factory=Images)
    router: Router = field(default_factory=Router)
    console: Console = field(default_factory=Console)
    cli: Cli = field(default_factory=Cli)
    testing: Testing = field(default_factory=Testing)


# --- reading ----------------------------------------------------------------------------------------------


def _groups() -> Iterator[tuple[Field[Any], type]]:
    for f in fields(Settings):
        assert callable(f.default_factory)
        yield f, f.default_factory  # type: ignore[misc]


def declared() -> Iterator[tuple[str, Setting]]:
    """(group name, setting) for every leaf, in the tree's order."""
    for g, cls in _groups():
        for f in fields(cls):
            yield g.name, f.metadata[SETTING]


def _value(spec: Setting, text: str) -> Any:
    try:
        return spec.rule.parse(text)
    except Invalid as exc:
        shown = "(hidden)" if spec.secret else repr(text)
        raise Invalid(f"{spec.env} must be {exc} (got {shown})") from None


def load(environ: Mapping[str, str]) -> Settings:
    """The tree from `environ`: defaults where a variable is unset. Invalid (a ValueError) names the first variable
    whose value breaks its rule."""
    made: dict[str, Any] = {}
    for g, cls in _groups():
        values = {}
        for f in fields(cls):
            spec: Setting = f.metadata[SETTING]
            text = environ.get(spec.env)
            if text is not None:
                values[f.name] = _value(spec, text)
        made[g.name] = cls(**values)
    return Settings(**made)


def read() -> Settings:
    """The settings as this process's environment holds them now: for `jetway up` and the other commands, which
    parse them when they start (tests run those in-process, with an environment of their own)."""
    return load(os.environ)


@functools.cache
def process() -> Settings:
    """This process's settings, read once (runtime/entry.py reads them first, so a bad value stops the start)."""
    return read()


# --- docs/settings.md -------------------------------------------------------------------------------------


def _default_text(spec: Setting) -> str:
    if spec.shown is not None:
        return spec.shown
    value = spec.default
    if isinstance(value, bool):
        return "on" if value and isinstance(spec.rule, Flag) and spec.rule.words == "on or off" else str(value).lower()
    if isinstance(value, float) and value.is_integer():
        return f"`{int(value)}`"
    if value in ("", ()):
        return "unset"
    return f"`{value}`"


def markdown() -> str:
    lines = [
        "# Settings",
        "",
        "<!-- generated by `python -m runtime.settings --markdown` from runtime/settings.py; tests/runtime/test_settings.py",
        "     fails when this file is stale -->",
        "",
        "Every `JETWAY_*` environment variable Jetway reads, declared once in `runtime/settings.py` and read when a",
        "process starts. A value that breaks its rule stops the start with one line naming the variable, the rule",
        "and the value given. `jetway up` also takes the router's as flags (`jetway up --help`), which win.",
    ]
    groups = {g.name: cls for g, cls in _groups()}
    for name, cls in groups.items():
        doc = " ".join((cls.__doc__ or "").split())
        lines += ["", f"## {name}", "", doc, "", "| variable | value | default | what it does |", "| --- | --- | --- | --- |"]
        for f in fields(cls):
            spec: Setting = f.metadata[SETTING]
            lines.append(f"| `{spec.env}` | {spec.rule.describe()} | {_default_text(spec)} | {spec.help} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if argv == ["--markdown"]:
        sys.stdout.write(markdown())
        return 0
    if argv == ["--check"]:  # this environment's values against their rules
        try:
            read()
        except Invalid as exc:
            print(exc, file=sys.stderr)
            return 2
        return 0
    print("usage: python -m runtime.settings --markdown | --check", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
