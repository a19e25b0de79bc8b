"""`jetway validate`, `render` and `apply` read files through the same bounds as the apply API
(issue 11, D1-D3 and D5): an alias bomb or a deep document exits 2 with the reason, never a
traceback, never `unexpected error`. The subprocess timeout bounds each run (a bound, not a
measurement): refusing is cheap."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from contracts.documents import MAX_DEPTH
from tests.contracts.cases import MD, changed
from tests.e2e.test_input_bounds import alias_bomb
from tests.support.cli import run_jetway

TIMEOUT = 15  # the bomb ran past this before


def write(tmp_path: Path, name: str, body: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(body)
    return str(path)


def refused(result_stderr: str, words: str) -> None:
    assert "Traceback" not in result_stderr and "unexpected error" not in result_stderr, result_stderr
    assert result_stderr.startswith("error: ") and words in result_stderr, result_stderr


@pytest.mark.parametrize("command", ["validate", "render"])
def test_an_alias_bomb_below_the_alias_count_exits_two(tmp_path: Path, command: str) -> None:
    path = write(tmp_path, "bomb.yaml", alias_bomb(levels=8, width=10))
    result = run_jetway(command, "-f", path, timeout=TIMEOUT)
    assert result.returncode == 2, result
    refused(result.stderr, "aliases")


def test_an_alias_bomb_is_refused_by_apply_before_anything_is_sent(tmp_path: Path) -> None:
    path = write(tmp_path, "bomb.yaml", alias_bomb(levels=8, width=10))
    # a client config naming a port nothing listens on: the file is read (and refused) before any call
    (tmp_path / "data").mkdir()
    config = {"api_url": "http://127.0.0.1:9", "router_url": "http://127.0.0.1:9/v1", "token": "t", "nats_url": "nats://127.0.0.1:9"}
    write(tmp_path, "data/jetway.json", json.dumps(config).encode())
    result = run_jetway("apply", "-f", path, "--data-dir", str(tmp_path / "data"), timeout=TIMEOUT)
    assert result.returncode == 2, result
    refused(result.stderr, "aliases")


def test_a_big_string_aliased_many_times_exits_two(tmp_path: Path) -> None:
    lines = ["apiVersion: airdress.co/v1alpha1", "kind: InferencePoolMember", "metadata:", "  name: wide", "  annotations:"]
    lines += [f"    a0: &big {'x' * 200_000}"] + [f"    a{i}: *big" for i in range(1, 61)]
    path = write(tmp_path, "wide.yaml", ("\n".join(lines) + "\nspec: {backend: echo, models: []}\n").encode())
    result = run_jetway("validate", "-f", path, timeout=TIMEOUT)
    assert result.returncode == 2, result
    refused(result.stderr, "MiB")


@pytest.mark.parametrize(
    ("name", "body"),
    [
        ("deep.json", b"[" * 1000 + b"]" * 1000),
        ("deeper.json", b'{"a": ' * 300 + b"1" + b"}" * 300),
        ("deep.yaml", b"spec: " + b"[" * 500 + b"x" + b"]" * 500 + b"\n"),
        ("block.yaml", "".join(f"{'  ' * i}k{i}:\n" for i in range(300)).encode() + b"  " * 300 + b"v\n"),
        ("huge.json", b"[" * 100_000 + b"]" * 100_000),
    ],
    ids=lambda value: value if isinstance(value, str) else "",  # a test id holding the body is an environment
    # variable too long to start a process with (pytest's PYTEST_CURRENT_TEST)
)
def test_deep_documents_exit_two_with_the_bound(tmp_path: Path, name: str, body: bytes) -> None:
    result = run_jetway("validate", "-f", write(tmp_path, name, body), timeout=TIMEOUT)
    assert result.returncode == 2, result
    refused(result.stderr, f"more than {MAX_DEPTH} levels")


def test_a_long_namespace_is_a_problem_with_its_path(tmp_path: Path) -> None:
    path = write(tmp_path, "md.json", json.dumps(changed(MD, {"metadata.namespace": "n" * 4000})).encode())
    result = run_jetway("validate", "-f", path, timeout=TIMEOUT)
    assert result.returncode == 1, result
    assert result.stdout.startswith(f"{path}: ModelDeployment/qwen: metadata.namespace: must be a DNS label"), result.stdout
    assert "63 characters" in result.stdout
