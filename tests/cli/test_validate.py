"""`jetway validate`: exit codes, one line per problem, files, stdin, JSON, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

from tests.contracts.cases import MD, MEMBER, changed
from tests.support.cli import run_jetway


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_valid_files_exit_zero(tmp_path: Path) -> None:
    result = run_jetway("validate", "-f", "examples/echo-member.yaml", "-f", "examples/agentdeployments.yaml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""
    assert "4 manifests valid" in result.stderr


def test_problem_line_names_file_kind_name_path_and_rule(tmp_path: Path) -> None:
    member = write(
        tmp_path,
        "member.yaml",
        "apiVersion: airdress.co/v1alpha1\nkind: InferencePoolMember\nmetadata: {name: gpu-a}\nspec: {backend: triton, models: []}\n",
    )
    result = run_jetway("validate", "-f", member)
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f'{member}: InferencePoolMember/gpu-a: spec.backend: must be one of vllm-openai, echo (got "triton")'
    ]


def test_multi_document_yaml_reports_each_document(tmp_path: Path) -> None:
    text = (
        "\n---\n".join(
            json.dumps(d)
            for d in (
                changed(MD, {"metadata.name": "good"}),
                changed(MD, {"metadata.name": "bad", "spec.model.storage.volumes": [{"name": "c", "purpose": "custom", "claimName": "p"}]}),
                changed(MEMBER, {"spec.models[0].contextWindow": -1}),
            )
        )
        + "\n---\n"
    )
    path = write(tmp_path, "many.yaml", text)
    result = run_jetway("validate", "-f", path)
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f"{path}: ModelDeployment/bad: spec.model.storage.volumes[0].mountPath: mountPath is required when purpose is custom",
        f"{path}: InferencePoolMember/gpu-a: spec.models[0].contextWindow: must be at least 0 (got -1)",
    ]


def test_stdin_and_json(tmp_path: Path) -> None:
    result = run_jetway("validate", "-f", "-", stdin=json.dumps([MEMBER, changed(MEMBER, {"spec.backend": "x"})]))
    assert result.returncode == 1
    assert result.stdout.startswith("-: InferencePoolMember/gpu-a: spec.backend: must be one of")


def test_kubectl_list_is_expanded(tmp_path: Path) -> None:
    path = write(tmp_path, "list.json", json.dumps({"apiVersion": "v1", "kind": "List", "items": [MEMBER, MD]}))
    assert run_jetway("validate", "-f", path).returncode == 0


def test_unreadable_input_exits_two_without_traceback(tmp_path: Path) -> None:
    broken = write(tmp_path, "broken.yaml", "spec:\n  models: [\n")
    for args in (["-f", str(tmp_path / "missing.yaml")], ["-f", broken]):
        result = run_jetway("validate", *args)
        assert result.returncode == 2, result
        assert "Traceback" not in result.stderr
        assert result.stderr.startswith("error: ")
    assert "cannot parse YAML at line 3" in run_jetway("validate", "-f", broken).stderr


def test_unreadable_wins_over_invalid(tmp_path: Path) -> None:
    bad = write(tmp_path, "bad.yaml", json.dumps(changed(MEMBER, {"spec.backend": "x"})))
    result = run_jetway("validate", "-f", bad, "-f", str(tmp_path / "nope.yaml"))
    assert result.returncode == 2
    assert "spec.backend" in result.stdout


def test_not_a_manifest(tmp_path: Path) -> None:
    path = write(tmp_path, "scalar.yaml", "just a string\n")
    result = run_jetway("validate", "-f", path)
    assert result.returncode == 1
    assert "a manifest must be an object" in result.stdout


def test_empty_file_is_reported(tmp_path: Path) -> None:
    result = run_jetway("validate", "-f", write(tmp_path, "empty.yaml", "# nothing\n---\n"))
    assert result.returncode == 1
    assert "contains no manifests" in result.stdout


def test_warnings_go_to_stderr_and_do_not_fail(tmp_path: Path) -> None:
    path = write(tmp_path, "md.yaml", json.dumps(changed(MD, {"spec.engine.trustRemoteCode": True})))
    result = run_jetway("validate", "-f", path)
    assert result.returncode == 0
    assert "warning: trustRemoteCode=true" in result.stderr


def test_yaml_alias_bomb_is_refused(tmp_path: Path) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [
        f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]"
        for i in range(1, 12)
    ]
    result = run_jetway("validate", "-f", write(tmp_path, "bomb.yaml", "\n".join(lines) + "\n"), timeout=20)
    assert result.returncode == 2
    assert "aliases" in result.stderr


def test_generate_check_reports_drift() -> None:
    assert run_jetway("generate", "--check").returncode == 0


def test_a_directory_stands_for_its_manifests(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    write(tmp_path, "sub/a.yaml", json.dumps(MEMBER))
    write(tmp_path, "b.json", json.dumps(changed(MEMBER, {"spec.backend": "x"})))
    write(tmp_path, "notes.txt", "not a manifest")
    result = run_jetway("validate", "-f", str(tmp_path))
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f'{tmp_path}/b.json: InferencePoolMember/gpu-a: spec.backend: must be one of vllm-openai, echo (got "x")'
    ]
