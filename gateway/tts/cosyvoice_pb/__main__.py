"""Regenerate the stubs: ``python -m gateway.tts.cosyvoice_pb`` (needs grpcio-tools).

Equivalent to running, from the repository root::

    python -m grpc_tools.protoc -I . --python_out=. --pyi_out=. --grpc_python_out=. \\
        gateway/tts/cosyvoice_pb/cosyvoice.proto

then prefixing each generated file with ``# ruff: noqa`` (generated code is not linted).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
GENERATED = ("cosyvoice_pb2.py", "cosyvoice_pb2.pyi", "cosyvoice_pb2_grpc.py")


def main() -> int:
    from grpc_tools import protoc

    proto = (HERE / "cosyvoice.proto").relative_to(ROOT)
    args = ["protoc", f"-I{ROOT}", f"--python_out={ROOT}", f"--pyi_out={ROOT}",
            f"--grpc_python_out={ROOT}", str(proto)]
    if protoc.main(args) != 0:
        return 1
    for name in GENERATED:
        path = HERE / name
        path.write_text("# ruff: noqa\n" + path.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
