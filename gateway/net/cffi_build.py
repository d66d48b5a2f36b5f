"""Build and import the gateway's cffi API-mode extensions (the compiled send path,
``net/sendpath.py``; a talker's PCM helpers, ``media/pcm_c.py``).

Each is compiled into ``cache_dir()`` (inside the venv: ``make install`` builds them, and so
does the first start of a gateway -- never at request time, no download) under a module name
that carries a hash of its C source, so an edited source is built again beside the old one.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def cache_dir() -> Path:
    """Where the built extensions live: inside the venv (``sys.prefix``), or
    ``$GATEWAY_SENDPATH_DIR`` when set."""
    override = os.environ.get("GATEWAY_SENDPATH_DIR")
    if override:
        return Path(override)
    return Path(sys.prefix) / "share" / "voice-gateway" / "sendpath"


def import_built(module: str, directory: Path | None = None) -> Any:
    """The built extension ``module`` (its ``ffi`` and ``lib``) from ``directory`` (default
    ``cache_dir()``), or None when it is not built there."""
    for path in (directory or cache_dir()).glob(f"{module}*.so"):
        spec = importlib.util.spec_from_file_location(module, path)
        if spec is None or spec.loader is None:
            continue
        loaded = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(loaded)
        return loaded
    return None


def compile_module(module: str, cdef: str, source: str, directory: Path | None = None) -> Path:
    """Compile ``source`` (declared by ``cdef``) as ``module`` into ``directory`` (default
    ``cache_dir()``); returns the .so path. Raises when there is no compiler (or cffi, or
    Python's headers)."""
    import cffi  # (comes with pylibsrtp)

    target = directory or cache_dir()
    target.mkdir(parents=True, exist_ok=True)
    ffi = cffi.FFI()
    ffi.cdef(cdef)
    ffi.set_source(module, source, extra_compile_args=["-O2"])
    with tempfile.TemporaryDirectory(dir=target) as tmp:
        # cffi's build prints the compiler's command lines; keep start-up logs clean
        with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
            built = Path(ffi.compile(tmpdir=tmp))
        final = target / built.name
        os.replace(built, final)  # atomic: a concurrent start-up sees the old file or the new
    return final


def build_and_say(build: Callable[[], Path], what: str) -> None:
    """Build an extension now (``make install``), saying where, or why not: a failure is not
    an error (the gateway then runs the Python path)."""
    try:
        path = build()
    except Exception as exc:
        print(f"{what} not built ({exc}); the gateway will use the Python path")
        return
    print(f"{what} built: {path}")
