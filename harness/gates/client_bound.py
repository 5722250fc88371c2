"""Is an arm's figure the server's, or the client's own lag? The client-bound judgement.

A load measures the client's health (:mod:`harness.load.client_health`); this module
decides, against ``gate.client_bound``, which of the arm's figures the client distorted:

* **event-loop lag** stamps every timestamp late by up to itself, so a latency figure
  (TTFT, ITL, E2E) is the client's when the loop lag p99 exceeds
  ``loop_lag_ms_p99`` **and** the lag at the matching percentile (p50 for a mean or
  median, p99 for a p90 or p99) is at least ``min_share`` of the figure: a 15 ms lag
  is the client's trouble beside a 4 ms ITL, and noise beside a 2 s TTFT. A decode-time
  figure (TPOT, decode step, verify cycle) is a request's first-to-last-chunk span shared
  out over its tokens: one stall at either end shortens or stretches that span by the
  stall, so those figures are the client's when the loop lag p99 is at least
  ``min_share`` of the mean span (mean E2E less mean TTFT).
* **send gap**: requests that went out late were not the load that was asked for (a
  closed loop's slot stood idle for the gap; an open loop's arrivals came later), so
  the throughput figures are the client's when the send gap p99 exceeds
  ``send_gap_ms_p99`` **and** the mean gap is at least ``min_share`` of the mean E2E
  (the time a slot is busy per request): throughput loses the mean idle time, so one
  late send among many does not make it the client's.

A gate must never pass or fail a server for its client's lag (:func:`guard_client_bound`).
Lag only ever adds to a TTFT or an E2E (both of its stamps can only come late) and only
takes from throughput, so a limit such a client-bound figure still meets, the server meets
too, and that pass stands; a limit it misses says nothing about the server: inconclusive,
"the figure is the client's". An ITL is a difference of two late stamps, and a stalled
loop that reads several chunks at once makes gaps *shorter* as well as longer, so a
client-bound ITL decides nothing either way. ``gate.allow_client_bound`` decides whether a
client-bound arm fails the run (the ``client_kept_up`` gate) or only says so.
"""

from __future__ import annotations

from typing import Any

from harness.measure.registry import Metric, all_metrics, metric_value

LAG_AT = {"mean": "p50", "p50": "p50", "p90": "p99", "p99": "p99"}  # figure statistic -> loop-lag percentile


# Which figures a stalled client distorts is each metric's registry entry (`client`, `one_sided`).
def distributions() -> list[str]:
    """Latency distributions whose stamps a lagging event loop makes late (ttft_ms, itl_ms, e2e_ms)."""
    return list(dict.fromkeys(m.family for m in all_metrics() if m.client == "latency"))


def decode_figures() -> list[str]:
    """Figures made of each request's first-to-last-chunk span (tpot_ms.*, decode_step_ms, verify_cycle_ms)."""
    return [m.path for m in all_metrics() if m.client == "decode"]


def throughput() -> list[str]:
    """Rates that late sends lower (output_tok_s, request_per_s)."""
    return [m.path for m in all_metrics() if m.client == "throughput"]


def one_sided() -> set[str]:
    """Figures client lag can only make worse, never better (by distribution or path)."""
    return {m.family for m in all_metrics() if m.client and m.one_sided}


def label_of(entry: Metric) -> str:
    """A family's name in words: `TTFT` for ttft_ms.*, the label itself for a rate."""
    return entry.label.split(" ")[0] if "." in entry.path else entry.label


def labels(paths: list[str]) -> str:
    """Figures grouped by distribution: `TTFT p50/p99, ITL p99, output tok/s`."""
    named = {m.family: label_of(m) for m in reversed(all_metrics())}
    groups: dict[str, list[str]] = {}
    for path in paths:
        name, _, stat = path.partition(".")
        groups.setdefault(named.get(name, name), []).append(stat)
    return ", ".join(f"{name} {'/'.join(stats)}".strip() for name, stats in groups.items())


def lag_bound_figures(result: Any, lag: dict, share: float) -> list[str]:
    """The latency figures the loop lag is at least `share` of (their metric paths)."""
    found = []
    for name in distributions():
        for stat, lag_stat in LAG_AT.items():
            value, delay = metric_value(result, f"{name}.{stat}"), lag.get(lag_stat)
            if value and delay is not None and delay >= share * value:
                found.append(f"{name}.{stat}")
    return found


def decode_bound_figures(result: Any, lag: dict, share: float) -> list[str]:
    """The decode-time figures a stall of the loop's p99 lag is at least `share` of the mean span of."""
    e2e, ttft, delay = metric_value(result, "e2e_ms.mean"), metric_value(result, "ttft_ms.mean"), lag.get("p99")
    if e2e is None or ttft is None or delay is None or e2e <= ttft or delay < share * (e2e - ttft):
        return []
    return [path for path in decode_figures() if metric_value(result, path) is not None]


def judge(result: Any, client: dict, thresholds: Any) -> dict:
    """The judgement for one arm: ``client_bound`` (bool), ``client_bound_figures`` (metric
    paths that are the client's) and ``verdict`` (in words); {} without a client block."""
    if not client:
        return {}
    lag, gap = client.get("loop_lag_ms") or {}, client.get("send_gap_ms") or {}
    share = float(thresholds.min_share)
    lag_limit, gap_limit = float(thresholds.loop_lag_ms_p99), float(thresholds.send_gap_ms_p99)
    figures: list[str] = []
    reasons: list[str] = []
    if lag.get("p99") is not None and lag["p99"] > lag_limit:
        lagged = lag_bound_figures(result, lag, share) + decode_bound_figures(result, lag, share)
        figures += lagged
        reasons.append(f"event-loop lag p99 {lag['p99']:.1f} ms (p50 {lag['p50']:.1f}, max {lag['max']:.1f}) > "
                       f"{lag_limit:g} ms" + (f" and ≥ {share:.0%} of each of those" if lagged else
                                              f", but under {share:.0%} of every latency figure"))
    # Throughput is the slots' busy time: what it loses is the *mean* gap before a send, beside
    # the mean time a request holds its slot; one late send (the p99) only flags the check.
    e2e = metric_value(result, "e2e_ms.mean") or metric_value(result, "e2e_ms.p50")
    mean_gap = gap.get("mean") if gap.get("mean") is not None else gap.get("p50")
    if gap.get("p99") is not None and gap["p99"] > gap_limit:
        distorts = bool(e2e) and mean_gap is not None and mean_gap >= share * e2e
        figures += throughput() if distorts else []
        reasons.append(f"send gap p99 {gap['p99']:.1f} ms > {gap_limit:g} ms" +
                       (f", and its mean {mean_gap:.1f} ms ≥ {share:.0%} of the mean E2E {e2e:.0f} ms: the load "
                        f"sent was not the load asked for" if distorts else
                        f", but its mean {number(mean_gap)} ms is under {share:.0%} of the mean E2E"))
    return {"client_bound": bool(figures), "client_bound_figures": figures,
            "verdict": sentence(client, figures, reasons, lag_limit, gap_limit)}


def sentence(client: dict, figures: list[str], reasons: list[str], lag_limit: float, gap_limit: float) -> str:
    cpu = client.get("cpu") or {}
    loop_cpu = cpu.get("loop_thread_share_of_one_core")
    cpu_words = f"; the event loop's thread used {loop_cpu:.0%} of a core" if loop_cpu is not None else ""
    if figures:
        return (f"client-bound: {labels(figures)} are the client's own lag, not the server's "
                f"({'; '.join(reasons)}{cpu_words})")
    lag, gap = client.get("loop_lag_ms") or {}, client.get("send_gap_ms") or {}
    facts = "; ".join(reasons) if reasons else (
        f"event-loop lag p99 {number(lag.get('p99'))} ms (≤ {lag_limit:g}), "
        f"send gap p99 {number(gap.get('p99'))} ms (≤ {gap_limit:g})")
    return f"the client kept up: {facts}{cpu_words}"


def number(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def bound_figures(result: Any) -> list[str]:
    """The metric paths of an arm (an ArmResult, or its results.json block) that are the client's."""
    client = metric_value(result, "client") or {}
    return list(client.get("client_bound_figures") or []) if isinstance(client, dict) else []


def guard_client_bound(verdicts: list, result: Any, paths: list[str], inconclusive_passes: bool | None) -> list:
    """A limit gate (max latency, min throughput) on figures that are the client's: a
    failure cannot be blamed on the server, so it becomes inconclusive (passing as
    `inconclusive_passes`, from gate.inconclusive), and so does a pass on an ITL; a pass on a one-sided figure
    (TTFT, E2E, throughput) stands, since the server's own is at least as good, and says so."""
    bound = [p for p in paths if p in bound_figures(result)]
    if not bound:
        return verdicts
    whose = f"{labels(bound)} is the client's lag, not the server's (see the arm's client block)"
    lag_only_worsens = all(p.split(".")[0] in one_sided() for p in bound)
    for verdict in verdicts:
        if verdict.status == "passed" and lag_only_worsens:
            verdict.detail += f" (client-bound: {whose}; the server's own figure is at least this good)"
        elif verdict.status in ("passed", "failed"):
            verdict.inconclusive = True
            verdict.passed = inconclusive_passes
            verdict.detail = f"inconclusive, client-bound: {whose}: {verdict.detail}"
    return verdicts
