"""bench/router.py's comparison with an older build: the tree it exports, and the turns the two builds take."""

from __future__ import annotations

import subprocess
from pathlib import Path

from bench.router import ROOT, export_tree, order


def test_the_baseline_is_the_commits_tree_exported_without_a_worktree(tmp_path: Path) -> None:
    commit = export_tree("HEAD", tmp_path / "tree")
    shown = subprocess.run(["git", "show", "HEAD:services/router/__init__.py"], cwd=ROOT, capture_output=True, check=True).stdout
    assert (tmp_path / "tree/services/router/__init__.py").read_bytes() == shown
    assert commit == subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    worktrees = subprocess.run(["git", "worktree", "list"], cwd=ROOT, capture_output=True, text=True).stdout
    assert str(tmp_path) not in worktrees, "nothing registered in the repository"


def test_this_tree_and_the_baseline_take_turns_at_going_first() -> None:
    targets = ["direct", "jetway", "baseline", "litellm"]
    assert order(targets, 0) == targets
    assert order(targets, 1) == ["direct", "baseline", "jetway", "litellm"]
    assert order(targets, 2) == targets
    assert order(["direct", "jetway"], 1) == ["direct", "jetway"], "no baseline: no turns"
