"""`jetway render`: the Kubernetes objects Jetway would create, as a YAML stream.

Offline (`-f FILE...`): the same decisions the services make (selection, storage plan,
rendering), with the built-in provider configs unless `--providers` gives others and the provider
settings the environment sets (KAITO's AIRUNWAY_KAITO_*, as the workload service reads them); no NATS.
From a running Jetway (`md/NAME`): the objects its services recorded.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from typing import Any, TextIO

from cli.manifests import Unreadable, expand_sources, load_documents
from contracts import yamlstream
from contracts.admission import Known, admit, judge
from contracts.modeldeployment import ModelDeployment
from contracts.pipeline import RenderFailed, SelectionFailed, StorageInvalid, WorkloadRendered
from contracts.providerconfig import InferenceProviderConfig
from contracts.rules.provider import ProviderLookup
from contracts.subjects import Key
from services.selector import decide as selection
from services.storage import decide as storage
from services.workload import decide as workload
from services.workload import render as renderers
from services.workload.projection import Deployment
from services.workload.providers import BUILTIN, builtin_configs


def _providers(files: list[str], err: TextIO) -> list[selection.Provider] | None:
    documents: list[Any] = []
    if not files:
        documents = builtin_configs()
    else:
        for source in expand_sources(files):
            try:
                documents += [d.body for d in load_documents(source)]
            except Unreadable as exc:
                print(f"error: {exc}", file=err)
                return None
    providers = []
    for doc in documents:
        verdict = admit(doc)
        if not isinstance(verdict.obj, InferenceProviderConfig):
            print(
                f"error: --providers: {verdict.label}: " + ("; ".join(map(str, verdict.problems)) or "not an InferenceProviderConfig"),
                file=err,
            )
            return None
        status = doc.get("status") if isinstance(doc, dict) else None
        ready = not isinstance(status, dict) or status.get("ready", True) is not False
        providers.append(selection.Provider(verdict.obj.metadata.name, verdict.obj.spec, ready))
    return providers


def lookup(providers: list[selection.Provider]) -> Callable[[str], ProviderLookup]:
    by_name = {p.name: p for p in providers}

    def find(name: str) -> ProviderLookup:
        found = by_name.get(name)
        return ProviderLookup("found", spec=found.spec) if found is not None else ProviderLookup("not-found")

    return find


def objects_for(
    md: ModelDeployment,
    uid: str,
    providers: list[selection.Provider],
    *,
    gateway_available: bool = False,
    settings: Mapping[str, str] | None = None,
) -> tuple[list[dict[str, Any]], str]:
    """(objects, a one-line account) for one admitted deployment; ValueError with the reason when it cannot render.

    `gateway_available`: render as in a cluster that serves the Inference Extension (Dynamo then adds its endpoint picker);
    `settings`: the provider settings a workload service started with them would render with (`render.settings`)."""
    key = Key("ModelDeployment", md.metadata.namespace or "default", md.metadata.name)
    outcome = selection.select(md, 1, None, providers)
    chosen = outcome.decision
    if isinstance(chosen, SelectionFailed):
        raise ValueError(chosen.message)
    plan = storage.plan(md, key, 1, uid)
    if isinstance(plan, StorageInvalid):
        raise ValueError("Storage invalid: " + "; ".join(plan.problems))
    deployment = Deployment(key, md, 1, uid, selection=chosen, storage=plan)
    rendered: list[dict[str, Any]] = list(plan.objects)
    for step in workload.decide(deployment, BUILTIN, gateway_available=gateway_available, settings=settings):
        if isinstance(step.record, RenderFailed):
            raise ValueError(step.record.status.message or step.record.message)
        if isinstance(step.record, WorkloadRendered):
            rendered += step.write
    account = f"provider {chosen.provider} ({chosen.provider_reason}), engine {chosen.engine} ({chosen.engine_reason})"
    if chosen.provider not in BUILTIN:
        account += f"; {chosen.provider} renders it with its own controller"
    return rendered, account


def run(files: list[str], provider_files: list[str], out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    providers = _providers(provider_files, err)
    if providers is None:
        return 2
    # the providers are known here: a deployment naming another is refused as admission refuses it
    known = Known(providers=lookup(providers))
    failed = False
    for source in expand_sources(files):
        try:
            documents = load_documents(source)
        except Unreadable as exc:
            print(f"error: {exc}", file=err)
            return 2
        for doc in documents:
            verdict = judge(doc.body, known)
            where = f"{source}: {verdict.label}"
            if not verdict.ok or verdict.obj is None:
                for problem in verdict.problems:
                    print(f"{where}: {problem}", file=err)
                failed = True
                continue
            if not isinstance(verdict.obj, ModelDeployment):
                continue  # only deployments render into objects
            uid = (doc.body.get("metadata") or {}).get("uid") or ""
            try:
                objects, account = objects_for(verdict.obj, uid, providers, settings=renderers.settings(os.environ))
            except ValueError as exc:
                print(f"{where}: {exc}", file=err)
                failed = True
                continue
            print(f"# {verdict.obj.kind}/{verdict.obj.metadata.namespace or 'default'}/{verdict.obj.metadata.name}: {account}", file=out)
            if not uid:
                print("# (no metadata.uid: ownerReferences are left out; the controller sets them)", file=out)
            print(yamlstream.documents(objects), end="", file=out)  # as `jetway render md/NAME` prints them, byte for byte
    return 1 if failed else 0
