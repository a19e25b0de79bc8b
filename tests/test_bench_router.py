"""bench/router.py's comparison with an older build: the tree it exports, and the turns the two builds take."""

from __future__ import annotations

import subprocess
from pathlib import Path

from bench.router import ROOT, export_tree, order
from bench.router_instructions import counted


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


def test_instructions_are_read_from_the_totals_a_toggled_count_leaves(tmp_path: Path) -> None:
    """callgrind switched on and off by callgrind_control writes `summary: 0` and the count in `totals:`."""
    out = tmp_path / "callgrind.out"
    out.write_text("version: 1\nevents: Ir\nsummary: 0\n\nfl=(1) ceval.c\nfn=(1) f\n3 286421539\n\ntotals: 286421539\n")
    assert counted(out) == 286_421_539
