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
* **stalls**: the two rules above judge a figure by the lag at its own percentile, but a
  stalled loop distorts every statistic, the median too: the chunks that arrived during a
  stall are read together when it ends, so one gap reads the whole stall and the others
  near zero (a busy machine read ITL p50 10.71 ms against the server's own 11.42, loop lag
  p50 0.95 ms, p99 140 ms). The *stalled share* is the share of the load's time the loop
  spent late beyond its median lag: the ticker's n wake-ups took n x (tick + mean lag),
  n x (mean - p50) of it beyond the ordinary lag (a lower bound of the time stalled, see
  :func:`stalled_share`). About that share of the chunks arrived in a stall. When the loop
  lag p99 exceeds ``loop_lag_ms_p99`` and the stalled share is at least
  ``max_stalled_share``, every statistic (mean, p50, p90, p99) of a latency distribution
  whose p50 the lag p99 is at least ``min_share`` of is the client's, the decode figures
  under the decode rule, and the throughput when a stall (the lag p99) is at least
  ``min_share`` of the mean E2E: a closed loop's slot whose request ends in a stall stands
  idle until the stall ends, a loss the send gap cannot see (its next send is due when
  the end is read).

A gate must never pass or fail a server for its client's lag (:func:`guard_client_bound`).
Lag only ever adds to a TTFT or an E2E (both of its stamps can only come late) and only
takes from throughput, so a limit such a client-bound figure still meets, the server meets
too, and that pass stands; a limit it misses says nothing about the server: inconclusive,
"the figure is the client's". An ITL is a difference of two late stamps, and a stalled
loop that reads several chunks at once makes gaps *shorter* as well as longer, so a
client-bound ITL decides nothing either way. The ``client_kept_up`` gate makes a client-bound
arm inconclusive (a run that cannot be trusted is not a regression; ``gate.inconclusive``
decides), ``gate.fail_client_bound`` a failure, ``gate.allow_client_bound`` a passing warning.
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
    """Rates that late sends lower (the output and request rates)."""
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


def stalled_share(client: dict) -> float | None:
    """The share of the load's time the event loop was stalled beyond its ordinary (median)
    lag: n x (mean - p50) over n x (tick + mean), the ticker's n wake-ups having taken
    tick + lag each. Σ(lag - p50) is at most the time spent late beyond the median, so
    this is a lower bound of it; None without the figures (an older record)."""
    lag, tick = client.get("loop_lag_ms") or {}, client.get("tick_ms")
    mean, p50 = lag.get("mean"), lag.get("p50")
    if mean is None or p50 is None or not tick:
        return None
    return max(0.0, mean - p50) / (tick + mean)


def stall_bound_figures(result: Any, lag: dict, share: float) -> list[str]:
    """Every statistic of each latency distribution whose p50 (else mean) a stall of the loop's
    p99 lag is at least `share` of; the decode figures by their own rule; the throughput when
    such a stall is at least `share` of the mean E2E (a slot idles in it)."""
    found, delay = [], lag["p99"]
    for name in distributions():
        typical = metric_value(result, f"{name}.p50") or metric_value(result, f"{name}.mean")
        if typical and delay >= share * typical:
            found += [f"{name}.{stat}" for stat in LAG_AT if metric_value(result, f"{name}.{stat}") is not None]
    found += decode_bound_figures(result, lag, share)
    e2e = metric_value(result, "e2e_ms.mean") or metric_value(result, "e2e_ms.p50")
    if e2e and delay >= share * e2e:
        found += [path for path in throughput() if metric_value(result, path) is not None]
    return found


def judge(result: Any, client: dict, thresholds: Any) -> dict:
    """The judgement for one arm: ``client_bound`` (bool), ``client_bound_figures`` (metric
    paths that are the client's), ``stalled_share`` (see :func:`stalled_share`), ``stalls_bound``
    (whether the stall rule applied) and ``verdict`` (in words); {} without a client block."""
    if not client:
        return {}
    lag, gap = client.get("loop_lag_ms") or {}, client.get("send_gap_ms") or {}
    share, stalls, stalled = float(thresholds.min_share), False, stalled_share(client)
    lag_limit, gap_limit = float(thresholds.loop_lag_ms_p99), float(thresholds.send_gap_ms_p99)
    figures: list[str] = []
    reasons: list[str] = []
    if lag.get("p99") is not None and lag["p99"] > lag_limit:
        lagged = lag_bound_figures(result, lag, share) + decode_bound_figures(result, lag, share)
        figures += lagged
        reasons.append(f"event-loop lag p99 {lag['p99']:.1f} ms (p50 {lag['p50']:.1f}, max {lag['max']:.1f}) > "
                       f"{lag_limit:g} ms" + (f" and ≥ {share:.0%} of each of those" if lagged else
                                              f", but under {share:.0%} of every latency figure"))
        most = float(getattr(thresholds, "max_stalled_share", 1.0))
        stalls = stalled is not None and stalled >= most
        if stalls:
            every = [path for path in stall_bound_figures(result, lag, share) if path not in figures]
            figures += every
            reasons.append(f"the loop stalled for at least {stalled:.0%} of the load (≥ {most:.0%}; lag mean "
                           f"{lag['mean']:.1f} ms against p50 {lag['p50']:.1f} ms per {client['tick_ms']:g} ms tick): "
                           f"chunks read in or right after a stall carry late stamps and near-zero gaps, so "
                           + (f"{labels(every)} are the client's too" if every else "every statistic can move"))
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
    figures = in_order(figures)
    return {"client_bound": bool(figures), "client_bound_figures": figures,
            "stalled_share": None if stalled is None else round(stalled, 4),
            "stalls_bound": stalls,
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


def in_order(paths: list[str]) -> list[str]:
    """Metric paths without repeats, in the order the summary names them (TTFT mean..p99, ITL ..., rates)."""
    order = [f"{name}.{stat}" for name in distributions() for stat in LAG_AT] + decode_figures() + throughput()
    unique = list(dict.fromkeys(paths))
    return sorted(unique, key=lambda p: order.index(p) if p in order else len(order))


def cause(result: Any) -> str:
    """Why an arm's figures are the client's, in a few words: `client-bound: event-loop lag p99 140 ms`."""
    client = metric_value(result, "client") or {}
    lag, gap = client.get("loop_lag_ms") or {}, client.get("send_gap_ms") or {}
    facts = [f"event-loop lag p99 {lag['p99']:.3g} ms"] if lag.get("p99") is not None else []
    if client.get("stalls_bound"):
        facts.append(f"stalled {client['stalled_share']:.0%} of the load")
    rates = any(p in throughput() for p in bound_figures(result))
    if gap.get("p99") is not None and rates and not client.get("stalls_bound"):  # else the stalls bound them
        facts.append(f"send gap p99 {gap['p99']:.3g} ms")
    return "client-bound: " + ", ".join(facts)


def guard_client_bound(verdicts: list, result: Any, paths: list[str], inconclusive_passes: bool | None,
                       divisor: bool = False) -> list:
    """A limit gate (max latency, min throughput) on figures that are the client's: a
    failure cannot be blamed on the server, so it becomes inconclusive (passing as
    `inconclusive_passes`, from gate.inconclusive), and so does a pass on an ITL; a pass on a one-sided figure
    (TTFT, E2E, throughput) stands, since the server's own is at least as good, and says so.
    `divisor`: the figures are what a ratio divides by (the plain arm's tok/s in a speedup),
    so lag that lowered them flatters the ratio: there a pass is inconclusive and a failure stands."""
    bound = [p for p in paths if p in bound_figures(result)]
    if not bound:
        return verdicts
    whose = f"{labels(bound)} is the client's lag, not the server's (see the arm's client block)"
    lag_only_worsens = all(p.split(".")[0] in one_sided() for p in bound)
    standing = "failed" if divisor else "passed"
    for verdict in verdicts:
        if verdict.status == standing and lag_only_worsens:
            verdict.detail += (f" (client-bound: {whose}; the server's own figure is at least this good)" if not divisor
                               else f" (client-bound: {whose}; the ratio would be lower still)")
        elif verdict.status in ("passed", "failed"):
            verdict.inconclusive = True
            verdict.passed = inconclusive_passes
            verdict.cause = verdict.cause or cause(result)
            verdict.detail = f"inconclusive, client-bound: {whose}: {verdict.detail}"
    return verdicts
