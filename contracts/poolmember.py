"""InferencePoolMember (airdress.co/v1alpha1): an upstream the inference router sends traffic to.

Shaped after the Airdress operator's published schema (v0.1.97): `spec`, each `models[]` item
and `traits` reject unknown fields; `metadata` accepts the server-filled fields a `get` returns.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field

from contracts.meta import Condition, WireModel

API_VERSION = "airdress.co/v1alpha1"
SCHEMA_ID = "https://schemas.airdress.co/operator/InferencePoolMember/v1.json"

Backend = Literal["vllm-openai", "echo"]
Transport = Literal["http-direct", "operator-signal"]
MemberPhase = Literal["Pending", "Healthy", "Failed"]

# A member's API formats are labels, since `traits` rejects unknown fields: `formats.jetway.dev/<format>: "true"`
# adds one to its backend's defaults, "false" takes one away (services/router/apis.py has the formats).
FORMAT_LABEL = "formats.jetway.dev/"
PROVIDER_FORMATS = ("openai-chat", "openai-responses", "anthropic-messages")  # the formats a provider's apiFormats names


def format_labels(formats: list[str]) -> dict[str, str]:
    """The labels of a member generated for a provider that speaks `formats` (its effective `apiFormats`): each
    format a provider can name is on when named, off when not."""
    return {FORMAT_LABEL + f: "true" if f in formats else "false" for f in PROVIDER_FORMATS}


class MemberMeta(WireModel):
    # The published schema leaves metadata open; what a `get` adds round-trips through `apply`.
    model_config = ConfigDict(extra="allow", strict=True)

    name: Annotated[str, Field(min_length=1, max_length=253)]
    namespace: str | None = Field(default=None, description="Accepted for Kubernetes familiarity but ignored: one namespace per operator.")
    labels: dict[str, str] | None = None
    resourceVersion: str | None = Field(
        default=None,
        description="Optimistic concurrency token: when present, apply is rejected with 409 unless it "
        "matches the stored resource_version. When absent, the last writer wins.",
    )


class MemberModel(WireModel):
    name: str = Field(description="Model identifier the upstream returns from GET /v1/models.")
    contextWindow: Annotated[int, Field(ge=0, le=2**32 - 1)] | None = Field(
        default=None, description="Optional context-window hint, used to pre-reject oversized requests."
    )


class MemberTraits(WireModel):
    supportsMultiConversation: bool = Field(
        default=True,
        description="Whether this backend can serve more than one concurrent, independent conversation.",
    )


class InferencePoolMemberSpec(WireModel):
    backend: Backend = Field(description='"vllm-openai" (an OpenAI-API upstream) or "echo" (answers with the text it was sent).')
    models: list[MemberModel] = Field(description="Models this member advertises.")
    url: str = Field(default="", description="Upstream URL; required for vllm-openai over http-direct.")
    authSecretRef: str = Field(default="", description="Secret-store key holding the upstream bearer token.")
    caFileRef: str | None = Field(default=None, description="Secret-store key of a private-CA bundle (PEM).")
    transport: Transport | None = Field(default=None, description="http-direct (default) or operator-signal.")
    computeOperatorRef: str | None = Field(
        default=None,
        description="Enrolled compute-role operator to dispatch through; required with operator-signal, rejected with http-direct.",
    )
    draining: bool = Field(default=False, description="When true the router sends no new traffic here.")
    traits: MemberTraits | None = None


class MemberStatus(WireModel):
    phase: MemberPhase = "Pending"
    conditions: list[Condition] | None = None
    observedGeneration: int | None = None
    lastReconciledAt: str | None = None
    transport: str | None = None
    advertisedModels: list[str] | None = None


class InferencePoolMember(WireModel):
    apiVersion: Literal["airdress.co/v1alpha1"] = "airdress.co/v1alpha1"
    kind: Literal["InferencePoolMember"] = "InferencePoolMember"
    metadata: MemberMeta
    spec: InferencePoolMemberSpec
    status: MemberStatus | None = None
