"""Who may say what on the bus: one NATS user per service process, with publish and subscribe
rights on only its own facets and what its runners need of JetStream (docs/cluster.md, "NATS users").

Each facet has exactly one writer (contracts/subjects.py); here that is enforced by the server
instead of by convention: the selector's user cannot publish on `...workload`, so a bug or a
compromised pod in one service cannot forge another's decisions. Everything here is pure (no I/O):
`permissions()` states the rights, `render_authorization()` the NATS server's `authorization`
block from them (`jetway generate` writes it to deploy/base/nats-auth.conf), and
`secret_manifest()` the Kubernetes Secret of given passwords (`jetway nats-users secret` prints one
with fresh passwords: cli/natsusers.py).

Passwords are not in the server's config: it names them `$JETWAY_NATS_PASSWORD_<USER>`, which the
server reads from its environment (the StatefulSet fills it from the Secret). NATS parses such a
value as a config token, so a password must start with a letter and hold only letters and digits
(`0123` would be read as a number, `true` as a boolean); `new_password()` makes such ones.

Reading is not narrowed: every runner reads the event log through ordered consumers of its own
(the whole log, or a partition's events, filtering in the process: docs/event-store.md, several filter
subjects make a consumer ~50x slower), and JetStream's direct get and ordered consumers take their
subject in the request body, where a subject permission cannot see it. What is narrowed is writing
(facets, dead letters, signals, its own runners' leases and snapshots) and its replies (its inbox
prefix is `_INBOX.<user>`, so no other service can read the answers it gets, such as a compute
agent's inference responses).
"""

from __future__ import annotations

import json
import secrets
import string
from dataclasses import dataclass

from contracts.routing import INFLIGHT_PREFIX, PLACE_PREFIX, PLACEMENT_PREFIX, ROUTING_PREFIX, ROUTING_STREAM
from contracts.subjects import (
    BINDING,
    DLQ_PREFIX,
    GATEWAY,
    OBSERVED,
    REPORTED,
    ROUTER,
    SCALER,
    SELECTOR,
    SIGNAL_PREFIX,
    SPEC,
    STORAGE,
    WATCHER,
    WORKLOAD,
    kind_filter,
)

EVENTS_STREAM = "JETWAY_EVENTS"  # runtime.bus's names (contracts cannot import runtime; a test keeps them equal)
DLQ_STREAM = "JETWAY_DLQ"
SECRET_NAME = "jetway-nats-users"  # one key per user: its password
NAMESPACE = "jetway-system"
USER_ENV = "JETWAY_NATS_USER"  # what a service process reads (runtime/bus.py, Credentials.from_env)
PASSWORD_ENV = "JETWAY_NATS_PASSWORD"
PROBE_SIGNALS = f"{SIGNAL_PREFIX}.probed"  # contracts.router.PROBE_SIGNALS
LOAD_SIGNALS = f"{SIGNAL_PREFIX}.load"  # contracts.scaling.LOAD_SIGNALS: each member's load, for the scaler
DEMAND_SIGNALS = f"{SIGNAL_PREFIX}.demand"  # contracts.scaling.DEMAND_SIGNALS: requests held for a deployment at zero
COMPUTE_SIGNALS = f"{SIGNAL_PREFIX}.compute.*.*"  # services.router.signal.subject(agent, operation)

# Kinds as the subjects spell them come from Key.kind_token (the kind, lower-cased).
JETWAY_KINDS = ("ModelDeployment", "InferenceProviderConfig", "AgentDeployment", "AgentProviderConfig", "InferencePoolMember")
PROVIDER_CONFIGS = ("InferenceProviderConfig", "AgentProviderConfig")
OWNERS = ("ModelDeployment", "AgentDeployment")  # services.watcher.decide.ingest.OWNER_KINDS


@dataclass(frozen=True)
class Writes:
    """A facet a service appends to, on the kinds it appends it for."""

    facet: str
    kinds: tuple[str, ...]


@dataclass(frozen=True)
class ServiceUser:
    """One service process's NATS identity.

    `runners` are the Runner names in that process (runtime/service.py): each has its lease group
    `<runner>` in the lease bucket, its snapshot bucket and its dead-letter subject `jetway.dlq.<runner>`."""

    user: str
    runners: tuple[str, ...]
    writes: tuple[Writes, ...]
    publishes: tuple[str, ...] = ()  # core NATS subjects beyond the events (signals)
    subscribes: tuple[str, ...] = ()
    manages_streams: bool = True  # False: may create a missing stream, never update one (a reader: the console)

    @property
    def password_env(self) -> str:
        """The variable the NATS server reads this user's password from."""
        return f"{PASSWORD_ENV}_{self.user.upper().replace('-', '_')}"


# What each service's code emits, read from it (services/*/handlers.py, services/watcher/cluster.py,
# services/gateway/handlers.py). Every `spec` is the watcher's: the workload's self-registration of the
# built-in InferenceProviderConfigs goes to the API server in a cluster, and standalone it is a request on
# the workload's own facet (ProviderRegistered) that the watcher records.
BUDGET_BUCKET = "jetway-router-budgets"  # services.router.budget's names (a test keeps them equal)


def budget_subjects() -> tuple[str, ...]:
    """The router's ledger of client keys' limits (services/router/budget.py): its keys, written with a revision
    check, and read one at a time; the bucket made on first use."""
    stream = f"KV_{BUDGET_BUCKET}"
    return (
        f"$KV.{BUDGET_BUCKET}.>",
        *(f"$JS.API.STREAM.{verb}.{stream}" for verb in ("INFO", "CREATE")),
        f"$JS.API.DIRECT.GET.{stream}.>",
    )


def routing_subjects(*, write: bool) -> tuple[str, ...]:
    """The routing records' stream (contracts/routing.py): the router publishes its batches and makes the stream on
    first use; the console (and `jetway replay routing` as its user) reads it with ordered consumers."""
    if write:
        return (f"{ROUTING_PREFIX}.>", *(f"$JS.API.STREAM.{verb}.{ROUTING_STREAM}" for verb in ("INFO", "CREATE")))
    return (
        f"$JS.API.STREAM.INFO.{ROUTING_STREAM}",
        f"$JS.API.CONSUMER.CREATE.{ROUTING_STREAM}",
        f"$JS.API.CONSUMER.INFO.{ROUTING_STREAM}.*",
        f"$JS.FC.{ROUTING_STREAM}.>",
    )


def inbox_prefix(user: str) -> str:
    """The reply-subject prefix a user's client takes (nats-py's `inbox_prefix`): replies to one
    service reach only that service."""
    return f"_INBOX.{user}"


SERVICES: tuple[ServiceUser, ...] = (
    ServiceUser(
        "watcher",
        ("watcher",),
        (
            Writes(SPEC, JETWAY_KINDS),  # ingest and the standalone apply API
            Writes(WATCHER, (*JETWAY_KINDS, "Cluster")),  # refusals; discovery (Cluster/discovery)
            Writes(REPORTED, PROVIDER_CONFIGS),  # a provider's own status
            Writes(OBSERVED, (*OWNERS, "Gateway", "InferencePool")),  # owned objects on their owner; the rest on themselves
        ),
        # a deleted resource's history, after the grace period (runtime/bus.py). The residual: the purge's filter is
        # in the request's body, so this right would let a compromised watcher purge any subject of the log.
        publishes=(f"$JS.API.STREAM.PURGE.{EVENTS_STREAM}",),
        subscribes=(PROBE_SIGNALS,),
    ),
    ServiceUser("selector", ("selector",), (Writes(SELECTOR, ("ModelDeployment", "InferenceProviderConfig")),)),
    ServiceUser("storage", ("storage",), (Writes(STORAGE, ("ModelDeployment",)),)),
    ServiceUser("workload", ("workload",), (Writes(WORKLOAD, ("ModelDeployment", "InferenceProviderConfig")),)),
    ServiceUser(
        "router",
        ("router",),  # the data plane: the OpenAI-compatible router and its prober
        (Writes(ROUTER, ("InferencePoolMember",)),),
        # probe times for the watcher; requests to compute agents; the members' load and held demand for the scaler;
        # the client keys' shared limits
        publishes=(
            PROBE_SIGNALS,
            COMPUTE_SIGNALS,
            LOAD_SIGNALS,
            DEMAND_SIGNALS,
            *budget_subjects(),
            *routing_subjects(write=True),
            *routing_subjects(write=False),  # the recent records, read at start (services/router/learn.py)
            f"{PLACEMENT_PREFIX}.>",  # where each request went, told to the other replicas
            f"{INFLIGHT_PREFIX}.>",  # its requests in flight per member, for the other replicas' load terms
            f"{PLACE_PREFIX}.>",  # a new conversation's decision, asked of the placer replica
            f"{inbox_prefix('router')}.>",  # the placer's answer, to the asking replica's inbox (the same user)
        ),
        # the other replicas' placements (where prefixes and sessions went) and load (who they are); the placer's asks
        subscribes=(f"{PLACEMENT_PREFIX}.>", f"{INFLIGHT_PREFIX}.>", f"{PLACE_PREFIX}.>"),
    ),
    ServiceUser("gateway", ("gateway",), (Writes(GATEWAY, ("ModelDeployment", "Gateway")),)),  # Gateways: their admission
    ServiceUser("binding", ("binding",), (Writes(BINDING, ("AgentDeployment", "AgentProviderConfig")),)),
    # the autoscaler: a deployment's replica count, from the load the router publishes
    ServiceUser("scaler", ("scaler",), (Writes(SCALER, ("ModelDeployment",)),), subscribes=(LOAD_SIGNALS, DEMAND_SIGNALS)),
    # the console in a cluster writes no facet (a change goes to Kubernetes as the user); it reads the log and
    # the members' probe times, and cannot change the streams' settings
    ServiceUser("console", ("console",), (), publishes=routing_subjects(write=False), subscribes=(PROBE_SIGNALS,), manages_streams=False),
)


def service_user(user: str) -> ServiceUser:
    for found in SERVICES:
        if found.user == user:
            return found
    raise KeyError(user)


def facet_subjects(service: ServiceUser) -> list[str]:
    return [kind_filter(kind, w.facet) for w in service.writes for kind in w.kinds]


def jetstream_subjects(service: ServiceUser) -> list[str]:
    """The JetStream API a service's runners call (runtime/bus.py, runtime/service.py, runtime/eventstore.py)."""
    found = []
    for stream in (EVENTS_STREAM, DLQ_STREAM):
        # Broad, and the one residual: every service makes the streams at start-up (ensure_streams), so
        # each may create and update them; a compromised service could change their retention. Creating
        # them in one place (an install Job) would let the services keep INFO only.
        verbs = ("INFO", "CREATE", "UPDATE") if service.manages_streams else ("INFO", "CREATE")
        found += [f"$JS.API.STREAM.{verb}.{stream}" for verb in verbs]
    found += [
        # Ordered consumers (scan, follow) are ephemeral and server-named: created on the stream's bare
        # subject, which the server refuses for a durable, and their info asked by a name not known in
        # advance, hence `*` (info is read-only).
        f"$JS.API.CONSUMER.CREATE.{EVENTS_STREAM}",
        f"$JS.API.CONSUMER.INFO.{EVENTS_STREAM}.*",
        # The last event of a subject (an append's conflict check): the subject is the request's, any.
        f"$JS.API.DIRECT.GET.{EVENTS_STREAM}.>",
        # The next stored event from a sequence (the runner tells trimmed history from a shared consumer).
        f"$JS.API.DIRECT.GET.{EVENTS_STREAM}",
        # Flow-control answers of those ordered consumers (`$JS.FC.<stream>.<consumer>.<token>`).
        f"$JS.FC.{EVENTS_STREAM}.>",
    ]
    found += lease_subjects(service)
    for runner in service.runners:
        found += snapshot_subjects(runner)
    return found


LEASE_BUCKET = "jetway-leases"  # runtime.leases's names (a test keeps them equal)


def lease_subjects(service: ServiceUser) -> list[str]:
    """The lease bucket (runtime/leases.py): a service writes the keys of its own runners' groups only
    (`<runner>.>`: its leases and its replicas' membership), reads the bucket, and may make it on first use."""
    stream = f"KV_{LEASE_BUCKET}"
    return [
        *(f"$KV.{LEASE_BUCKET}.{runner}.>" for runner in service.runners),
        # UPDATE: a bucket made with one copy while a cluster formed is raised to three (runtime/leases.py); the
        # residual: a compromised service could change the bucket's settings (its TTL is read from there)
        *(f"$JS.API.STREAM.{verb}.{stream}" for verb in ("INFO", "CREATE", "UPDATE", "MSG.GET")),
        f"$JS.API.DIRECT.GET.{stream}.>",  # a key's last value (nats-py's create reads a deleted key's revision)
        f"$JS.API.CONSUMER.CREATE.{stream}",  # an ordered consumer reads the group's keys each tick
        f"$JS.API.CONSUMER.INFO.{stream}.*",  # how many it has to deliver
        f"$JS.FC.{stream}.>",
    ]


SNAPSHOT_BUCKET_PREFIX = "jetway-snapshots-"  # runtime.snapshots's names (a test keeps them equal)


def snapshot_subjects(runner: str) -> list[str]:
    """A runner's snapshot store (runtime/snapshots.py): an object store of its own, `jetway-snapshots-<runner>`,
    which no other service may read or write. The object store's API, as nats-py calls it, on that stream only."""
    bucket = f"{SNAPSHOT_BUCKET_PREFIX}{runner}"
    stream = f"OBJ_{bucket}"
    return [
        f"$O.{bucket}.>",  # its chunks and its meta entry (put)
        # bind, make, raise to three copies (runtime/snapshots.py, as the lease bucket), meta, old chunks
        *(f"$JS.API.STREAM.{verb}.{stream}" for verb in ("INFO", "CREATE", "UPDATE", "MSG.GET", "PURGE")),
        f"$JS.API.CONSUMER.CREATE.{stream}",  # an ordered consumer reads the chunks back
        f"$JS.FC.{stream}.>",  # its flow control
    ]


def permissions(service: ServiceUser) -> dict[str, list[str]]:
    """{"publish": [...], "subscribe": [...]}: every subject the service may use; nothing else is allowed."""
    publish = [
        *facet_subjects(service),
        *(f"{DLQ_PREFIX}.{runner}" for runner in service.runners),
        *service.publishes,
        *jetstream_subjects(service),
    ]
    subscribe = [f"{inbox_prefix(service.user)}.>", *service.subscribes]
    return {"publish": list(dict.fromkeys(publish)), "subscribe": list(dict.fromkeys(subscribe))}


def _quoted(subject: str) -> str:
    return json.dumps(subject)  # a quoted string: `$` in it is literal, not a variable


def render_authorization(services: tuple[ServiceUser, ...] = SERVICES) -> str:
    """The NATS server's `authorization` block: one user per service, its password from the environment."""
    lines = [
        "# Generated by `jetway generate` from contracts/natsauth.py; do not edit by hand.",
        "# Each service's own NATS user; passwords come from the environment (the Secret jetway-nats-users).",
        "authorization {",
        "  users = [",
    ]
    for service in services:
        rights = permissions(service)
        lines += ["    {", f"      user: {_quoted(service.user)}", f"      password: ${service.password_env}", "      permissions: {"]
        for direction in ("publish", "subscribe"):
            lines += [f"        {direction}: {{", "          allow: ["]
            lines += [f"            {_quoted(subject)}" for subject in rights[direction]]
            lines += ["          ]", "        }"]
        lines += ["      }", "    }"]
    lines += ["  ]", "}"]
    return "\n".join(lines) + "\n"


_ALPHABET = string.ascii_letters + string.digits


def valid_password(password: str) -> bool:
    """Whether NATS reads `password` back unchanged from a `$VARIABLE`: a letter, then letters and digits."""
    return len(password) >= 32 and password[0].isascii() and password[0].isalpha() and all(c in _ALPHABET for c in password)


def secret_manifest(passwords: dict[str, str], *, name: str = SECRET_NAME, namespace: str = NAMESPACE) -> dict[str, object]:
    """The Secret holding every user's password (`stringData`: kubectl encodes it)."""
    missing = [s.user for s in SERVICES if s.user not in passwords]
    if missing:
        raise ValueError(f"no password for {', '.join(missing)}")
    bad = [user for user, password in passwords.items() if not valid_password(password)]
    if bad:
        raise ValueError(f"passwords of {', '.join(bad)} must be 32+ letters and digits, starting with a letter")
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app.kubernetes.io/part-of": "jetway"}},
        "stringData": {s.user: passwords[s.user] for s in SERVICES},
    }


def new_password() -> str:
    """A fresh password of about 290 random bits: a letter, then 48 letters and digits."""
    return secrets.choice(string.ascii_letters) + "".join(secrets.choice(_ALPHABET) for _ in range(48))
