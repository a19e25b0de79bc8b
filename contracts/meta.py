"""Kubernetes-shaped building blocks shared by every kind: metadata, conditions, names.

Field names are camelCase on purpose: they are the wire format, so a model, its JSON Schema,
its CRD and an error path all spell a field the same way.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

# Patterns, each with the words a user sees when a value breaks it (see problems.py).
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS1035_LABEL = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
ENV_VAR_NAME = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
CONDITION_TYPE = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
CONDITION_REASON = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
ABSOLUTE_PATH = r"^/"
QUANTITY = r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$"
QUANTITY_OR_EMPTY = r"^([+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?)?$"

PATTERN_WORDS: dict[str, str] = {
    DNS_LABEL: "must be a DNS label: lower-case letters, digits and '-', starting and ending with a letter or digit",
    DNS1035_LABEL: "must be a DNS-1035 label: lower-case letters, digits and '-', starting with a letter and ending with a letter or digit",
    DNS_SUBDOMAIN: "must be a DNS subdomain: lower-case letters, digits, '-' and '.'",
    LABEL_VALUE: "must be a label value: letters, digits, '-', '_' and '.', starting and ending with a letter or digit",
    ENV_VAR_NAME: "must be an environment variable name: letters, digits, '_', '-' and '.', not starting with a digit",
    CONDITION_TYPE: "must be a condition type such as 'Ready' or 'example.com/Ready'",
    CONDITION_REASON: "must be a CamelCase reason such as 'ProbeFailed'",
    ABSOLUTE_PATH: "must be an absolute path (start with /)",
    QUANTITY: "must be a Kubernetes quantity such as '100Gi', '500m' or '2'",
    QUANTITY_OR_EMPTY: "must be a Kubernetes quantity such as '100Gi', '500m' or '2', or empty (unset)",
}

DnsLabel = Annotated[str, Field(pattern=DNS_LABEL, max_length=63)]
DnsSubdomain = Annotated[str, Field(pattern=DNS_SUBDOMAIN, max_length=253)]
Quantity = Annotated[str, Field(pattern=QUANTITY)]


def _empty_is_unset(value: Any) -> Any:
    return None if value == "" else value


# A quantity AI Runway keeps in a plain string field (`resources.cpu`, `resources.memory`, a
# component's `memory`): empty reads as unset (omitempty), so the CRD accepts "" and admission
# drops it. Its resource.Quantity fields (`storage.size`, `divisor`) stay Quantity: "" is no quantity.
OptionalQuantity = Annotated[Annotated[str, Field(pattern=QUANTITY_OR_EMPTY)] | None, BeforeValidator(_empty_is_unset)]
LabelMap = dict[str, str]


class WireModel(BaseModel):
    """Base of every manifest part: unknown fields are errors and types are not coerced.

    Kubernetes rejects "5" for an integer field and `yes` for a string; so do we.
    """

    model_config = ConfigDict(extra="forbid", strict=True, validate_default=False)

    def wire(self) -> dict[str, Any]:
        """The manifest form: camelCase keys, unset optional fields left out."""
        return self.model_dump(mode="json", exclude_none=True)


class OwnerReference(WireModel):
    apiVersion: str
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    blockOwnerDeletion: bool | None = None


class ObjectMeta(WireModel):
    """metav1.ObjectMeta: what a user writes plus what a server fills in (accepted, then ignored)."""

    name: Annotated[str, Field(min_length=1, max_length=253, description="Name, unique per namespace.")]
    namespace: str | None = Field(default=None, description="Namespace of a namespaced kind.")
    labels: dict[str, Annotated[str, Field(pattern=LABEL_VALUE, max_length=63)]] | None = None
    annotations: dict[str, str] | None = None
    # Server-populated fields, accepted so that `get -o yaml` output can be applied again.
    generateName: str | None = None
    resourceVersion: str | None = None
    generation: int | None = None
    uid: str | None = None
    creationTimestamp: str | None = None
    deletionTimestamp: str | None = None
    deletionGracePeriodSeconds: int | None = None
    finalizers: list[str] | None = None
    ownerReferences: list[OwnerReference] | None = None
    managedFields: list[dict[str, Any]] | None = None
    selfLink: str | None = None


ConditionStatus = Literal["True", "False", "Unknown"]


class Condition(WireModel):
    """metav1.Condition: one aspect of an object's state, owned by one writer."""

    type: Annotated[str, Field(pattern=CONDITION_TYPE, max_length=316)]
    status: ConditionStatus
    observedGeneration: Annotated[int, Field(ge=0)] | None = None
    lastTransitionTime: str
    reason: Annotated[str, Field(pattern=CONDITION_REASON, max_length=1024, min_length=1)]
    message: Annotated[str, Field(max_length=32768)]


DNS_LABEL_MAX = 63
DNS_SUBDOMAIN_MAX = 253


def is_dns_label(value: str) -> bool:
    return len(value) <= DNS_LABEL_MAX and re.fullmatch(DNS_LABEL, value) is not None


def is_dns1035_label(value: str) -> bool:
    return len(value) <= 63 and re.fullmatch(DNS1035_LABEL, value) is not None


def is_dns_subdomain(value: str) -> bool:
    return len(value) <= DNS_SUBDOMAIN_MAX and re.fullmatch(DNS_SUBDOMAIN, value) is not None
