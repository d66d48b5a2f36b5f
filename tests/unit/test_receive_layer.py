"""gateway.receive sits below tts/speech/session/api and the client: it imports only media, rtp
and runtime of the gateway (and itself)."""

import ast
import sys
from pathlib import Path

import gateway.receive

ALLOWED = ("gateway.media", "gateway.nack", "gateway.rtp", "gateway.runtime", "gateway.receive")
THIRD_PARTY = {"numpy", "opuslib", "av"}


def imported_modules(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module)
    return out


def test_receive_imports_only_the_layers_below_it():
    package = Path(gateway.receive.__file__).parent
    modules = sorted(package.glob("*.py"))
    assert len(modules) >= 10
    for path in modules:
        for name in imported_modules(path):
            top = name.split(".")[0]
            if top == "gateway":
                assert name.startswith(ALLOWED), f"{path.name} imports {name}"
            else:
                allowed = top in THIRD_PARTY or top in sys.stdlib_module_names
                assert allowed, f"{path.name} imports {name}"
