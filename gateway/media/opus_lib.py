"""Import opuslib whether or not the system has libopus.

opuslib finds libopus through ``ctypes.util.find_library("opus")``. Debian's ``libopus0`` satisfies
that; without it, PyAV's wheel carries its own libopus (``site-packages/av.libs/libopus-*.so*``),
which we hand to opuslib for the duration of its import. Import opuslib only through this module.
"""

from __future__ import annotations

import ctypes.util
import glob
import os
from types import ModuleType
from typing import Any

_LIB_ENV = "GATEWAY_LIBOPUS"  # explicit override: path to a libopus shared object


def bundled_libopus() -> str | None:
    """Path of the libopus that ships inside PyAV's wheel, if there is one."""
    import av

    libs_dir = os.path.join(os.path.dirname(os.path.dirname(av.__file__)), "av.libs")
    matches = sorted(glob.glob(os.path.join(libs_dir, "libopus*.so*")))
    return matches[0] if matches else None


def _locate(prefer_system: bool = True) -> str | None:
    override = os.environ.get(_LIB_ENV)
    if override:
        return override
    system = ctypes.util.find_library("opus") if prefer_system else None
    return system or bundled_libopus()


def load_opuslib(prefer_system: bool = True) -> ModuleType:
    """Import and return the ``opuslib`` module, pointing it at a usable libopus."""
    import sys

    if "opuslib" in sys.modules:
        return sys.modules["opuslib"]
    location = _locate(prefer_system)
    if location is None:
        raise ImportError(
            "no libopus found: install Debian libopus0, or PyAV (which bundles one), "
            f"or set {_LIB_ENV}"
        )
    original = ctypes.util.find_library

    def find_library(name: str) -> Any:
        return location if name == "opus" else original(name)

    ctypes.util.find_library = find_library
    try:
        import opuslib
    finally:
        ctypes.util.find_library = original
    return opuslib


opuslib = load_opuslib()


def libopus_path() -> str:
    """The shared object opuslib is bound to."""
    return str(opuslib.api.libopus._name)


def libopus_version() -> str:
    fn = opuslib.api.libopus.opus_get_version_string
    fn.restype = ctypes.c_char_p
    return str(fn().decode())
