"""opuslib must work on a machine without a system libopus (PyAV's bundled copy is used)."""

import subprocess
import sys
import textwrap


def test_opuslib_loads_the_bundled_libopus_when_the_system_has_none():
    script = textwrap.dedent(
        """
        import ctypes.util
        real = ctypes.util.find_library
        ctypes.util.find_library = lambda name: None if name == "opus" else real(name)
        from gateway.media import opus_lib
        from gateway.media.opus_codec import OpusFrameEncoder
        assert "av.libs" in opus_lib.libopus_path(), opus_lib.libopus_path()
        packet = OpusFrameEncoder().encode(bytes(960))
        assert packet, "no packet"
        print(opus_lib.libopus_version())
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("libopus ")
