"""What the ported AI Runway render tests share: a manifest admitted (or only parsed) into the Inputs a
renderer is given, with storage planned as the storage service plans it."""

from __future__ import annotations

import itertools
from typing import Any

from contracts.admission import admit
from contracts.modeldeployment import ModelDeployment
from contracts.pipeline import StoragePlanned
from contracts.rules.modeldeployment import with_defaults
from contracts.subjects import Key
from services.storage.decide import plan
from services.workload.render.common import Inputs
from tests.contracts.cases import changed

UID = "test-uid"


def inputs_of(md: ModelDeployment, storage: StoragePlanned | None, *, engine: str | None = None, gateway: bool = False) -> Inputs:
    """`engine`: the one selection chose; by default the spec's, else vLLM. `gateway`: the Inference Extension is served."""
    key = Key("ModelDeployment", md.metadata.namespace or "default", md.metadata.name)
    chosen = engine or (md.spec.engine.type if md.spec.engine and md.spec.engine.type else "vllm")
    return Inputs(key, UID, md, chosen, storage, gateway)


def admitted(base: dict[str, Any], changes: dict[str, Any], *, engine: str | None = None, gateway: bool = False) -> Inputs:
    """What the renderer is given for a manifest admission accepts."""
    verdict = admit(changed(base, changes))
    assert verdict.ok, verdict.problems
    assert isinstance(verdict.obj, ModelDeployment)
    key = Key("ModelDeployment", verdict.obj.metadata.namespace or "default", verdict.obj.metadata.name)
    storage = plan(verdict.obj, key, 1, UID)
    assert isinstance(storage, StoragePlanned)
    return inputs_of(verdict.obj, storage, engine=engine, gateway=gateway)


def unadmitted(base: dict[str, Any], changes: dict[str, Any], *, engine: str | None = None, gateway: bool = False) -> Inputs:
    """A manifest parsed and defaulted but never checked: the renderer's own guards are all that stand."""
    return inputs_of(with_defaults(ModelDeployment.model_validate(changed(base, changes))), None, engine=engine, gateway=gateway)


def refusals(base: dict[str, Any], changes: dict[str, Any]) -> list[str]:
    return [str(p) for p in admit(changed(base, changes)).problems]


def has_arg(args: list[str], flag: str, value: str) -> bool:
    return any(a == flag and b == value for a, b in itertools.pairwise(args))
