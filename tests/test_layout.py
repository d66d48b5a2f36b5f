"""The package layout, checked: layers (import-linter contract in pyproject.toml), no import
circles anywhere, a handful of modules at the package root."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent


def test_the_layering_contract_holds():
    lint = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:]


def test_no_import_circles():
    graph = grimp.build_graph("gateway")
    circles = sorted(
        f"{a} -> {b}"
        for a in graph.modules
        for b in graph.find_modules_directly_imported_by(a)
        if graph.chain_exists(importer=b, imported=a)
    )
    assert circles == []


def test_few_modules_at_the_root():
    loose = sorted(p.name for p in (ROOT / "gateway").glob("*.py"))
    assert loose == ["__init__.py", "__main__.py", "cli.py"]


def test_every_package_says_what_it_holds():
    for init in (ROOT / "gateway").glob("*/__init__.py"):
        text = init.read_text()
        assert text.startswith('"""') and len(text) > 60, f"{init} has no docstring"
