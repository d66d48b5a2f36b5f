import ast
import sys
from pathlib import Path

import gateway.stream

ALLOWED_ROOTS = {"av", "numpy", "pydantic", "pydantic_core"}


def test_stream_package_imports_only_media_stdlib_av_numpy_pydantic():
    package = Path(gateway.stream.__file__).parent
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                root = name.split(".")[0]
                ok = (
                    root in sys.stdlib_module_names
                    or root in ALLOWED_ROOTS
                    or name.startswith(("gateway.media", "gateway.stream"))
                )
                assert ok, f"{path.name} imports {name}"
