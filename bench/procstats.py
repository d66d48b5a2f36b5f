"""Process CPU and memory from /proc (Linux): what a server process costs over a window."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True, slots=True)
class CpuSample:
    at: float  # time.monotonic()
    cpu_s: float  # user + system seconds of every thread of the process so far
    sys_s: float = 0.0  # of which in the kernel (system calls: here mostly UDP sends)


def cpu_sample(pid: int) -> CpuSample:
    with open(f"/proc/{pid}/stat", "rb") as f:
        raw = f.read()
    # The command name (field 2) may hold spaces: split after its closing parenthesis.
    fields = raw[raw.rindex(b")") + 2 :].split()
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
    return CpuSample(time.monotonic(), _process_clock_s(pid, (utime + stime) / CLOCK_TICKS),
                     stime / CLOCK_TICKS)


def _process_clock_s(pid: int, ticks_s: float) -> float:
    """The process's CPU-time clock (Linux ``MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)``): its
    threads' time on a CPU to the nanosecond, ended threads included, where /proc's utime +
    stime count 10 ms ticks -- a quiet server over a 1 s window read 0 (a smoke run's
    ``server_cpu_pct`` of 0.0 at 3 silent streams). ``ticks_s`` where the clock is refused."""
    try:
        return time.clock_gettime(((~pid) << 3) | 2)
    except OSError:
        return ticks_s


def cpu_percent(start: CpuSample, end: CpuSample) -> float:
    """CPU % over the interval (100 = one core busy)."""
    wall = end.at - start.at
    return 100.0 * (end.cpu_s - start.cpu_s) / wall if wall > 0 else 0.0


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def threads(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("Threads:"):
                return int(line.split()[1])
    return 0


def load_average() -> list[float]:
    return [round(v, 2) for v in os.getloadavg()]


def linear_fit(xs: list[float], ys: list[float]) -> tuple[float, float] | None:
    """Least-squares slope and intercept; None with fewer than two distinct x."""
    if len(xs) < 2 or len(set(xs)) < 2:
        return None
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
    return slope, my - slope * mx


def core_times() -> dict[int, tuple[int, int]]:
    """Per core: (busy, total) jiffies since boot, from /proc/stat."""
    out: dict[int, tuple[int, int]] = {}
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("cpu") and line[3].isdigit():
                name, *values = line.split()
                v = [int(x) for x in values]
                idle = v[3] + (v[4] if len(v) > 4 else 0)  # idle + iowait
                total = sum(v[:8])  # guest time is already counted in user
                out[int(name[3:])] = (total - idle, total)
    return out


def core_busy_percent(
    start: dict[int, tuple[int, int]], end: dict[int, tuple[int, int]]
) -> dict[int, float]:
    """Busy % of each core over the interval, whoever ran there."""
    busy: dict[int, float] = {}
    for core, (b1, t1) in end.items():
        b0, t0 = start.get(core, (b1, t1))
        busy[core] = round(100.0 * (b1 - b0) / (t1 - t0), 1) if t1 > t0 else 0.0
    return busy


def _udp_inodes() -> set[str]:
    inodes: set[str] = set()
    for table in ("/proc/net/udp", "/proc/net/udp6"):
        try:
            with open(table) as f:
                inodes.update(line.split()[9] for line in f.readlines()[1:])
        except OSError:
            pass
    return inodes


def udp_sockets(pid: int) -> int | None:
    """UDP sockets the process holds open (its fds against /proc/net/udp and udp6)."""
    inodes = _udp_inodes()
    count = 0
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:[") and link[8:-1] in inodes:
            count += 1
    return count
