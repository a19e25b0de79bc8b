"""The settings tree (runtime/settings.py): every JETWAY_* variable declared once, read once, a bad value named;
docs/settings.md generated from it."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from runtime import settings

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("contracts", "runtime", "services", "cli", "simulator")


def test_docs_settings_md_is_generated_from_the_tree() -> None:
    """Regenerate with `.venv/bin/python -m runtime.settings --markdown > docs/settings.md`."""
    assert (ROOT / "docs" / "settings.md").read_text() == settings.markdown()


def test_every_variable_is_declared_once_and_its_default_is_what_an_empty_environment_gives() -> None:
    names = [spec.env for _, spec in settings.declared()]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    assert all(re.fullmatch(r"JETWAY_[A-Z0-9_]+", name) for name in names)
    loaded = settings.load({})
    for group, spec in settings.declared():
        values = getattr(loaded, group)
        assert any(getattr(values, f) == spec.default for f in vars(values) if not f.startswith("_")), spec.env


def test_a_value_is_typed_and_bounded() -> None:
    loaded = settings.load(
        {"JETWAY_RESYNC_SECONDS": "2.5", "JETWAY_ROUTER_PORT": "9000", "JETWAY_WEBHOOK": "false", "JETWAY_FREE_PORTS": "10000-10999"}
    )
    assert loaded.kube.resync_seconds == 2.5 and loaded.router.port == 9000 and loaded.webhook.enabled is False
    assert loaded.testing.free_ports == (10000, 10999)
    assert settings.load({"JETWAY_WATCH_NAMESPACE": ""}).watcher.watch_namespace is None  # empty: not configured


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"JETWAY_RESYNC_SECONDS": "0"}, "JETWAY_RESYNC_SECONDS must be a positive number of seconds (got '0')"),
        ({"JETWAY_RESYNC_SECONDS": "nan"}, "JETWAY_RESYNC_SECONDS must be a positive number of seconds (got 'nan')"),
        ({"JETWAY_RESYNC_SECONDS": "inf"}, "JETWAY_RESYNC_SECONDS must be a positive number of seconds (got 'inf')"),
        (
            {"JETWAY_CONSOLE_RECHECK_SECONDS": "3601"},
            "JETWAY_CONSOLE_RECHECK_SECONDS must be a positive number of seconds, at most 3600 (got '3601')",
        ),
        (
            {"JETWAY_CONSOLE_RECHECK_SECONDS": ""},
            "JETWAY_CONSOLE_RECHECK_SECONDS must be a positive number of seconds, at most 3600 (got '')",
        ),
        ({"JETWAY_HEALTH_PORT": "70000"}, "JETWAY_HEALTH_PORT must be a whole number from 1 to 65535 (got '70000')"),
        ({"JETWAY_MODE": "clustered"}, "JETWAY_MODE must be one of standalone, cluster (got 'clustered')"),
        ({"JETWAY_DEV_RELOAD": "maybe"}, "JETWAY_DEV_RELOAD must be true or false (got 'maybe')"),
        (
            {"JETWAY_ROUTER_POLICY": "fastest"},
            "JETWAY_ROUTER_POLICY must be one of prefix-cache, least-outstanding, round-robin (got 'fastest')",
        ),
        ({"JETWAY_ROUTER_LOAD_BOUND": "0.5"}, "JETWAY_ROUTER_LOAD_BOUND must be a number, 1 or more (got '0.5')"),
        ({"JETWAY_ROUTER_BLOCK_CHARS": "1.5"}, "JETWAY_ROUTER_BLOCK_CHARS must be a whole number, 1 or more (got '1.5')"),
        (
            {"JETWAY_HISTORY_PER_FACET": "0"},
            "JETWAY_HISTORY_PER_FACET must be a whole number of events, 1 or more, or 'unlimited' (got '0')",
        ),
        ({"JETWAY_FREE_PORTS": "20-10"}, "JETWAY_FREE_PORTS must be two ports LOW-HIGH, LOW at most HIGH (got '20-10')"),
        ({"JETWAY_NATS_PASSWORD": "s3cret"}, "JETWAY_NATS_USER and JETWAY_NATS_PASSWORD go together: set both or neither"),
    ],
)
def test_a_bad_value_names_its_variable_and_rule(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        settings.load(environ)


def test_a_bad_value_stops_a_service_process_before_it_connects() -> None:
    env = {**os.environ, "JETWAY_LEASE_TTL_SECONDS": "0", "JETWAY_NATS_URL": "nats://127.0.0.1:9"}
    done = subprocess.run([sys.executable, "-m", "services.selector"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "selector: JETWAY_LEASE_TTL_SECONDS must be a number of seconds from 1 to 600 (got '0')" in done.stderr
    assert "Traceback" not in done.stderr


def test_only_the_settings_module_reads_a_jetway_variable() -> None:
    """No `environ.get("JETWAY_...")`, `environ["JETWAY_..."]` or `context.env("JETWAY_...")` outside runtime/settings.py."""
    found = []
    for top in PRODUCT:
        for path in sorted((ROOT / top).rglob("*.py")):
            if path == ROOT / "runtime" / "settings.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                key = None
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("get", "env", "getenv", "pop")
                ):
                    key = node.args[0] if node.args else None
                elif isinstance(node, ast.Subscript):
                    key = node.slice
                if isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value.startswith("JETWAY_"):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {key.value}")
    assert not found, found


def test_every_variable_deploy_sets_for_a_service_is_declared() -> None:
    declared = {spec.env for _, spec in settings.declared()}
    set_there = set()
    for path in (ROOT / "deploy" / "base").glob("*.yaml"):
        set_there |= set(re.findall(r"-\s+name:\s+(JETWAY_[A-Z0-9_]+)", path.read_text()))
    servers = {name for name in set_there if name.startswith("JETWAY_NATS_PASSWORD_")}  # nats-server's (contracts/natsauth.py)
    assert set_there and set_there - servers <= declared, sorted(set_there - servers - declared)
