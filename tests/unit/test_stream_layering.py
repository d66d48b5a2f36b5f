import ast
import sys
from pathlib import Path

import gateway.http

ALLOWED_ROOTS = {"av", "numpy", "pydantic", "pydantic_core"}
# The HTTP transport's I/O modules; every other module of gateway.http is a pure stream format.
IO_MODULES = {"__init__.py", "leg.py", "chunked_writer.py"}


def test_stream_formats_import_only_media_stdlib_av_numpy_pydantic():
    package = Path(gateway.http.__file__).parent
    for path in package.glob("*.py"):
        if path.name in IO_MODULES:
            continue
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
                    or name.startswith(("gateway.media", "gateway.http"))
                )
                assert ok, f"{path.name} imports {name}"
