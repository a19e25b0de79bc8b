"""A cold build inside a fixture (testbed/cluster/build.py `build_time`) is bounded by the build's limit, not by the
test's: on a fresh machine the node fixture once spent pytest-timeout's 900 s waiting for and making builds, and
every node test failed. Run as a pytest of its own with a 1 s test timeout."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

INNER = textwrap.dedent(
    """
    import time

    import pytest

    from testbed.cluster.build import build_time


    def build(seconds):
        ends = time.monotonic() + seconds
        while time.monotonic() < ends:  # a build: busy for longer than the test may take
            time.sleep(0.05)


    @pytest.fixture
    def built():
        with build_time():
            build(1.5)


    def test_a_build_longer_than_the_test_timeout(built):
        pass


    def test_the_test_keeps_its_own_timeout_after_the_build(built):
        build(1.5)
    """
)


def test_a_fixtures_build_is_not_bound_by_the_test_timeout(tmp_path: Path) -> None:
    (tmp_path / "test_inner.py").write_text(INNER)
    inner = ["-q", "-p", "no:cacheprovider", "-p", "no:xdist", "--timeout=1", "--timeout-method=signal", str(tmp_path)]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *inner],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert "1 failed, 1 passed" in done.stdout, done.stdout[-3000:]
    assert "test_the_test_keeps_its_own_timeout_after_the_build" in done.stdout and "Timeout (>1.0s)" in done.stdout
