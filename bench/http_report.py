"""bench/http_stream.py's verdicts, tables and plot (from its result dict only)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

TARGETS = {
    "piper_first_audio_ms": 120.0,  # median, each route
    "backend_overhead_ms": 10.0,  # median first audio - median backend first chunk (stand-in)
    "density_cpu_pct": 30.0,  # of the gateway's pinned core
    "density_rss_added_mb": 40.0,  # for all streams
}


def _check(value: float | None, target: float) -> dict[str, Any]:
    ok = None if value is None else value <= target
    margin = None if value is None else round(value - target, 2)
    return {"value": value, "target": target, "ok": ok, "over_by": margin}


def verdicts(data: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    rows = (data.get("latency") or {}).get("rows") or {}
    for route in ("frames", "opus"):
        piper = rows.get(f"piper/{route}")
        if piper:
            out[f"piper_{route}"] = _check(piper["first_audio_ms"]["median"],
                                           TARGETS["piper_first_audio_ms"])
        cosy = rows.get(f"cosyvoice-150ms/{route}")
        if cosy:
            out[f"cosyvoice_overhead_{route}"] = _check(cosy["overhead_ms"],
                                                        TARGETS["backend_overhead_ms"])
    n = str(data["settings"]["streams"])
    gw = ((data.get("density") or {}).get("gateway-adaptive") or {}).get(n)
    if gw:
        out["density_cpu"] = _check(gw.get("server_cpu_pct"), TARGETS["density_cpu_pct"])
        out["density_rss"] = _check(gw.get("rss_added_mb"), TARGETS["density_rss_added_mb"])
        ran = gw.get("streams_ran")
        out["density_all_ran"] = {"value": ran, "target": int(n), "ok": ran == int(n)}
    return out


def _f(value: Any, spec: str, width: int) -> str:
    text = format(value, spec) if isinstance(value, int | float) else "-"
    return f"{text:>{width}}"


def print_tables(data: dict[str, Any]) -> None:
    latency = data.get("latency")
    if latency:
        runs = data["settings"]["runs"]
        print(f"\nrequest -> first audio byte (ms; median of {runs}, asap, fresh connection)")
        print(f"{'row':<17} {'route':<7} {'median':>7} {'p90':>7} {'min':>7} {'max':>7} "
              f"{'backend':>8} {'overhead':>9}")
        for name, r in latency["rows"].items():
            fa, be = r["first_audio_ms"], r.get("backend_ms") or {}
            print(f"{name.split('/')[0]:<17} {r['route']:<7} {_f(fa['median'], '.1f', 7)} "
                  f"{_f(fa['p90'], '.1f', 7)} {_f(fa['min'], '.1f', 7)} "
                  f"{_f(fa['max'], '.1f', 7)} {_f(be.get('median'), '.1f', 8)} "
                  f"{_f(r.get('overhead_ms'), '.1f', 9)}")
    density = data.get("density")
    if density:
        s = data["settings"]
        print(f"\nlive streams ({s['format']}), {s['window_s']:g} s window; server on core "
              f"{s['server_cpu']}, load generator on core {s['loadgen_cpu']}; late = ms behind "
              "the live schedule")
        print(f"{'run':<17} {'N':>4} {'ran':>4} {'CPU%':>5} {'sys%':>5} {'oth%':>5} "
              f"{'us/fr':>6} {'idle MB':>7} {'+RSS MB':>7} {'KB/str':>6} {'late50':>6} "
              f"{'late99':>6} {'<=20ms':>6} {'<=50ms':>6} {'writes/s':>8} {'fr/wr':>5} "
              f"{'gen%':>5} {'lag99':>5}")
        for name, rungs in density.items():
            for n, r in sorted(rungs.items(), key=lambda kv: int(kv[0])):
                print(density_row(name, n, r))
        for n, ratio in (data.get("ratios_gateway_over_baseline") or {}).items():
            print(f"gateway (adaptive) / baseline at N={n}: CPU x{ratio['server_cpu_pct']}, "
                  f"CPU per frame x{ratio['server_cpu_us_per_frame']}, RSS added "
                  f"x{ratio['rss_added_mb']}, idle RSS x{ratio['idle_rss_kb']}; late p99 "
                  f"{ratio['late_p99_ms'][0]} vs {ratio['late_p99_ms'][1]} ms")
    verdict = data.get("verdict") or {}
    if verdict:
        print("\ntargets:")
        for name, v in verdict.items():
            state = {True: "PASS", False: "MISS", None: "n/a"}[v["ok"]]
            over = v.get("over_by")
            extra = f" (over by {over:g})" if v["ok"] is False and over is not None else ""
            print(f"  {name:<28} {state}: {v['value']} vs <= {v['target']}{extra}")


def density_row(name: str, n: str, r: dict[str, Any]) -> str:
    if r.get("error"):
        return f"{name:<17} {n:>4} ERROR: {r['error'].strip().splitlines()[-1][:100]}"
    late = r.get("lateness") or {}
    idle = r.get("idle_rss_kb")
    w20, w50 = late.get("within_20ms"), late.get("within_50ms")
    return (
        f"{name:<17} {n:>4} {_f(r.get('streams_ran'), 'd', 4)} "
        f"{_f(r.get('server_cpu_pct'), '.1f', 5)} {_f(r.get('server_sys_pct'), '.1f', 5)} "
        f"{_f(r.get('others_on_server_core_pct'), '.1f', 5)} "
        f"{_f(r.get('server_cpu_us_per_frame'), '.1f', 6)} "
        f"{_f(idle / 1024 if idle else None, '.1f', 7)} {_f(r.get('rss_added_mb'), '.1f', 7)} "
        f"{_f(r.get('rss_added_kb_per_stream'), '.1f', 6)} "
        f"{_f(late.get('p50_ms'), '.1f', 6)} {_f(late.get('p99_ms'), '.1f', 6)} "
        f"{_f(100 * w20 if w20 is not None else None, '.2f', 6)} "
        f"{_f(100 * w50 if w50 is not None else None, '.2f', 6)} "
        f"{_f(r.get('writes_per_s'), '.0f', 8)} {_f(r.get('frames_per_write'), '.2f', 5)} "
        f"{_f(r.get('loadgen_cpu_pct'), '.1f', 5)} "
        f"{_f((r.get('loadgen_loop_lag_ms') or {}).get('p99'), '.1f', 5)}"
    )


def plot(data: dict[str, Any], path: Path) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    (ax_lat, ax_cpu), (ax_rss, ax_late) = axes
    rows = (data.get("latency") or {}).get("rows") or {}
    if rows:
        names = list(rows)
        med = [rows[n]["first_audio_ms"]["median"] for n in names]
        p90 = [max(0.0, rows[n]["first_audio_ms"]["p90"] - m)
               for n, m in zip(names, med, strict=True)]
        ax_lat.bar(range(len(names)), med, yerr=[[0] * len(med), p90], color="tab:blue",
                   capsize=3, label="first audio (median, p90)")
        backend = [(i, rows[n]["backend_ms"]["median"]) for i, n in enumerate(names)
                   if (rows[n].get("backend_ms") or {}).get("median") is not None]
        if backend:
            ax_lat.scatter(*zip(*backend, strict=True), marker="_", s=400, color="black",
                           zorder=3, label="backend's own first chunk")
        ax_lat.axhline(TARGETS["piper_first_audio_ms"], color="grey", ls="--", lw=0.8)
        ax_lat.set_xticks(range(len(names)), names, rotation=20, ha="right", fontsize=8)
        ax_lat.set(ylabel="ms", title="request -> first audio byte")
        ax_lat.legend(fontsize=8)
    styles = {"gateway-adaptive": ("tab:blue", "-o"), "gateway-frame": ("tab:cyan", "--s"),
              "baseline": ("tab:red", "-^")}
    for name, rungs in (data.get("density") or {}).items():
        pts = sorted((int(n), r) for n, r in rungs.items() if not r.get("error"))
        if not pts:
            continue
        color, style = styles.get(name, ("tab:grey", "-x"))
        ns = [n for n, _ in pts]
        ax_cpu.plot(ns, [r.get("server_cpu_pct") for _, r in pts], style, color=color,
                    label=name)
        ax_rss.plot(ns, [r.get("rss_added_mb") for _, r in pts], style, color=color,
                    label=name)
        ax_late.plot(ns, [(r.get("lateness") or {}).get("p99_ms") for _, r in pts], style,
                     color=color, label=f"{name} p99")
        ax_late.plot(ns, [(r.get("lateness") or {}).get("p50_ms") for _, r in pts], ":",
                     color=color, label=f"{name} p50")
    ax_cpu.axhline(TARGETS["density_cpu_pct"], color="grey", ls="--", lw=0.8)
    ax_cpu.axhline(100, color="black", lw=0.6)
    ax_cpu.set(xlabel="concurrent live streams", ylabel="CPU % of the pinned core",
               title="server CPU")
    ax_rss.axhline(TARGETS["density_rss_added_mb"], color="grey", ls="--", lw=0.8)
    ax_rss.set(xlabel="concurrent live streams", ylabel="MB", title="RSS added over idle")
    ax_late.set(xlabel="concurrent live streams", ylabel="ms behind the live schedule",
                title="frame lateness at the readers")
    ax_late.set_yscale("symlog", linthresh=1)
    for ax in (ax_cpu, ax_rss, ax_late):
        ax.legend(fontsize=7)
    for ax in axes.flat:
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return str(path)
