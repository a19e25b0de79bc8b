"""The five kinds Jetway serves: their names, scope and model, in one table."""

from __future__ import annotations

from dataclasses import dataclass

from contracts.agents import AgentDeployment, AgentProviderConfig
from contracts.meta import WireModel
from contracts.modeldeployment import ModelDeployment
from contracts.poolmember import InferencePoolMember
from contracts.providerconfig import InferenceProviderConfig
from contracts.subjects import Key

AIRUNWAY_GROUP = "airunway.ai"
AIRDRESS_GROUP = "airdress.co"
VERSION = "v1alpha1"


@dataclass(frozen=True)
class KindInfo:
    kind: str
    group: str
    model: type[WireModel]
    plural: str
    short_names: tuple[str, ...]
    namespaced: bool
    summary_condition_types: tuple[str, ...]
    description: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{VERSION}"

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def token(self) -> str:
        """The kind as it appears in event subjects and CLI references."""
        return self.kind.lower()


KINDS: dict[str, KindInfo] = {
    info.kind: info
    for info in (
        KindInfo(
            "ModelDeployment",
            AIRUNWAY_GROUP,
            ModelDeployment,
            "modeldeployments",
            ("md", "mdep"),
            True,
            ("Ready",),
            "Unified API for deploying ML models.",
        ),
        KindInfo(
            "InferenceProviderConfig",
            AIRUNWAY_GROUP,
            InferenceProviderConfig,
            "inferenceproviderconfigs",
            ("ipc",),
            False,
            ("Ready",),
            "Provider self-registration: capabilities and selection rules.",
        ),
        KindInfo(
            "AgentProviderConfig",
            AIRUNWAY_GROUP,
            AgentProviderConfig,
            "agentproviderconfigs",
            ("apc",),
            False,
            ("Ready",),
            "Agent framework registration: backend, catalog and install guidance.",
        ),
        KindInfo(
            "AgentDeployment",
            AIRUNWAY_GROUP,
            AgentDeployment,
            "agentdeployments",
            ("ad", "agent"),
            True,
            ("Ready",),
            "An agent run by a framework, bound to one model endpoint.",
        ),
        KindInfo(
            "InferencePoolMember",
            AIRDRESS_GROUP,
            InferencePoolMember,
            "inferencepoolmembers",
            ("ipm", "member"),
            False,
            ("Healthy",),
            "An upstream that the inference router sends traffic to.",
        ),
    )
}


def resolve_kind(reference: str) -> KindInfo | None:
    """A kind from what a user types: `ModelDeployment`, `modeldeployments`, `md`, `ipm`."""
    if reference in KINDS:
        return KINDS[reference]
    wanted = reference.lower()
    for info in KINDS.values():
        if wanted in (info.kind.lower(), info.plural, *info.short_names):
            return info
    return None


# Keys of what the cluster tells Jetway about, beyond its own kinds (Kubernetes mode): a provider's own InferencePool too.
OBSERVED_KINDS = ("Cluster", "Gateway", "InferencePool")
_BY_TOKEN = {info.token: info.kind for info in KINDS.values()} | {kind.lower(): kind for kind in OBSERVED_KINDS}


def kind_of_token(token: str) -> str:
    """The kind a subject's kind token stands for (`modeldeployment` → `ModelDeployment`)."""
    return _BY_TOKEN.get(token, token)


def key_of(kind: str, namespace: str | None, name: str) -> Key:
    """The one key of a resource, from a manifest or from the cluster: a namespaced kind whose manifest names no
    namespace is in `default` (as kubectl puts it there); a cluster-scoped kind's namespace is ignored."""
    return Key(kind, (namespace or "default") if KINDS[kind].namespaced else "", name)
