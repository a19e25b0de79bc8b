"""`jetway keys`, as a user runs it: a key printed once that the router's ring accepts, only hashes
stored, a Secret manifest for a cluster, and bad input refused naming the flag, with nothing written."""

from __future__ import annotations

import base64
import json
import stat
from pathlib import Path

from services.router.keys import KEY_PREFIX, hash_key, parse_keys
from tests.support.cli import run_jetway


def keys(data: Path, *args: str, stdin: str | None = None) -> tuple[int, str, str]:
    result = run_jetway("keys", *args, "--data-dir", str(data), stdin=stdin)
    return result.returncode, result.stdout, result.stderr


def test_create_prints_the_key_once_and_stores_only_its_hash(tmp_path: Path) -> None:
    code, out, err = keys(tmp_path, "create", "team-a", "--models", "m1, m2", "--rpm", "60", "--tpm", "10000")
    assert code == 0
    key = out.strip()
    assert out == key + "\n" and key.startswith(KEY_PREFIX) and len(key) == 46  # stdout is the key alone: KEY=$(jetway keys create ...)
    assert "team-a created" in err and "cannot be shown again" in err and key not in err

    stored_file = tmp_path / "secrets" / "client-keys"
    assert stat.S_IMODE(stored_file.stat().st_mode) == 0o600
    stored = stored_file.read_bytes()
    assert key.encode() not in stored and key[len(KEY_PREFIX) :].encode() not in stored
    ring = parse_keys(stored)  # the router's view of the same document
    found = ring.lookup(key)
    assert found is not None and found.name == "team-a" and found.sha256 == hash_key(key)
    assert (found.models, found.rpm, found.tpm) == (("m1", "m2"), 60, 10000) and found.created
    assert ring.allows(found, "m2") and not ring.allows(found, "m3")

    code, out, err = keys(tmp_path, "create", "team-b", "--weight", "2")
    assert code == 0 and out.strip() != key and "weight: 2" in err
    assert parse_keys(stored_file.read_bytes()).named("team-b").weight == 2  # type: ignore[union-attr]
    code, listed, _ = keys(tmp_path, "list")
    assert code == 0
    assert listed.splitlines()[0].split() == ["NAME", "MODELS", "RPM", "TPM", "WEIGHT", "TENANT", "CREATED", "SHA256"]
    a_row, b_row = listed.splitlines()[1].split(), listed.splitlines()[2].split()
    assert a_row[:6] == ["team-a", "m1,m2", "60", "10000", "1", "-"] and b_row[:6] == ["team-b", "*", "unlimited", "unlimited", "2", "-"]
    assert a_row[7] == hash_key(key)[:8] + "…"  # a prefix to tell keys apart, never the whole hash
    assert hash_key(key)[:9] not in listed and key not in listed

    code, _, err = keys(tmp_path, "delete", "team-a")
    assert code == 0 and "team-a deleted" in err
    assert parse_keys(stored_file.read_bytes()).lookup(key) is None
    code, _, err = keys(tmp_path, "delete", "team-a")
    assert code == 0 and "noop (not found)" in err


def test_bad_input_names_the_flag_and_the_rule_exits_2_and_writes_nothing(tmp_path: Path) -> None:
    cases = {
        ("Team_A",): "NAME: must be a DNS label",
        ("team-a", "--rpm", "0"): "--rpm: must be a positive whole number (got '0')",
        ("team-a", "--tpm", "lots"): "--tpm: must be a positive whole number (got 'lots')",
        ("team-a", "--rpm", "1.5"): "--rpm: must be a positive whole number",
        ("team-a", "--models", "m1,,m2"): "--models[1]: must be a model name",
        ("team-a", "--models", "m1,m1"): "--models[1]: duplicate of --models[0]",
        ("team-a", "--from", "keys.json"): "--from: only with --secret-manifest",
        ("team-a", "--weight", "0"): "--weight: must be a positive number, at most 1000",
        ("team-a", "--weight", "heavy"): "--weight: must be a positive number",
        ("team-a", "--tenant", "Research"): "--tenant: must be a DNS label: lower-case letters, digits and '-'",
        ("team-a", "--tenant", "x" * 64): "--tenant: must be a DNS label",
        ("team-a", "--tenant", "a_b"): "at most 63 characters (absent: the key is its own tenant) (got 'a_b')",
    }
    for args, words in cases.items():
        code, out, err = keys(tmp_path, "create", *args)
        assert (code, out) == (2, ""), args
        assert words in err and "Traceback" not in err, err
    assert not (tmp_path / "secrets").exists()

    assert keys(tmp_path, "create", "team-a")[0] == 0
    before = (tmp_path / "secrets" / "client-keys").read_bytes()
    code, out, err = keys(tmp_path, "create", "team-a")
    assert (code, out) == (2, "") and "a key named 'team-a' exists; delete it first" in err
    code, out, err = keys(tmp_path, "delete", "team-a", "--secret-manifest")
    assert (code, out) == (2, "") and "--secret-manifest: delete needs --from FILE" in err
    assert (tmp_path / "secrets" / "client-keys").read_bytes() == before


def test_a_malformed_store_is_named_and_left_alone(tmp_path: Path) -> None:
    (tmp_path / "secrets").mkdir(mode=0o700)
    (tmp_path / "secrets" / "client-keys").write_text('{"keys": [{"name": "a", "sha256": "jw-not-a-hash"}]}')
    code, out, err = keys(tmp_path, "create", "team-a")
    assert (code, out) == (2, "")
    assert "client-keys" in err and "keys[0].sha256: must be 64 lower-case hex characters" in err and "jw-not-a-hash" not in err
    assert keys(tmp_path, "list")[0] == 2
    assert "jw-not-a-hash" in (tmp_path / "secrets" / "client-keys").read_text()


def test_secret_manifest_for_a_cluster_merges_with_the_secret_there(tmp_path: Path) -> None:
    code, out, err = keys(tmp_path, "create", "team-a", "--rpm", "5", "--secret-manifest")
    assert code == 0 and not (tmp_path / "secrets").exists()  # nothing standalone is written
    manifest = json.loads(out)  # stdout is the manifest alone, for `| kubectl apply -f -`
    assert manifest["kind"] == "Secret" and manifest["metadata"]["name"] == "jetway-client-keys"
    assert manifest["metadata"]["namespace"] == "jetway-system"
    key_a = next(line.rsplit(": ", 1)[1] for line in err.splitlines() if "key team-a: " in line)
    assert key_a not in out and "replaces the keys" in err  # without --from: this key only, and it says so
    document = manifest["stringData"]["client-keys"]
    found = parse_keys(document.encode()).lookup(key_a)
    assert found is not None and found.rpm == 5

    # the Secret as `kubectl get secret jetway-client-keys -o json` prints it: base64 data, through stdin
    in_cluster = {"apiVersion": "v1", "kind": "Secret", "data": {"client-keys": base64.b64encode(document.encode()).decode()}}
    result = run_jetway("keys", "create", "team-b", "--secret-manifest", "--from", "-", "-n", "ai", stdin=json.dumps(in_cluster))
    assert result.returncode == 0, result.returncode
    merged = json.loads(result.stdout)
    assert merged["metadata"]["namespace"] == "ai"
    key_b = next(line.rsplit(": ", 1)[1] for line in result.stderr.splitlines() if "key team-b: " in line)
    ring = parse_keys(merged["stringData"]["client-keys"].encode())
    assert [k.name for k in ring] == ["team-a", "team-b"] and ring.lookup(key_a) is not None and ring.lookup(key_b) is not None

    # a keys document as a file works as well; delete prints the Secret without the key
    (tmp_path / "keys.json").write_text(merged["stringData"]["client-keys"])
    code, out, _ = keys(tmp_path, "delete", "team-a", "--secret-manifest", "--from", str(tmp_path / "keys.json"))
    assert code == 0
    assert [k.name for k in parse_keys(json.loads(out)["stringData"]["client-keys"].encode())] == ["team-b"]
    code, listed, _ = keys(tmp_path, "list", "--from", str(tmp_path / "keys.json"))
    assert code == 0 and "team-a" in listed and "team-b" in listed

    code, out, err = keys(tmp_path, "create", "team-c", "--secret-manifest", "--from", str(tmp_path / "missing.json"))
    assert (code, out) == (2, "") and f"--from {tmp_path / 'missing.json'}: No such file or directory" in err


def test_a_tenant_label_is_kept_and_listed_with_the_weight_never_the_key(tmp_path: Path) -> None:
    code, ci, err = keys(tmp_path, "create", "ci", "--tenant", "research", "--weight", "3")
    assert code == 0 and "weight: 3; tenant: research" in err
    assert keys(tmp_path, "create", "notebooks", "--tenant", "research")[0] == 0
    assert keys(tmp_path, "create", "ops")[0] == 0
    ring = parse_keys((tmp_path / "secrets" / "client-keys").read_bytes())
    assert [(k.name, k.tenant, k.weight) for k in ring] == [("ci", "research", 3), ("notebooks", "research", None), ("ops", None, None)]
    notebooks = ring.named("notebooks")
    assert notebooks is not None and ring.tenant_of(notebooks).weight == 3, "its tenant's weight: the largest of its keys'"

    code, table, _ = keys(tmp_path, "list")
    rows = [line.split() for line in table.splitlines()]
    assert code == 0 and [row[:6] for row in rows[1:]] == [
        ["ci", "*", "unlimited", "unlimited", "3", "research"],
        ["notebooks", "*", "unlimited", "unlimited", "1", "research"],
        ["ops", "*", "unlimited", "unlimited", "1", "-"],
    ]
    code, out, _ = keys(tmp_path, "list", "-o", "json")
    assert code == 0
    listed = json.loads(out)
    assert [(k["name"], k["weight"], k["tenant"]) for k in listed] == [
        ("ci", 3, "research"),
        ("notebooks", 1, "research"),
        ("ops", 1, None),
    ]
    assert listed[0]["sha256_prefix"] == hash_key(ci.strip())[:8] and set(listed[0]) == {
        "name",
        "models",
        "rpm",
        "tpm",
        "weight",
        "tenant",
        "created",
        "sha256_prefix",
    }
    for shown in (table, out):
        assert ci.strip() not in shown and hash_key(ci.strip()) not in shown, "never the key, nor its whole hash"

    before = (tmp_path / "secrets" / "client-keys").read_bytes()
    code, out, err = keys(tmp_path, "create", "bad", "--tenant", "Research!")
    assert (code, out) == (2, "") and "--tenant: must be a DNS label" in err
    assert (tmp_path / "secrets" / "client-keys").read_bytes() == before, "nothing written"


def test_an_old_document_without_tenants_still_lists_and_takes_new_keys(tmp_path: Path) -> None:
    (tmp_path / "secrets").mkdir(mode=0o700)
    old = {"keys": [{"name": "legacy", "sha256": "c" * 64, "models": [], "rpm": None, "tpm": None}]}
    (tmp_path / "secrets" / "client-keys").write_text(json.dumps(old))
    code, out, _ = keys(tmp_path, "list", "-o", "json")
    assert code == 0 and [(k["name"], k["weight"], k["tenant"]) for k in json.loads(out)] == [("legacy", 1, None)]
    assert keys(tmp_path, "create", "fresh", "--tenant", "legacy")[0] == 0
    ring = parse_keys((tmp_path / "secrets" / "client-keys").read_bytes())
    legacy, fresh = ring.named("legacy"), ring.named("fresh")
    assert legacy is not None and fresh is not None and ring.tenant_of(legacy) == ring.tenant_of(fresh), (
        "a key without a label is the tenant of its name: a label naming it joins it"
    )
