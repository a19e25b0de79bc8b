"""Every example manifest, in the spec and in examples/, is valid; the placeholders are named."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.manifests import load_documents
from contracts.admission import admit

ROOT = Path(__file__).resolve().parents[2]
SPEC_EXAMPLES = Path(__file__).parent / "spec_examples"  # the spec's examples, verbatim
EXAMPLES = sorted((ROOT / "examples").rglob("*.yaml")) + sorted(
    p for p in SPEC_EXAMPLES.glob("*.yaml") if p.name != "inferencepoolmember-minimal.yaml"
)


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_is_valid(path: Path) -> None:
    documents = load_documents(str(path))
    assert documents, f"{path} holds no manifests"
    for doc in documents:
        verdict = admit(doc.body)
        assert verdict.ok, f"{path}#{doc.index}: {[str(p) for p in verdict.problems]}"


def test_examples_cover_every_kind() -> None:
    kinds = {doc.body["kind"] for path in EXAMPLES for doc in load_documents(str(path))}
    assert kinds == {"ModelDeployment", "InferenceProviderConfig", "AgentProviderConfig", "AgentDeployment", "InferencePoolMember"}


def test_minimal_member_names_each_placeholder_and_nothing_else() -> None:
    (doc,) = load_documents(str(SPEC_EXAMPLES / "inferencepoolmember-minimal.yaml"))
    verdict = admit(doc.body)
    assert [p.path for p in verdict.problems] == ["metadata.name", "spec.backend", "spec.models[0].name"]
    assert all("placeholder" in p.message for p in verdict.problems)


def test_minimal_member_with_values_is_valid() -> None:
    (doc,) = load_documents(str(SPEC_EXAMPLES / "inferencepoolmember-minimal.yaml"))
    body = doc.body
    body["metadata"]["name"] = "nas"
    body["spec"]["backend"] = "echo"
    body["spec"]["models"][0]["name"] = "llama"
    assert admit(body).ok
