"""`spec.provider.overrides`: the escape hatch, in two parts.

- The spec's validated security sections, `workload` and `container`, each allowing only
  `podSecurityContext` and `securityContext`, each with an allow-list of fields and values that never
  weaken the defaults (no root, no privilege escalation, capabilities only dropped).
- Every other key is AI Runway's free-form deep merge into the provider's rendered object, judged by
  AI Runway's block-list: keys that escalate privilege or bypass the resource ceilings are refused at
  any depth (inside lists too), and a refused key's subtree is not searched further, so one mistake
  is one problem. An object's identity (`apiVersion`, `kind`, `metadata`, `status`) is refused at the
  top, as every provider refuses it.
- Nothing merged may give the pods what Pod Security's `baseline` level refuses (hostPath volumes, host
  ports, host namespaces, privilege, added capabilities, unconfined AppArmor, ...): Jetway's own
  ServiceAccount creates those pods, so an override must not grant a ModelDeployment's author host access
  they may not have themselves. Most such fields live in a `securityContext` (blocked above); the rest
  are refused here, at any depth, each at its path with the rule.
- The merge replaces an object with whatever is not one, so a key whose target is an object in
  every rendered object (`spec`, and at any depth `template`, `metadata`, `selector`, `labels`, ...)
  must be an object (or null) in overrides: `{"spec": "x"}` would otherwise be admitted and then
  refused by the API server on every write.
"""

from __future__ import annotations

from typing import Any

from contracts.problems import PathPart, Problem, at, type_name

SECTIONS = ("workload", "container")
# AI Runway's block-list (webhook blockedOverrideKeys), refused at any depth outside the security sections.
BLOCKED_KEYS = (
    "securityContext",
    "serviceAccountName",
    "serviceAccount",
    "hostNetwork",
    "hostPID",
    "hostIPC",
    "automountServiceAccountToken",
    "nodeName",
    "priorityClassName",
    "runtimeClassName",
)
# Sizing is merged after admission checked spec.resources/spec.scaling against the ceilings, so it is refused.
SIZING_KEYS = ("replicas", "resources")
IDENTITY_KEYS = ("apiVersion", "kind", "metadata", "status")
# Pod Security baseline (https://kubernetes.io/docs/concepts/security/pod-security-standards/#baseline): what it
# refuses outside a securityContext, with the reason a user reads. Inside one, BLOCKED_KEYS refuses it all.
BASELINE_KEYS = {
    "hostPath": "a hostPath volume gives the pod the node's files",
    "privileged": "a privileged container has the node's devices and every capability",
    "capabilities": "capabilities may only be dropped, in the container section's securityContext",
    "sysctls": "sysctls change the node's kernel settings",
    "seLinuxOptions": "custom SELinux options",
    "procMount": "an unmasked /proc",
    "appArmorProfile": "custom AppArmor profiles",
    "windowsOptions": "Windows HostProcess containers run as the node",
}
APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"
CONTEXT_KEYS = ("podSecurityContext", "securityContext")
# Keys whose target is an object in every provider's rendered object, wherever they appear (AI Runway's merge
# would replace the object with the value, and the API server refuses the result).
OBJECT_KEYS = ("spec", "template", "metadata", "selector", "labels", "annotations", "nodeSelector", "matchLabels", "affinity")
STRING_MAPS = ("labels", "annotations", "nodeSelector", "matchLabels")  # their keys are data: an annotation may be named "spec"
POD_FIELDS = (
    "runAsUser",
    "runAsGroup",
    "runAsNonRoot",
    "fsGroup",
    "supplementalGroups",
    "fsGroupChangePolicy",
    "seccompProfile",
)
CONTAINER_FIELDS = (
    "runAsUser",
    "runAsGroup",
    "runAsNonRoot",
    "allowPrivilegeEscalation",
    "readOnlyRootFilesystem",
    "capabilities",
    "seccompProfile",
)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_field(path: list[PathPart], name: str, value: Any) -> list[Problem]:
    here = [*path, name]
    if name == "runAsNonRoot":
        if not isinstance(value, bool):
            return [at(here, f"must be true or false (got {type_name(value)})")]
        if value is False:
            return [at(here, "runAsNonRoot cannot be set to false")]
    elif name == "allowPrivilegeEscalation":
        if not isinstance(value, bool):
            return [at(here, f"must be true or false (got {type_name(value)})")]
        if value is True:
            return [at(here, "allowPrivilegeEscalation cannot be set to true")]
    elif name == "readOnlyRootFilesystem":
        if not isinstance(value, bool):
            return [at(here, f"must be true or false (got {type_name(value)})")]
    elif name == "runAsUser":
        if not _is_int(value) or value < 0:
            return [at(here, "must be a non-negative integer")]
        if value == 0:
            return [at(here, "runAsUser cannot be 0 (root); runAsNonRoot is always enforced")]
    elif name in ("runAsGroup", "fsGroup"):
        if not _is_int(value) or value < 0:
            return [at(here, "must be a non-negative integer")]
    elif name == "supplementalGroups":
        if not isinstance(value, list):
            return [at(here, "must be a list of non-negative integers")]
        return [at([*here, i], "must be a non-negative integer") for i, g in enumerate(value) if not _is_int(g) or g < 0]
    elif name == "fsGroupChangePolicy":
        if value not in ("Always", "OnRootMismatch"):
            return [at(here, f"must be one of Always, OnRootMismatch (got {value!r})")]
    elif name == "capabilities":
        return _check_capabilities(here, value)
    elif name == "seccompProfile":
        return _check_seccomp(here, value)
    return []


def _check_capabilities(path: list[PathPart], value: Any) -> list[Problem]:
    if not isinstance(value, dict):
        return [at(path, f"must be an object (got {type_name(value)})")]
    problems = [
        at([*path, key], "only dropping capabilities is allowed (add is rejected)" if key == "add" else "unknown field (allowed: drop)")
        for key in value
        if key != "drop"
    ]
    drop = value.get("drop")
    if "drop" in value:
        if not isinstance(drop, list) or not all(isinstance(c, str) for c in drop):
            problems.append(at([*path, "drop"], "must be a list of capability names"))
        elif "ALL" not in drop:
            problems.append(at([*path, "drop"], 'must include "ALL"'))
    return problems


def _check_seccomp(path: list[PathPart], value: Any) -> list[Problem]:
    if not isinstance(value, dict):
        return [at(path, f"must be an object (got {type_name(value)})")]
    problems = [
        at([*path, key], "unknown field (allowed: type, localhostProfile)") for key in value if key not in ("type", "localhostProfile")
    ]
    kind = value.get("type")
    if kind == "RuntimeDefault":
        if "localhostProfile" in value:
            problems.append(at([*path, "localhostProfile"], "only allowed when type is Localhost"))
    elif kind == "Localhost":
        profile = value.get("localhostProfile")
        if not isinstance(profile, str) or not profile:
            problems.append(at([*path, "localhostProfile"], "required when type is Localhost"))
    elif kind is None:
        problems.append(at([*path, "type"], "required"))
    else:
        problems.append(at([*path, "type"], f"must be one of RuntimeDefault, Localhost (got {kind!r})"))
    return problems


def _forbidden(value: Any, path: list[PathPart], *, shapes: bool = True) -> list[Problem]:
    """Every blocked or sizing key in a free-form value, objects and lists searched alike, and (`shapes`, off
    inside string maps) every non-object value of a key whose target is an object."""
    problems: list[Problem] = []
    if isinstance(value, dict):
        for key, inner in value.items():
            here = [*path, key]
            if key in BLOCKED_KEYS:
                problems.append(at(here, f'overriding "{key}" is not allowed for security reasons'))
            elif shapes and key in BASELINE_KEYS:
                problems.append(at(here, f'"{key}" is not allowed: {BASELINE_KEYS[key]} (Pod Security baseline)'))
            elif shapes and key == "hostPort" and inner not in (None, 0):
                problems.append(at(here, "a hostPort is not allowed: it binds a port of the node (Pod Security baseline)"))
            elif key == "annotations" and isinstance(inner, dict):
                problems.extend(_apparmor(inner, here))
            elif key in SIZING_KEYS:
                problems.append(
                    at(
                        here,
                        f'overriding "{key}" is not allowed because it can bypass admission resource limits; '
                        "use spec.resources / spec.scaling instead",
                    )
                )
            elif shapes and key in OBJECT_KEYS and inner is not None and not isinstance(inner, dict):
                problems.append(
                    at(here, f'must be an object (got {type_name(inner)}): overrides merge into "{key}", an object in the rendered object')
                )
            else:
                problems.extend(_forbidden(inner, here, shapes=shapes and key not in STRING_MAPS))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            problems.extend(_forbidden(item, [*path, index], shapes=shapes))
    return problems


def _apparmor(annotations: dict[str, Any], path: list[PathPart]) -> list[Problem]:
    """Baseline allows a container's AppArmor annotation only as runtime/default or a localhost/ profile."""
    return [
        at([*path, name], f"AppArmor {value!r} is not allowed: only runtime/default or localhost/<profile> (Pod Security baseline)")
        for name, value in annotations.items()
        if isinstance(name, str)
        and name.startswith(APPARMOR_ANNOTATION)
        and not (value == "runtime/default" or (isinstance(value, str) and value.startswith("localhost/")))
    ]


def _check_section(here: list[PathPart], body: Any) -> list[Problem]:
    if not isinstance(body, dict):
        return [at(here, f"must be an object (got {type_name(body)})")]
    problems: list[Problem] = []
    for key, context in body.items():
        there = [*here, key]
        if key not in CONTEXT_KEYS:
            problems.append(at(there, f"overriding {key!r} is not allowed: only podSecurityContext and securityContext are allowed here"))
            continue
        if not isinstance(context, dict):
            problems.append(at(there, f"must be an object (got {type_name(context)})"))
            continue
        allowed = POD_FIELDS if key == "podSecurityContext" else CONTAINER_FIELDS
        for name, value in context.items():
            if name not in allowed:
                problems.append(at([*there, name], f"overriding {name!r} is not allowed in {key} (allowed: {', '.join(allowed)})"))
            else:
                problems.extend(_check_field(there, name, value))
    return problems


def check_overrides(overrides: Any, path: list[PathPart], *, free_form: bool = True) -> list[Problem]:
    """Every refused key, named with its path. An AgentDeployment's overrides are the security sections only
    (`free_form=False`): its renderers have no provider object to merge into."""
    if not isinstance(overrides, dict):
        return [at(path, "overrides must be a JSON object")]
    problems: list[Problem] = []
    for key, body in overrides.items():
        here = [*path, key]
        if key in SECTIONS:
            problems.extend(_check_section(here, body))
        elif not free_form:
            problems.append(at(here, f"overriding {key!r} is not allowed: only workload/container override sections are supported"))
        elif key in IDENTITY_KEYS:
            problems.append(at(here, f'overriding "{key}" is not allowed'))
        else:
            problems.extend(_forbidden({key: body}, path))
    return problems
