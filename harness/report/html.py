"""`specgate report RUN`: one self-contained HTML page for a run record.

The page has no external reference at all (inline CSS, charts and telemetry plots as
base64 PNG data URIs, no scripts), so it can be attached to a CI run, mailed or opened
offline. Charts are drawn with matplotlib's Agg canvas (no pyplot state), the page with a
jinja2 template (harness/report/templates/report.html.j2, autoescaped). Every key of the record
is optional: a run whose servers failed still gets a page that says so.
"""

from __future__ import annotations

import base64
import io
import json
import shlex
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from harness.gates.client_bound import bound_figures
from harness.report.compare import GATE_STATUSES, gate_status, noise_cv
from harness.measure.registry import OUTPUT_RATE, Metric, metric, metric_value, number, read, report_metrics
from harness.report.timeline import steady_span, timeline_svg
from harness.report.tables import (ACCEPTANCE_DIMENSIONS, ACCEPTANCE_HEADER, FLEET_HEADER, acceptance_rows, fleet_lines,
                                   fleet_rows, heading, value_cell)
from harness.report.page import render, write_page
from harness.record.store import INTERRUPTED, RUNNING, RunData, read_run
from harness.record.requests import RequestColumns

MAX_ECDF_POINTS = 5000
ARM_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")


def write_record_page(folder: Path, data_file: str, what: str, template: str, context, out: Optional[Path] = None) -> Path:
    """A record kind's own page (capacity, A/B, calibration): its JSON read (a RecordError of one sentence
    when it cannot be), `context(data, folder name)` rendered with `template`, written
    atomically (default `<folder>/report.html`); returns the page's path."""
    from harness.record.store import RecordError

    file = Path(folder) / data_file
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RecordError(f"{file} is not a readable {what} ({exc}).") from None
    out = Path(out) if out is not None else Path(folder) / "report.html"
    return write_page(out, render(template, context(data, Path(folder).name)))


def write_report(run_dir: Path, out: Optional[Path] = None) -> Path:
    """Render `run_dir`'s record to one HTML file (default `<run>/report.html`); return its path.
    Raises harness.record.store.RecordError when run_dir is not a run record."""
    run = read_run(Path(run_dir))
    record_dir = run.path.parent
    out = Path(out) if out is not None else record_dir / "report.html"
    return write_page(out, render_report(run))


def render_report(run: RunData) -> str:
    return render("report.html.j2", report_context(run))


# --- the record as the template sees it --------------------------------------------------

def report_context(run: RunData) -> dict[str, Any]:
    data, arms = run.data, list(run.arms)
    plain_arm = data.get("plain_arm") or None
    columns = report_metrics(plain_arm)
    gates = [gate_row(g) for g in data.get("gates") or [] if isinstance(g, dict)]
    requests = {arm: run.request_columns(arm, LATENCY_COLUMNS) for arm in arms}
    samples = {arm: samples_of(columns) for arm, columns in requests.items()}
    return {
        "label": run.label,
        "experiment": str(data.get("experiment") or run.label),
        "description": text(data.get("description")),
        "facts": facts(run),
        "verdict": verdict(run, gates),
        "columns": [heading(m, plain_arm) for m in columns],
        "arm_rows": [arm_row(arm, run.arms.get(arm), columns, plain_arm) for arm in arms],
        "category_rows": category_rows(run.arms, arms, plain_arm),
        "acceptance_tables": [{"what": what, "header": ["arm", what, *ACCEPTANCE_HEADER], "rows": rows}
                              for dimension, what in ACCEPTANCE_DIMENSIONS.items()
                              if (rows := acceptance_rows(run.arms, arms, dimension))],
        "client_rows": client_rows(run.arms, arms),
        "fleet": {"header": FLEET_HEADER, "rows": fleet_rows(run.arms, arms), "lines": fleet_lines(run.arms, arms)},
        "gates": gates,
        "gate_counts": {s: sum(g["status"] == s for g in gates) for s in GATE_STATUSES},
        "latency_chart": latency_chart(samples, arms),
        # a torn per-request file is said, not taken for a record that kept no requests
        "unreadable_requests": [f"{arm}: {columns.unreadable}" for arm, columns in requests.items() if columns.unreadable],
        "throughput_chart": throughput_chart(run.arms, arms),
        "accept_length_chart": accept_length_chart(run.arms, arms),
        "position_rows": position_rows(run.arms, arms),
        "arms": [arm_card(run.path.parent, arm, run.arms.get(arm)) for arm in arms],
        "timelines": timelines(run.arms, arms),
        "generated_utc": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
    }


def timelines(blocks: dict[str, Any], arms: list[str]) -> list[dict[str, Any]]:
    """Each arm with timeslices: its timeline (harness/report/timeline.py) and its steady window in words."""
    found = []
    for arm in arms:
        block = blocks.get(arm) if isinstance(blocks.get(arm), dict) else {}
        steady = block.get("steady") if isinstance(block.get("steady"), dict) else None
        svg = timeline_svg(arm, block.get("timeslices"), steady, arm_color(arms, arm))
        if svg is not None:
            found.append({"name": arm, "svg": svg, "steady": steady_words(steady)})
    return found


def steady_words(steady: Optional[dict[str, Any]]) -> str:
    if not steady:
        return "No steady window was measured."
    if steady.get("inconclusive"):
        return f"Steady window inconclusive: {steady['inconclusive']}."
    span = steady_span(steady)
    where = f"{span[0] / 1000.0:.2f} s to {span[1] / 1000.0:.2f} s of the run, " if span else ""
    rule = "all slots busy" if steady.get("rule") == "closed_loop" else "arrivals ramped in, before the last send"
    rate = metric(OUTPUT_RATE)  # the steady block's rate, as the registry computed and shows it
    return (f"Steady window ({rule}): {where}{number(steady.get('window_s')) or 0:.2f} s, "
            f"{100 * (number(steady.get('share_of_load')) or 0):.0f} % of the load; "
            f"{rate.format(number(metric_value(steady, rate.path)))} {rate.unit} over it.")


def category_rows(blocks: dict[str, Any], arms: list[str], plain_arm: Optional[str]) -> list[list[str]]:
    """One row per arm and category of the prompts (results.json `categories`)."""
    rows = []
    for arm in arms:
        block = blocks.get(arm)
        categories = block.get("categories") if isinstance(block, dict) else None
        for name, c in (categories or {}).items() if isinstance(categories, dict) else []:
            speedup = c.get(f"speedup_vs_{plain_arm}") if plain_arm else None
            rows.append([arm, str(name), show(c.get("requests")), show(c.get("accept_length")),
                         show(c.get("stream_tok_s")), "-" if speedup is None else f"{speedup:.2f}x",
                         *(show(read(c, metric(path))) for path in ("ttft_ms.p50", "tpot_ms.p50"))])
    return rows


def client_rows(blocks: dict[str, Any], arms: list[str]) -> list[dict[str, Any]]:
    """Per arm, the client's own health (results.json `client`) and its verdict in words."""
    rows = []
    for arm in arms:
        block = blocks.get(arm) if isinstance(blocks.get(arm), dict) else {}
        client = block.get("client")
        if not isinstance(client, dict) or not client:
            continue
        lag, gap, cpu = (client.get(k) if isinstance(client.get(k), dict) else {}
                         for k in ("loop_lag_ms", "send_gap_ms", "cpu"))
        percent = lambda v: "-" if number(v) is None else f"{number(v):.0%}"
        rows.append({"arm": arm, "bound": bool(client.get("client_bound")),
                     "cells": [show(lag.get(s)) for s in ("p50", "p99", "max")]
                     + [show(gap.get(s)) for s in ("p50", "p99", "max")]
                     + [percent(cpu.get("process_share_of_one_core")), percent(cpu.get("loop_thread_share_of_one_core"))],
                     "verdict": text(client.get("verdict"))})
    return rows


def position_rows(blocks: dict[str, Any], arms: list[str]) -> list[list[str]]:
    """Per arm, the fraction of verify cycles that accepted draft position 1, 2, ...: from
    the requests' own histograms, else from the server's counters (first window)."""
    rows = []
    for arm in arms:
        block = blocks.get(arm) if isinstance(blocks.get(arm), dict) else {}
        windows = [w for w in block.get("server_metrics") or [] if isinstance(w, dict)]
        for source, values in (("requests", block.get("acceptance_per_position")),
                               ("server /metrics", windows[0].get("acceptance_per_position") if windows else None)):
            if isinstance(values, list) and values:
                rows.append([arm, source, " · ".join(f"{number(v):.2f}" for v in values if number(v) is not None)])
                break
    return rows


def text(value: Any) -> str:
    return "" if value is None else str(value)


def facts(run: RunData) -> list[tuple[str, str]]:
    data = run.data
    command = data.get("command")
    if isinstance(command, list):
        command = shlex.join(str(c) for c in command)
    rows = [("command", command), ("host", data.get("host")), ("started", data.get("started_utc")),
            ("finished", data.get("finished_utc")), ("plain arm", data.get("plain_arm")),
            ("harness", harness_text(data)), ("reference run", data.get("baseline")), ("replay of", data.get("replay_of"))]
    notes = data.get("notes")
    rows += [("note", n) for n in (notes if isinstance(notes, list) else [notes] if notes else [])]
    rows.append(("status", run.incompleteness or run.status))
    return [(k, text(v)) for k, v in rows if v not in (None, "")]


def harness_text(data: dict[str, Any]) -> Optional[str]:
    """`0.1.0 (git 1a2b3c4d, dirty)` from `harness: {version, git_commit, git_dirty}`, else harness_version."""
    info = data.get("harness") if isinstance(data.get("harness"), dict) else {}
    version = info.get("version") or data.get("harness_version")
    commit = info.get("git_commit")
    if commit:
        return f"{version or '?'} (git {str(commit)[:10]}{', dirty' if info.get('git_dirty') else ''})"
    return version


def verdict(run: RunData, gates: list[dict[str, Any]]) -> dict[str, str]:
    failed = [g for g in gates if g["status"] == "failed"]
    unmeasured = [a for a, v in run.arms.items() if isinstance(v, dict) and v.get("status") not in (None, "measured")]
    if run.status == RUNNING:
        return {"status": "failed", "text": "INCOMPLETE: the run died before it finished"}
    if run.status == INTERRUPTED:
        return {"status": "failed", "text": "INTERRUPTED"}
    if failed or unmeasured:
        parts = [f"{len(failed)} gate(s) failed"] if failed else []
        parts += [f"arm {a} not measured" for a in unmeasured]
        return {"status": "failed", "text": "FAILED: " + "; ".join(parts)}
    if not gates:
        return {"status": "skipped", "text": "NO GATES evaluated"}
    return {"status": "passed", "text": "PASSED"}


def arm_row(arm: str, result: Any, columns: list[Metric], plain_arm: Optional[str]) -> dict[str, Any]:
    result = result if isinstance(result, dict) else {}
    cells = []
    bound = bound_figures(result)
    for column in columns:
        key = column.key(plain_arm)
        value = number(read(result, column, plain_arm))
        cv = noise_cv(result, key)
        cells.append({"value": value_cell(column, value), "cv": None if cv is None else f"±{cv * 100:.1f}%",
                      "bad": column.count and column.better == "lower" and bool(value),
                      "client_bound": key in bound})
    status = text(result.get("status")) or "unknown"
    return {"arm": arm, "status": status, "status_class": status_class(status), "cells": cells,
            "benchmark_only": text(result.get("benchmark_only")), "filler": acceptance_on_filler(result)}


def acceptance_on_filler(result: dict[str, Any]) -> bool:
    """A speculative arm's accept length measured on a trace replay's filler words: not representative."""
    trace = result.get("trace") if isinstance(result.get("trace"), dict) else {}
    return result.get("accept_length") is not None and trace.get("acceptance_representative") is False


def status_class(status: str) -> str:
    return "passed" if status == "measured" else "failed"


def gate_row(gate: dict[str, Any]) -> dict[str, str]:
    return {"status": gate_status(gate), "name": text(gate.get("name")), "arm": text(gate.get("arm")),
            "value": show(gate.get("value")), "threshold": show(gate.get("threshold")),
            "reference": show(gate.get("baseline")), "detail": text(gate.get("detail"))}


def show(value: Any) -> str:
    """A gate value or threshold: numbers to 4 significant digits, structures as compact JSON."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(", ", ": "), default=str)
    return str(value)


def arm_card(record_dir: Path, arm: str, result: Any) -> dict[str, Any]:
    result = result if isinstance(result, dict) else {}
    status = text(result.get("status")) or "unknown"
    errors = result.get("errors") if isinstance(result.get("errors"), dict) else {}
    return {"name": arm, "status": status, "status_class": status_class(status),
            "error": text(result.get("error")), "errors": [(text(m), text(c)) for m, c in errors.items()],
            "benchmark_only": text(result.get("benchmark_only")), "filler": acceptance_on_filler(result),
            "server": server_facts(result), "gpus": gpu_facts(result.get("gpu")) + energy_facts(result),
            "telemetry_png": png_file_uri(record_dir / "arms" / arm / "telemetry.png")}


def server_facts(result: dict[str, Any]) -> list[tuple[str, str]]:
    server = result.get("server") if isinstance(result.get("server"), dict) else {}
    image = server.get("image") if isinstance(server.get("image"), dict) else {}
    command = server.get("command")
    if isinstance(command, list):
        command = shlex.join(str(c) for c in command)
    rows = [("backend", result.get("backend")), ("server version", result.get("server_version")),
            ("image", image.get("tag")), ("image id", image.get("id")), ("digest", image.get("digest")),
            ("container", server.get("container")), ("url", server.get("base_url")), ("command", command),
            ("accept length source", result.get("accept_length_source")), ("repeats", result.get("repeats"))]
    return [(k, text(v)) for k, v in rows if v not in (None, "")]


def gpu_facts(gpu: Any) -> list[str]:
    """One line per GPU from the telemetry summary (clocks, power, utilisation under load)."""
    if not isinstance(gpu, dict) or not isinstance(gpu.get("gpus"), dict):
        return []
    lines = []
    for uuid, g in gpu["gpus"].items():
        if not isinstance(g, dict):
            continue
        parts = [f"GPU {g.get('index', '?')} {g.get('name') or uuid}"]
        clock, ratio = number(metric_value(g, "load.sm_clock_mhz.median")), number(g.get("sm_clock_ratio_under_load"))
        if clock is not None:
            parts.append(f"SM clock under load {clock:.0f} MHz" + (f" ({ratio:.2f} of max)" if ratio else ""))
        for key, label, unit in (("load.power_w.median", "power", "W"), ("load.gpu_util_pct.median", "util", "%")):
            if (v := number(metric_value(g, key))) is not None:
                parts.append(f"{label} {v:.0f} {unit}")
        lines.append(", ".join(parts))
    return lines


def energy_facts(result: dict[str, Any]) -> list[str]:
    """The arm's GPU energy over the load window and per output token, in one line, with
    its ratio to the plain arm's where the record has one."""
    gpu = result.get("gpu")
    energy = gpu.get("energy") if isinstance(gpu, dict) else None
    if not isinstance(energy, dict):
        return []
    per_token = number(energy.get("joules_per_token"))
    if per_token is None:
        return [f"energy per token not measured: {text(energy.get('why'))}"]
    line = (f"energy {number(energy.get('joules')) or 0:.1f} J over {number(energy.get('seconds')) or 0:.2f} s of load "
            f"({energy.get('method')}), {energy.get('output_tokens')} tokens: {per_token:.3f} J/token")
    for key, value in result.items():
        if key.startswith("joules_per_token_vs_") and number(value) is not None:
            line += f" ({value:.2f}x of {key.removeprefix('joules_per_token_vs_')})"
    return [line]


# --- the requests' latencies ----------------------------------------------------------------

LATENCY_COLUMNS = ("warmup", "ok", "ttft_ms", "chunk_ms")  # all the charts read of the requests


def latency_samples(run: RunData, arm: str) -> dict[str, np.ndarray]:
    """TTFT per request and ITL per chunk gap (ms), from the arm's measured, successful
    requests (a line from before `ok` existed counts), read as columns."""
    return samples_of(run.request_columns(arm, LATENCY_COLUMNS))


def samples_of(columns: RequestColumns) -> dict[str, np.ndarray]:
    """latency_samples over an arm's columns already read."""
    measured = columns.measured(missing_ok_counts=True)
    ttft = measured.get("ttft_ms")
    return {"ttft": ttft[np.isfinite(ttft)], "itl": measured.ragged("chunk_ms").gaps().values}


# --- charts --------------------------------------------------------------------------------

def arm_color(arms: list[str], arm: str) -> str:
    return ARM_COLORS[arms.index(arm) % len(ARM_COLORS)]


def figure_uri(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def png_file_uri(path: Path) -> Optional[str]:
    try:
        raw = path.read_bytes()
    except OSError:
        return None
    return "data:image/png;base64," + base64.b64encode(raw).decode("ascii") if raw.startswith(b"\x89PNG") else None


def latency_chart(samples: dict[str, dict[str, np.ndarray]], arms: list[str]) -> Optional[str]:
    """ECDFs of TTFT (per request) and ITL (per chunk gap), one line per arm."""
    if not any(s[k].size for s in samples.values() for k in ("ttft", "itl")):
        return None
    fig = Figure(figsize=(12, 4.6), layout="constrained")
    for ax, key, title in zip(fig.subplots(1, 2), ("ttft", "itl"),
                              ("Time to first token (per request)", "Inter-token latency (per chunk gap)")):
        ecdf_axes(ax, {arm: samples[arm][key] for arm in arms}, arms, title)
    return figure_uri(fig)


def ecdf_axes(ax, values: dict[str, np.ndarray], arms: list[str], title: str) -> None:
    drawn = [arm for arm, v in values.items() if v.size]
    for arm in drawn:
        v = values[arm]
        x = np.sort(v)
        y = np.arange(1, x.size + 1) / x.size
        if x.size > MAX_ECDF_POINTS:  # a long run has millions of chunk gaps; the curve needs a few thousand
            keep = np.unique(np.linspace(0, x.size - 1, MAX_ECDF_POINTS).astype(int))
            x, y = x[keep], y[keep]
        p50, p99 = np.percentile(v, [50, 99])
        ax.step(x, y, where="post", color=arm_color(arms, arm), lw=1.8,
                label=f"{arm}: p50 {p50:.1f}, p99 {p99:.1f} ms (n={x.size})")
    for q in (0.5, 0.99):
        ax.axhline(q, color="#999999", lw=0.8, ls=":")
    ax.set(title=title, xlabel="ms", ylabel="fraction ≤ x", ylim=(0, 1.02))
    ax.grid(alpha=0.3)
    if drawn:
        low = min(values[a][values[a] > 0].min(initial=np.inf) for a in drawn)
        high = max(values[a].max() for a in drawn)
        if np.isfinite(low) and high / low > 30:  # a long tail: a log axis keeps the bulk readable
            ax.set_xscale("log")
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.set_xlabel("ms (log scale)")
        ax.legend(loc="upper left", bbox_to_anchor=(0, -0.16), fontsize=9, frameon=False)
    else:
        ax.text(0.5, 0.5, "no measured requests", ha="center", va="center", transform=ax.transAxes, color="#666666")


def throughput_chart(results: dict[str, Any], arms: list[str]) -> Optional[str]:
    """Output tok/s per arm (min-max over repeats as an error bar when the record has it)."""
    values = {arm: number(metric_value(results.get(arm), OUTPUT_RATE)) for arm in arms}
    shown = [arm for arm in arms if values[arm] is not None]
    if not shown:
        return None
    fig = Figure(figsize=(9, 0.9 + 0.6 * max(len(arms), 2)), layout="constrained")
    ax = fig.subplots()
    ys = np.arange(len(arms))[::-1]
    for y, arm in zip(ys, arms):
        value = values[arm]
        if value is None:
            ax.text(0, y, f"  {arm}: not measured", va="center", color="#b42318", fontsize=10)
            continue
        err = spread_err(results.get(arm), value)
        ax.barh(y, value, color=arm_color(arms, arm), height=0.6, xerr=err, capsize=4)
        speedup = next((number(v) for k, v in (results.get(arm) or {}).items() if k.startswith("speedup_vs_")), None)
        ax.text(value + (err[1][0] if err else 0.0), y, f"  {value:.1f}" + (f" ({speedup:.2f}x)" if speedup else ""),
                va="center", fontsize=10)
    ax.set_yticks(ys, arms)
    ax.set_ylim(-0.6, len(arms) - 0.4)
    ax.set(xlabel="output tokens/s (speedup vs the plain arm in brackets)")
    ax.set_xlim(0, max(values[a] for a in shown) * 1.25)
    ax.grid(axis="x", alpha=0.3)
    return figure_uri(fig)


def accept_length_chart(results: dict[str, Any], arms: list[str]) -> Optional[str]:
    """Per-request accept length histograms (results.json `accept_length_per_request`), one
    colour per arm, with each arm's p10/p50/p90 in its legend entry."""
    blocks = {arm: (results.get(arm) or {}).get("accept_length_per_request") for arm in arms
              if isinstance(results.get(arm), dict)}
    shown = [arm for arm, b in blocks.items() if isinstance(b, dict) and b.get("histogram")]
    if not shown:
        return None
    fig = Figure(figsize=(9, 3.6), layout="constrained")
    ax = fig.subplots()
    for arm in shown:
        block = blocks[arm]
        starts, counts = zip(*block["histogram"])
        ax.bar(starts, counts, width=block.get("bin_width", 0.25), align="edge", alpha=0.55,
               color=arm_color(arms, arm), edgecolor=arm_color(arms, arm),
               label=f"{arm}: " + ", ".join(f"{k} {number(block.get(k)) or 0:.2f}" for k in ("p10", "p50", "p90"))
               + f" (n={block.get('n')})")
    # from 1 (no draft ever accepted) so that one narrow bin does not fill the axes
    ends = [start + (blocks[arm].get("bin_width") or 0.25) for arm in shown for start, _ in blocks[arm]["histogram"]]
    ax.set_xlim(min(0.9, *(s for arm in shown for s, _ in blocks[arm]["histogram"])), max(ends) + 0.25)
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set(title="Accept length per request (its completion tokens ÷ its verify cycles)",
           xlabel="accept length (tokens per verify cycle)", ylabel="requests")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=9, frameon=False)
    return figure_uri(fig)


def spread_err(result: Any, value: float) -> Optional[list[list[float]]]:
    noise = result.get("noise") if isinstance(result, dict) else None
    spread = noise.get(OUTPUT_RATE) if isinstance(noise, dict) else None
    lo, hi = (number(spread.get(k)) for k in ("min", "max")) if isinstance(spread, dict) else (None, None)
    if lo is None or hi is None:
        return None
    return [[max(value - lo, 0.0)], [max(hi - value, 0.0)]]
