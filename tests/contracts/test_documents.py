"""Bounded reading of untrusted JSON and YAML (contracts/documents.py), and admission's bounds on
names, namespaces and JSON annotations (issue 11, D1-D3 and D5)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.admission import admit
from contracts.agents import ANNOTATION_AGENT_CATALOG
from contracts.documents import (
    MAX_DECODED_BYTES,
    MAX_DEPTH,
    MAX_INT,
    MIN_INT,
    BadNumber,
    DocumentError,
    TooDeep,
    TooLarge,
    check_depth,
    load_json,
    load_yaml_all,
)
from contracts.providerconfig import ANNOTATION_INSTALLATION
from tests.contracts.cases import AD, APC, IPC, MD, MEMBER, changed


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


def test_depth_is_counted_in_objects_and_lists() -> None:
    check_depth(nested(MAX_DEPTH))
    check_depth("scalar")
    with pytest.raises(TooDeep, match=f"more than {MAX_DEPTH} levels"):
        check_depth(nested(MAX_DEPTH + 1))
    assert load_json(json.dumps(nested(MAX_DEPTH))) == nested(MAX_DEPTH)
    assert load_yaml_all(json.dumps(nested(MAX_DEPTH))) == [nested(MAX_DEPTH)]


@pytest.mark.parametrize(
    ("literal", "why"),
    [
        ("1" + "0" * 5000, "out of range"),  # past Python's own 4,300-digit conversion limit: once a 500
        ("9223372036854775808", "out of range"),
        ("-9223372036854775809", "out of range"),
        ("0x" + "f" * 5000, "out of range"),
        (".nan", "not finite"),
        ("-.inf", "not finite"),
        ("1.0e+400", "not finite"),
    ],
)
def test_a_number_past_int64_or_not_finite_is_refused_at_its_path(literal: str, why: str) -> None:
    with pytest.raises(BadNumber, match=why) as refused:
        load_yaml_all(f"spec:\n  models:\n  - name: m\n    contextWindow: {literal}\n")
    assert "spec.models[0].contextWindow" in str(refused.value) or "line 4" in str(refused.value)
    if literal.lstrip("-")[:1].isdigit() and not literal.startswith(("0x", "1.0e")):  # a JSON number too
        with pytest.raises(BadNumber, match=why):
            load_json('{"spec": {"models": [{"name": "m", "contextWindow": ' + literal + "}]}}")


def test_numbers_at_the_edges_of_int64_and_negative_zero_are_read() -> None:
    text = '{"a": [9223372036854775807, -9223372036854775808, -0, -0.0, 1e-400, 1.5e308]}'
    assert load_json(text) == {"a": [2**63 - 1, -(2**63), 0, 0.0, 0.0, 1.5e308]}
    assert load_yaml_all("a: [9223372036854775807, -0, 1_000]") == [{"a": [2**63 - 1, 0, 1000]}]


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 300, 1000, 1_000_000])
def test_deep_json_is_too_deep_never_a_recursion_error(depth: int) -> None:
    with pytest.raises(TooDeep):
        load_json(b"[" * depth + b"]" * depth)


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 500, 1000, 1_000_000])
def test_deep_yaml_is_too_deep_never_a_recursion_error(depth: int) -> None:
    with pytest.raises(TooDeep):
        load_yaml_all(b"[" * depth + b"]" * depth)
    if depth < 2000:  # block style nests by indentation
        block = "".join(f"{'  ' * i}k{i}:\n" for i in range(depth)) + "  " * depth + "v\n"
        with pytest.raises(TooDeep):
            load_yaml_all(block)


def test_aliases_stacked_on_aliases_count_as_depth() -> None:
    text = "a0: &a0 [x]\n" + "".join(f"a{i}: &a{i} [*a{i - 1}]\n" for i in range(1, MAX_DEPTH + 2))
    with pytest.raises(TooDeep):
        load_yaml_all(text)


def test_the_billion_laughs_is_refused_where_it_crosses_the_bound() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    with pytest.raises(TooLarge, match="aliases") as refused:
        load_yaml_all("\n".join(lines) + "\n")
    assert refused.value.status == 413
    assert "line 7" in str(refused.value)  # a6 stands for 10**7 nodes: the first past 4 MiB


def test_a_big_string_aliased_many_times_is_too_large() -> None:
    text = "a0: &big " + "x" * 200_000 + "\n" + "".join(f"a{i}: *big\n" for i in range(1, 61))
    with pytest.raises(TooLarge, match="MiB"):
        load_yaml_all(text)
    assert len(load_yaml_all(text, max_bytes=16 * MAX_DECODED_BYTES)[0]) == 61  # the bound, not the aliases, refuses it


def test_the_bound_covers_every_document_of_a_stream() -> None:
    doc = "a: &s " + "x" * 100_000 + "\nb: [" + ", ".join(["*s"] * 9) + "]\n"
    assert len(load_yaml_all(doc)) == 1
    with pytest.raises(TooLarge):
        load_yaml_all("---\n".join([doc] * 5))


def test_a_recursive_alias_is_refused() -> None:
    for text in ("&a [*a]", "&m {k: *m}", "a: &x\n  b: *x\n"):
        with pytest.raises(DocumentError, match="recursive"):
            load_yaml_all(text)


def test_a_few_aliases_read_as_yaml_always_did() -> None:
    text = "base: &base {image: vllm, args: [--a, --b]}\nfirst: *base\nsecond: {<<: *base, image: other}\n"
    assert load_yaml_all(text) == [yaml.safe_load(text)]


def test_syntax_errors_say_where() -> None:
    with pytest.raises(DocumentError, match="cannot parse YAML at line 3, column 1"):
        load_yaml_all("spec:\n  models: [\n")
    with pytest.raises(DocumentError, match="not valid JSON"):
        load_json(b"{not json")
    with pytest.raises(BadNumber, match="out of range"):
        load_json(b"1e400")
    with pytest.raises(DocumentError, match="UTF-8"):
        load_yaml_all(b"\xff\xfe")


# The basic plane: json.dumps writes astral characters as surrogate-pair escapes, which libyaml
# (rightly) refuses in YAML and PyYAML's own parser turns into two lone surrogates.
text = st.text(alphabet=st.characters(max_codepoint=0xFFFF, exclude_categories=("Cs",)), max_size=20)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(text, children, max_size=4),
    max_leaves=30,
)


@settings(max_examples=200, deadline=None)
@given(json_values)
def test_bounded_readers_read_what_the_unbounded_ones_do(value: Any) -> None:
    text = json.dumps(value)
    assert load_json(text) == json.loads(text)
    assert load_yaml_all(text) == [yaml.safe_load(text)]
    dumped = yaml.safe_dump(value)
    assert load_yaml_all(dumped) == [yaml.safe_load(dumped)]


def problems(value: Any, max_depth: int, level: int = 0) -> set[str]:
    """What check_depth must refuse, found the plain recursive way: a container at a level past `max_depth` (the
    top one is level 1), an integer past int64, a float that is not finite."""
    found: set[str] = set()
    if isinstance(value, bool):
        return found
    if (isinstance(value, int) and not MIN_INT <= value <= MAX_INT) or (isinstance(value, float) and not math.isfinite(value)):
        found.add("number")
    if isinstance(value, dict | list):
        if level + 1 > max_depth:
            found.add("depth")
        for child in value.values() if isinstance(value, dict) else value:
            found |= problems(child, max_depth, level + 1)
    return found


any_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | text | st.binary(max_size=2),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(text, children, max_size=3),
    max_leaves=20,
)


@settings(max_examples=500, deadline=None)
@given(any_values)
def test_check_depth_refuses_exactly_what_it_must(value: Any) -> None:
    # the quick first walk (no paths) and the one that names the path must agree with the plain definition
    found = problems(value, 3)
    try:
        check_depth(value, 3)
    except TooDeep:
        assert "depth" in found
    except BadNumber:
        assert "number" in found
    else:
        assert not found


# --- admission: names and namespaces (D1), JSON inside annotations (D3) -------------------------


def paths(doc: dict[str, Any]) -> dict[str, str]:
    return {p.path: p.message for p in admit(doc).problems}


def test_namespaces_are_dns_labels_of_at_most_63_characters() -> None:
    for doc in (MD, AD):
        assert admit(changed(doc, {"metadata.namespace": "n" * 63})).ok
        for bad in ("n" * 64, "n" * 4000, "Team_A", "a.b", "-a", "a/b", "ns\n"):
            problems = paths(changed(doc, {"metadata.namespace": bad}))
            assert "must be a DNS label of at most 63 characters" in problems["metadata.namespace"], bad
    assert "got 4000 characters" in paths(changed(MD, {"metadata.namespace": "n" * 4000}))["metadata.namespace"]
    assert "metadata.namespace" in paths(changed(MEMBER, {"metadata.namespace": "n" * 4000}))


def test_names_of_the_ai_runway_kinds_are_dns_subdomains() -> None:
    for doc in (IPC, APC):
        assert admit(changed(doc, {"metadata.name": "a.b-c"})).ok
        for bad in ("a" * 254, "Acme", "a b", "a_b", "a/b"):
            problems = paths(changed(doc, {"metadata.name": bad}))
            assert "metadata.name" in problems, bad
    assert "DNS subdomain" in paths(changed(IPC, {"metadata.name": "Acme"}))["metadata.name"]
    # a kind's own name rule speaks for it, once
    md = admit(changed(MD, {"metadata.name": "My_Model"})).problems
    assert [p.path for p in md] == ["metadata.name"] and "DNS-1035" in md[0].message


def test_member_names_keep_the_airdress_rules_and_their_bound() -> None:
    assert admit(changed(MEMBER, {"metadata.name": "GPU_a.lab:8000"})).ok
    assert admit(changed(MEMBER, {"metadata.name": "\U0001f680" * 253})).ok
    assert "253" in paths(changed(MEMBER, {"metadata.name": "e" * 254}))["metadata.name"]
    signal = changed(MEMBER, {"spec.transport": "operator-signal", "spec.url": "", "spec.computeOperatorRef": "c" * 254})
    assert "at most 253 characters" in paths(signal)["spec.computeOperatorRef"]


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 900, 100_000])
def test_json_annotations_nested_too_deep_are_problems_not_crashes(depth: int) -> None:
    deep = "[" * depth + "]" * depth
    catalog = paths(changed(APC, {"metadata.annotations": {ANNOTATION_AGENT_CATALOG: deep}}))
    assert f"at most {MAX_DEPTH} levels" in catalog[f'metadata.annotations["{ANNOTATION_AGENT_CATALOG}"]']
    install = paths(changed(IPC, {"metadata.annotations": {ANNOTATION_INSTALLATION: '{"a": ' + deep + "}"}}))
    assert f"at most {MAX_DEPTH} levels" in install[f'metadata.annotations["{ANNOTATION_INSTALLATION}"]']
