"""Telemetry -> the results.json ``gpu`` block of one arm, a CSV of every sample, a PNG.

Only ``idle`` and ``load`` samples are summarized: ``ramp_in`` samples are the clocks on
their way up (not what the load ran at) and ``after`` samples are the way down.
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any

import numpy as np

from harness.record.atomic import atomic_file

from harness.telemetry.base import SAMPLE_FIELDS, THROTTLE_REASONS, GpuSample
from harness.telemetry.sampler import PHASES, Telemetry, window_of

SUMMARY_FIELDS = (
    "sm_clock_mhz",
    "graphics_clock_mhz",
    "mem_clock_mhz",
    "power_w",
    "temperature_c",
    "gpu_util_pct",
    "mem_util_pct",
)
CSV_COLUMNS = ("t_s", "phase", "uuid", "index", *SAMPLE_FIELDS, "throttle_reasons")


def _stats(samples: list[GpuSample], name: str) -> dict[str, float | None]:
    values = [v for v in (getattr(s, name) for s in samples) if v is not None]
    if not values:
        return {"median": None, "min": None}
    return {"median": float(np.median(values)), "min": float(np.min(values))}


def mean_power_from_energy(samples: list[GpuSample], windows: list[tuple[float, float | None]] | None = None) -> float | None:
    """Mean power (W) from the energy counter: Σ Δ mJ / Σ Δ t over each load window's
    samples (the gaps between windows are not load).  Unlike the instantaneous readings,
    this counts every joule between a window's first and last sample."""
    groups: dict[int | None, list[GpuSample]] = {}
    for s in samples:
        if s.energy_mj is not None:
            groups.setdefault(window_of(s.t, windows) if windows else None, []).append(s)
    energy_mj = seconds = 0.0
    for group in groups.values():
        if len(group) < 2:
            continue
        dt, de = group[-1].t - group[0].t, group[-1].energy_mj - group[0].energy_mj  # type: ignore[operator]
        if dt <= 0 or de < 0:  # a counter reset (driver reload) says nothing
            return None
        energy_mj, seconds = energy_mj + de, seconds + dt
    return energy_mj / 1000.0 / seconds if seconds > 0 else None


def _gpu_block(info: Any, mine: list[GpuSample], windows: list[tuple[float, float | None]]) -> dict:
    by_phase = {p: [s for s in mine if s.phase == p] for p in PHASES}
    idle, load = by_phase["idle"], by_phase["load"]
    sm_max = info.sm_clock_max_mhz if info is not None else None
    if sm_max is None:
        sm_max = next((s.sm_clock_max_mhz for s in mine if s.sm_clock_max_mhz), None)
    load_block: dict[str, Any] = {f: _stats(load, f) for f in SUMMARY_FIELDS}
    load_block["mean_power_w_from_energy"] = mean_power_from_energy(load, windows)
    fractions: dict[str, float] = {}
    if load:
        names = list(THROTTLE_REASONS.values())
        names += sorted({r for s in load for r in s.throttle_reasons} - set(names))
        fractions = {r: sum(r in s.throttle_reasons for s in load) / len(load) for r in names}
    load_sm = load_block["sm_clock_mhz"]["median"]
    first = mine[0] if mine else None
    return {
        "index": info.index if info is not None else (first.index if first else None),
        "name": info.name if info is not None else None,
        "driver": info.driver if info is not None else None,
        "sm_clock_max_mhz": sm_max,
        "power_limit_w": info.power_limit_w if info is not None else (first.power_limit_w if first else None),
        "samples": {p: len(v) for p, v in by_phase.items()},
        "idle": {f: _stats(idle, f) for f in SUMMARY_FIELDS},
        "load": load_block,
        "throttle_fraction_under_load": fractions,
        "sm_clock_ratio_under_load": (load_sm / sm_max) if (load_sm is not None and sm_max) else None,
    }


def summarize(tel: Telemetry) -> dict:
    """The ``gpu`` block of one arm.  ``load_measured`` is False when not one sample fell
    in the load window; ``notes`` says why (the suite turns that into a failed measurement)."""
    infos = {g.uuid: g for g in tel.gpus}
    order = [g.uuid for g in tel.gpus] + sorted({s.uuid for s in tel.samples} - set(infos))
    counts = {p: sum(1 for s in tel.samples if s.phase == p) for p in PHASES}
    notes = list(tel.notes)
    if counts["load"] == 0 and not any(n.startswith("no load samples") for n in notes):
        notes.append("no load samples: none was read inside the load window")
    return {
        "source": tel.source,
        "interval_s": tel.interval_s,
        "ramp_in_s": tel.ramp_in_s,
        "load_window_s": load_window_s(tel),
        "longest_load_window_s": max((end - start for start, end in tel.windows if end is not None), default=None),
        "load_windows": len(tel.windows),
        "load_measured": counts["load"] > 0,
        "samples": counts,
        "notes": notes,
        "disabled_fields": list(tel.disabled_fields),
        "sampler_cpu_s": tel.sampler_cpu_s,
        "gpus": {u: _gpu_block(infos.get(u), [s for s in tel.samples if s.uuid == u], tel.windows) for u in order},
    }


def load_window_s(tel: Telemetry) -> float | None:
    """Seconds under load, summed over the windows (one per repeat of the workload)."""
    closed = [end - start for start, end in tel.windows if end is not None]
    return sum(closed) if closed else None


def _t0(tel: Telemetry) -> float:
    return min((s.t for s in tel.samples), default=tel.load_start or 0.0)


def write_csv(path: str | os.PathLike, tel: Telemetry) -> None:
    """One row per sample; ``t_s`` from the first sample; empty cell = not read."""
    t0 = _t0(tel)
    with atomic_file(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(CSV_COLUMNS)
        for s in sorted(tel.samples, key=lambda s: (s.t, s.index)):
            row: list[Any] = [f"{s.t - t0:.4f}", s.phase, s.uuid, s.index]
            row += ["" if getattr(s, f) is None else getattr(s, f) for f in SAMPLE_FIELDS]
            row.append("|".join(s.throttle_reasons))
            w.writerow(row)


def write_files(folder: Path, tel: Telemetry) -> None:
    """An arm's telemetry.csv, and its telemetry.png when anything was sampled, in its record folder."""
    write_csv(folder / "telemetry.csv", tel)
    if tel.samples:
        plot_png(folder / "telemetry.png", tel)


def plot_png(path: str | os.PathLike, tel: Telemetry) -> None:
    """SM clock and power against time, one line per GPU, the load window shaded (the
    ramp-in lighter).  Agg canvas directly: no global backend switch, no display needed.
    Fixed margins, not a layout engine: `layout="constrained"` doubled the cost of every
    arm's plot (0.33 s against 0.15 s of CPU), paid once per arm of every run."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    t0 = _t0(tel)
    fig = Figure(figsize=(10, 6.5), dpi=110)
    fig.subplots_adjust(left=0.08, right=0.98, bottom=0.08, top=0.93, hspace=0.08)
    FigureCanvasAgg(fig)
    ax_clk, ax_pow = fig.subplots(2, 1, sharex=True)
    infos = {g.uuid: g for g in tel.gpus}
    uuids = [g.uuid for g in tel.gpus] + sorted({s.uuid for s in tel.samples} - set(infos))
    end_t = max((s.t for s in tel.samples), default=t0) - t0
    for ax in (ax_clk, ax_pow):
        for i, (start, end) in enumerate(tel.windows):
            ls = start - t0
            le = (end - t0) if end is not None else end_t
            ramp_end = min(ls + tel.ramp_in_s, le)
            first = i == 0  # one legend entry for all windows
            ax.axvspan(ls, ramp_end, color="tab:orange", alpha=0.10, lw=0, label="ramp-in (excluded)" if first else None)
            if le > ramp_end:
                ax.axvspan(ramp_end, le, color="tab:orange", alpha=0.25, lw=0, label="load window" if first else None)
        ax.grid(True, alpha=0.3)
    max_clocks = set()
    for u in uuids:
        mine = sorted((s for s in tel.samples if s.uuid == u), key=lambda s: s.t)
        if not mine:
            continue
        label = f"GPU {mine[0].index}" + (f" ({u[:12]}…)" if len(uuids) <= 4 else "")
        t = [s.t - t0 for s in mine]
        clk = [np.nan if s.sm_clock_mhz is None else s.sm_clock_mhz for s in mine]
        pw = [np.nan if s.power_w is None else s.power_w for s in mine]
        (line,) = ax_clk.plot(t, clk, lw=1.4, label=label)
        ax_pow.plot(t, pw, lw=1.4, color=line.get_color(), label=label)
        smx = (infos[u].sm_clock_max_mhz if u in infos else None) or mine[0].sm_clock_max_mhz
        if smx:
            max_clocks.add(smx)
    for smx in sorted(max_clocks):
        ax_clk.axhline(smx, color="0.35", ls="--", lw=1.0, label=f"max SM clock {smx:.0f} MHz")
    ax_clk.set_ylabel("SM clock (MHz)")
    ax_pow.set_ylabel("power (W)")
    ax_pow.set_ylim(bottom=0)  # idle vs load power at a glance, not read noise magnified
    ax_pow.set_xlabel("time since first sample (s)")
    gpu_name = next((g.name for g in tel.gpus), "")
    fig.suptitle(
        f"GPU telemetry — source: {tel.source}"
        + (f", {gpu_name}" if gpu_name else "")
        + f", every {tel.interval_s:g} s"
        + ("" if tel.load_start is not None else " — load never started"),
        fontsize=12,
    )
    for ax in (ax_clk, ax_pow):
        handles, labels = ax.get_legend_handles_labels()
        if handles:
            ax.legend(handles, labels, loc="best", fontsize=8, ncol=2 if len(handles) > 5 else 1)
    if not tel.samples:
        ax_clk.text(0.5, 0.5, "no samples", transform=ax_clk.transAxes, ha="center", va="center")
    with atomic_file(path, "wb") as fh:
        fig.savefig(fh, format="png")
