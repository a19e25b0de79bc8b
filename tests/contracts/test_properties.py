"""Property-based: no input makes admission or `jetway validate` crash; models round-trip."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli import validate
from contracts.admission import admit
from contracts.kinds import KINDS
from tests.contracts.cases import AD, APC, IPC, MD, MEMBER

scalars = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=False) | st.text(max_size=20)
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=5), max_leaves=25
)
field_names = st.sampled_from(
    [
        "spec",
        "metadata",
        "models",
        "name",
        "backend",
        "url",
        "volumes",
        "engine",
        "model",
        "type",
        "size",
        "claimName",
        "mountPath",
        "purpose",
        "transport",
        "computeOperatorRef",
        "overrides",
        "workload",
        "container",
        "securityContext",
        "externalAPI",
        "baseURL",
        "gpu",
        "count",
    ]
)


def _mutate(base: dict[str, Any], data: st.DataObject) -> Any:
    doc = json.loads(json.dumps(base))
    for _ in range(data.draw(st.integers(1, 4))):
        node = doc
        while isinstance(node, dict) and node and data.draw(st.booleans()):
            key = data.draw(st.sampled_from(sorted(node)))
            if not isinstance(node[key], dict):
                break
            node = node[key]
        if isinstance(node, dict):
            node[data.draw(field_names | st.text(max_size=8))] = data.draw(json_values)
    return doc


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.data())
def test_admission_never_raises_on_mutated_manifests(data: st.DataObject) -> None:
    base = data.draw(st.sampled_from([MD, MEMBER, IPC, APC, AD]))
    verdict = admit(_mutate(base, data))
    assert verdict.ok or verdict.problems
    for problem in verdict.problems:
        assert isinstance(problem.message, str) and problem.message


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_admission_never_raises_on_arbitrary_values(value: Any) -> None:
    verdict = admit(value)
    assert not verdict.ok


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_validate_command_never_crashes_on_any_bytes(tmp_path: Path, raw: bytes) -> None:
    path = tmp_path / "input.yaml"
    path.write_bytes(raw)
    out, err = io.StringIO(), io.StringIO()
    code = validate.run([str(path)], out=out, err=err)
    assert code in (0, 1, 2)
    assert "Traceback" not in out.getvalue() + err.getvalue()


@settings(max_examples=100, deadline=None)
@given(st.sampled_from([MD, MEMBER, IPC, APC, AD]))
def test_admitted_objects_round_trip_through_their_wire_form(base: dict[str, Any]) -> None:
    first = admit(base).obj
    assert first is not None
    again = admit(first.wire()).obj
    assert again is not None
    assert again.wire() == first.wire()
    assert KINDS[first.kind].model is type(first)  # type: ignore[attr-defined]
