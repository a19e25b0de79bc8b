"""`spec.scaling.autoscaling`: the rules beyond its fields' own bounds (docs/autoscaling.md).

What a provider can do with a count is known here only when the manifest names it (`spec.provider.name`); an
auto-selected provider is held to the same table by the scaler and the workload service instead, which never
render what it cannot run (contracts/scaling.py PROVIDER_SCALING).
"""

from __future__ import annotations

from contracts.modeldeployment import ModelDeployment
from contracts.problems import PathPart, Problem, at
from contracts.scaling import PROVIDER_SCALING

AUTOSCALING: list[PathPart] = ["spec", "scaling", "autoscaling"]


def check(md: ModelDeployment) -> tuple[list[Problem], list[str]]:
    """Problems and warnings of a (defaulted) ModelDeployment's autoscaling; none without it."""
    spec = md.spec
    autoscaling = spec.scaling.autoscaling if spec.scaling else None
    if autoscaling is None:
        return [], []
    problems: list[Problem] = []
    warnings: list[str] = []
    low, high = autoscaling.minReplicas, autoscaling.maxReplicas
    if low > high:
        problems.append(at([*AUTOSCALING, "minReplicas"], f"must be at most maxReplicas (got minReplicas {low} > maxReplicas {high})"))
    if autoscaling.signal == "kvCacheUsage" and autoscaling.target is not None and autoscaling.target > 1:
        problems.append(
            at(
                [*AUTOSCALING, "target"],
                f"must be at most 1 for kvCacheUsage, the fraction of the KV cache in use (got {autoscaling.target:g})",
            )
        )
    if spec.serving is not None and spec.serving.mode == "disaggregated":
        problems.append(
            at(
                AUTOSCALING,
                "is not supported in disaggregated mode: prefill and decode are sized by scaling.prefill.replicas "
                "and scaling.decode.replicas",
            )
        )
    provider = spec.provider.name if spec.provider and spec.provider.name else None
    can = PROVIDER_SCALING.get(provider) if provider else None
    if provider and can is not None and not can.scales:
        problems.append(at(AUTOSCALING, f"provider {provider} cannot autoscale: {can.why}"))
    elif provider and can is not None and low == 0 and not can.to_zero:
        why = f"must be at least 1 on provider {provider}, which cannot scale to zero: {can.why}"
        problems.append(at([*AUTOSCALING, "minReplicas"], why))
    elif provider and can is None:
        warnings.append(
            f"provider {provider} runs this deployment with its own controller: Jetway's scaler only recommends "
            "a replica count for it (events), and changes nothing"
        )
    replicas = spec.scaling.replicas if spec.scaling else 1
    if not problems and not low <= replicas <= high:
        start = max(low, min(high, replicas))
        warnings.append(f"spec.scaling.replicas {replicas} is outside autoscaling's range {low}..{high}: the deployment starts at {start}")
    return problems, warnings
