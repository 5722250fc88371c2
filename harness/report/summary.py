"""The human summary of a run: one arm x metric table and every gate's verdict in words.
The same text is printed at the end of the pytest run and saved as summary.md."""

from __future__ import annotations

from typing import Any

from harness.measure import prompt_length, trace_replay
from harness.measure.agreement import client_decoded_tokens, sentence, server_decode_ms_per_token
from harness.gates.client_bound import bound_figures
from harness.gates.trust import speed_verdict
from harness.gates.verdict import undecided_sentence
from harness.engines.base import ITL_PER_TOKEN
from harness.measure.registry import OUTPUT_RATE, metric, read, summary_columns
from harness.report.tables import (ACCEPTANCE_DIMENSIONS, ACCEPTANCE_HEADER, FLEET_HEADER, Row, acceptance_rows,
                                   fleet_lines, fleet_rows, markdown_table, metric_table, value_cell)
from harness.measure.metrics import ArmResult, category_speedups
from harness.telemetry.energy import joules_per_token_ratio

CLIENT_BOUND_MARK = "*"


def arm_row(result: ArmResult, comparison: dict[str, float | None]) -> Row:
    """One arm's row: the registry's summary columns, then requests ok/failed in one cell.
    Cross-arm metrics (speedup, break-even) come from `comparison`, keyed by metric path.
    A figure that is the client's own lag is marked `*` (see the Client health section)."""
    return Row([result.arm], result, [f"{result.requests_ok}/{result.requests_failed}"],
               given={m.path: comparison.get(m.path) for m in summary_columns() if m.between_arms},
               marks={path: CLIENT_BOUND_MARK for path in bound_figures(result)})


def arm_cells(result: ArmResult, comparison: dict[str, float | None]) -> list[str]:
    """The summary cells of one arm's row (without the arm's name)."""
    return arms_table([arm_row(result, comparison)]).rows[0][1:]


def arms_table(rows: list[Row]):
    return metric_table("summary", ["arm"], rows, ["ok/failed"], style="column")


def column_names() -> list[str]:
    return arms_table([]).header[1:]


def cell(value: Any, pattern: str) -> str:
    return "-" if value is None else pattern.format(value)


def steady_section(experiment, results: dict[str, ArmResult]) -> list[str]:
    """Each arm's steady window in one line, and what speedup and break-even rest on
    (docs/measurement.md, "The steady window")."""
    lines = []
    for arm in experiment.arm_names:
        steady = results[arm].steady if arm in results else None
        if not steady:
            continue
        if steady.get("inconclusive"):
            lines.append(f"- {arm}: inconclusive: {steady['inconclusive']}")
        else:
            rate = metric(OUTPUT_RATE)  # the rate the registry computed over the window
            lines.append(f"- {arm}: {steady.get('window_s') or 0:.2f} s, {100 * (steady.get('share_of_load') or 0):.0f} % "
                         f"of the load, {cell(read(steady, rate), rate.pattern)} {rate.unit}")
    if not lines:
        return []
    plain = experiment.plain_arm
    basis = (" Speedup and break-even are over each arm's steady window where both arms have one, else over "
             f"each arm's whole load (basis_vs_{plain} in results.json).") if plain else ""
    return ["", "## Steady window", "", f"Where the load was stationary (closed loop: every slot busy; open loop: from the arrivals' "
            f"ramp-in to the last send).{basis}", "",
            *lines]


def cancel_section(experiment, results: dict[str, ArmResult]) -> list[str]:
    """workload.cancel: per arm, how many measured requests the client cancelled (docs/workloads.md)."""
    lines = [f"- {arm}: {cancel_words(results[arm].cancel)}" for arm in experiment.arm_names
             if arm in results and results[arm].cancel]
    if not lines:
        return []
    return ["", "## Cancellations", "", "Requests the client closed mid-stream on purpose (workload.cancel): left out "
            "of every figure above, and not failures.", "", *lines]


def cancel_words(block: dict) -> str:
    cut = (f"after {block['after_tokens']} tokens" if block.get("after_tokens") is not None
           else f"{block.get('after_ms'):g} ms after sending")
    ended = block["chosen"] - block["cancelled"]
    first = f", {ended} of them ended before their cut" if ended else ""
    return (f"{block['cancelled']} request(s) cancelled {cut} (fraction {block['fraction']:g} asked: "
            f"{block['chosen']} chosen{first}), {block['tokens_before_cancel']} token(s) received before the cut")


def format_summary(experiment, results: dict[str, ArmResult], arm_status: dict[str, dict],
                   verdicts: list, comparisons: dict[str, dict], gpu: dict[str, dict] | None = None,
                   notes: list[str] | None = None, not_evaluated: list[dict] | None = None) -> str:
    lines = [f"# specgate: {experiment.name}", "", f"**{gated_headline(verdicts)}**", "", experiment.description, ""]
    lines += [f"> {note}" for note in notes or []] + ([""] if notes else [])
    table = arms_table([arm_row(results[arm], comparisons.get(arm, {})) if arm in results
                        else Row([arm], {}, ["-"]) for arm in experiment.arm_names])
    for arm, row in zip(experiment.arm_names, table.rows):
        if arm not in results:  # an arm that was not measured says why in its first figure's place
            row[1] = arm_status.get(arm, {}).get("status", "not run")
    lines += ["Latencies in ms; accept length is run-scoped and token-weighted "
              "(Σ completion tokens ÷ Σ verify cycles over measured requests; 1 + Σ accepted drafts ÷ Σ verify "
              "cycles where the engine counts each request's accepted drafts).", ""]
    lines += table.markdown()
    if any(bound_figures(r) for r in results.values()):
        lines.append(f"\n{CLIENT_BOUND_MARK} client-bound: the figure is the client's own lag, not the server's "
                     f"(see Client health).")
    lines += [f"\n{benchmark_only_words(arm.name, arm.benchmark_only)}" for arm in getattr(experiment, "arms", ())
              if getattr(arm, "benchmark_only", None)]
    for arm in experiment.arm_names:
        r = results.get(arm)
        if r is not None and r.accept_length_source == "server_cumulative":
            lines.append(f"\n{arm}: accept length is the server-cumulative fallback (includes warm-up and other traffic).")
        mismatch = prompt_length.sentence(arm, r.prompt_length) if r is not None else None
        if mismatch:
            lines.append(f"\n{mismatch}")
        for message, count in (r.errors.items() if r is not None else []):
            lines.append(f"\n{arm}: {count} request(s) failed: {message}")
        lines += [f"\n{line}" for line in other_model_lines(arm, r, arm_status.get(arm, {}).get("model"))]
        unreset = cache_not_reset(arm, arm_status.get(arm, {}).get("prefix_cache_resets") or [])
        if unreset:
            lines.append(f"\n{unreset}")
        lines += [f"\n{note}" for note in counter_resets(arm, arm_status.get(arm, {}).get("server_metrics") or [])]
        error = arm_status.get(arm, {}).get("error")
        if error:
            lines.append(f"\n{arm}: {error.splitlines()[0]}")
    lines += steady_section(experiment, results)
    lines += cancel_section(experiment, results)
    lines += category_section(experiment, results)
    lines += acceptance_section(experiment, results)
    lines += noise_section(experiment, results) + server_section(experiment, results, arm_status)
    lines += fleet_section(experiment, arm_status)
    lines += gpu_section(experiment, gpu or {})
    lines += energy_section(experiment, gpu or {})
    lines += client_section(experiment, results)
    lines += trace_section(experiment, results)
    lines += ["", "## Gates", ""]
    if not verdicts:
        lines.append("No gate was evaluated.")
    for v in verdicts:
        lines.append(f"- {v.line()}")  # as sweep and capacity summaries print theirs
    counts = {s: sum(v.status == s for v in verdicts) for s in ("passed", "failed", "skipped", "unreliable", "inconclusive")}
    line = f"{counts['passed']} gate(s) passed, {counts['failed']} failed, {counts['skipped']} skipped"
    if counts["unreliable"]:
        line += f", {counts['unreliable']} unreliable (too noisy to decide)"
    if counts["inconclusive"]:
        failing = sum(v.inconclusive and v.passed is False for v in verdicts)
        line += (f", {counts['inconclusive']} inconclusive (the data cannot tell; "
                 + (f"{failing} fail the run by gate.inconclusive=fail" if failing else "gate.inconclusive lets them pass") + ")")
    lines += ["", line + "."]
    lines += not_evaluated_section(not_evaluated or [])
    return "\n".join(lines) + "\n"


def benchmark_only_words(arm: str, why: str) -> str:
    """A forced-acceptance arm, said wherever its figures are shown."""
    return (f"**{arm} is benchmark-only**: its acceptance is forced ({why}), so its outputs are not the model's "
            f"and its accept length is the one set; its speed is measured, its quality never judged.")


def gated_headline(verdicts: list) -> str:
    """Whether the run gated anything, first: `Gated: 20 verdicts passed, 1 failed`, or `This run
    gated nothing it measured: 5 verdicts inconclusive (eagle3: client-bound: event-loop lag p99
    140 ms (3); eagle3: GPU 0 throttled (2))`. A verdict decides when it passed or failed; an
    inconclusive one is named by its cause (a run that cannot be trusted) or as the data's."""
    if not verdicts:
        return "Gated nothing: no gate was evaluated."
    unproven = undecided_sentence(verdicts)
    return (unproven + " " if unproven else "") + decided_headline(verdicts)


def decided_headline(verdicts: list) -> str:
    passed, failed = (sum(v.status == s for v in verdicts) for s in ("passed", "failed"))
    undecided = undecided_words(verdicts)
    if not passed + failed:
        return f"This run gated nothing it measured: {undecided or 'every verdict was skipped'}."
    line = f"Gated: {passed} verdict(s) passed, {failed} failed"
    speed = [v for v in verdicts if speed_verdict(v)]
    if speed and not any(v.status in ("passed", "failed") for v in speed):
        return f"{line}, but no speed verdict decided: {undecided_words(speed) or 'each was skipped'}."
    return line + (f"; {undecided}" if undecided else "") + "."


def undecided_words(verdicts: list) -> str:
    """`5 verdicts inconclusive (eagle3: GPU 0 throttled (3); the data could not tell (2)), 1 unreliable`."""
    causes: dict[str, int] = {}
    for v in verdicts:
        if v.status == "inconclusive":
            why = f"{v.arm}: {v.cause}" if v.cause else "the data could not tell"
            causes[why] = causes.get(why, 0) + 1
    words = []
    if causes:
        named = "; ".join(f"{why} ({count})" if len(causes) > 1 else why for why, count in causes.items())
        words.append(f"{sum(causes.values())} verdict(s) inconclusive ({named})")
    unreliable = sum(v.status == "unreliable" for v in verdicts)
    if unreliable:
        words.append(f"{unreliable} unreliable (too noisy over the repeats)")
    return ", ".join(words)


def not_evaluated_section(rows: list[dict]) -> list[str]:
    """Configured gates whose tests never ran, grouped by suite: said, never silent."""
    if not rows:
        return []
    by_suite: dict[str, list[str]] = {}
    for row in rows:
        by_suite.setdefault(row["suite"], []).append(f"{row['name']} [{row['arm']}]")
    lines = ["", f"{len(rows)} configured gate(s) were NOT evaluated (their tests did not run):"]
    return lines + [f"- {suite}: {', '.join(names)}" for suite, names in by_suite.items()]


CATEGORY_LATENCIES = ("ttft_ms.p50", "tpot_ms.p50")  # a category's latency figures, by registry path


def category_section(experiment, results: dict[str, ArmResult]) -> list[str]:
    """Per category of the prompts (a dataset's rows carry them): acceptance and speed
    depend on content, so one figure over a mix hides where a drafter wins or loses."""
    rows = []
    plain_arm = getattr(experiment, "plain_arm", None)  # an experiment may have none
    plain = results.get(plain_arm) if plain_arm else None
    for arm in experiment.arm_names:
        result = results.get(arm)
        if result is None or not result.categories:
            continue
        speedups = category_speedups(result, plain) if arm != plain_arm else {}
        for name, c in result.categories.items():
            rows.append([arm, name, str(c["requests"]), cell(c["accept_length"], "{:.2f}"),
                         cell(c["stream_tok_s"], "{:.1f}"), cell(speedups.get(name), "{:.2f}x"),
                         *(value_cell(metric(path), read(c, metric(path))) for path in CATEGORY_LATENCIES)])
    if not rows:
        return []
    header = ["arm", "category", "requests", "accept len", "stream tok/s", "speedup", "TTFT p50", "TPOT p50"]
    return ["", "## Per category", "",
            "A category's speed is its requests' own (Σ tokens ÷ Σ request durations: what one "
            "request sees); speedup is that against the plain arm's same category.", "",
            *markdown_table(header, rows)]


def acceptance_section(experiment, results: dict[str, ArmResult]) -> list[str]:
    """Accept length per input-length bucket and per turn: acceptance falls as context grows,
    which one run-wide figure hides (harness/measure/acceptance.py)."""
    blocks = {arm: {"accept_length": r.value("accept_length"), "acceptance_by": r.acceptance_by}
              for arm, r in results.items() if r is not None}
    lines, streamed = [], False
    for dimension, what in ACCEPTANCE_DIMENSIONS.items():
        rows = acceptance_rows(blocks, list(experiment.arm_names), dimension)
        if rows:
            lines += ["", f"## Accept length by {what}", "", *markdown_table(["arm", what, *ACCEPTANCE_HEADER], rows)]
            streamed = streamed or any(row[-1].endswith("(stream)") for row in rows)
    if streamed:
        lines += ["", "(stream): from the stream's tokens per whole decode step, where the requests carry no verify counts."]
    return lines


def noise_section(experiment, results: dict[str, ArmResult]) -> list[str]:
    """Median, min/max, MAD and CV of each metric over the repeats (gate.repeats > 1)."""
    rows = [[arm, path, cell(s["median"], "{:.2f}"), f"{cell(s['min'], '{:.2f}')}–{cell(s['max'], '{:.2f}')}",
             cell(s["mad"], "{:.3f}"), cell(s["cv"], "{:.1%}")]
            for arm in experiment.arm_names if arm in results and results[arm].repeats > 1
            for path, s in results[arm].noise.items()]
    if not rows:
        return []
    repeats = max(r.repeats for r in results.values())
    return ["", f"## Noise over {repeats} repeats", ""] + markdown_table(
        ["arm", "metric", "median", "min–max", "MAD", "CV"], rows)


def gpu_section(experiment, gpu: dict[str, dict]) -> list[str]:
    """Per arm and GPU: idle vs under-load clocks, power, utilization, slowdown reasons."""
    rows = []
    for arm in experiment.arm_names:
        block = gpu.get(arm)
        if not block:
            continue
        if block.get("unavailable"):
            rows.append([arm, "-", block["unavailable"], *("-" for _ in range(7))])
            continue
        for uuid, g in block.get("gpus", {}).items():
            idle, load = g.get("idle", {}), g.get("load", {})
            get = lambda phase, key: (phase.get(key) or {}).get("median")
            reasons = ", ".join(f"{r} {f:.0%}" for r, f in sorted(g.get("throttle_fraction_under_load", {}).items()) if f > 0)
            rows.append([arm, str(g.get("index", "?")), cell(get(idle, "sm_clock_mhz"), "{:.0f}"),
                         cell(get(load, "sm_clock_mhz"), "{:.0f}"), cell(g.get("sm_clock_ratio_under_load"), "{:.2f}"),
                         cell(get(idle, "power_w"), "{:.0f}"), cell(get(load, "power_w"), "{:.0f}"),
                         cell(get(load, "gpu_util_pct"), "{:.0f}"), cell(get(load, "temperature_c"), "{:.0f}"),
                         reasons or "none"])
    if not rows:
        return []
    header = ["arm", "GPU", "SM MHz idle", "SM MHz load", "ratio to max", "W idle", "W load", "util % load",
              "°C load", "reasons under load"]
    return ["", "## GPUs (median; load = tokens streaming, after the ramp-in)", ""] + markdown_table(header, rows)


def energy_section(experiment, gpu: dict[str, dict]) -> list[str]:
    """Per arm: GPU energy over the load window, joules per output token, and that against
    the plain arm's (does speculation cost energy per token?)."""
    plain = getattr(experiment, "plain_arm", None)
    rows = []
    for arm in experiment.arm_names:
        energy = (gpu.get(arm) or {}).get("energy")
        if not energy:
            continue
        ratio = joules_per_token_ratio(gpu.get(arm), gpu.get(plain)) if plain and arm != plain else None
        rows.append([arm, energy.get("method") or "-", cell(energy.get("joules"), "{:.1f}"),
                     cell(energy.get("seconds"), "{:.2f}"), cell(energy.get("mean_power_w"), "{:.0f}"),
                     cell(energy.get("output_tokens"), "{:d}"), cell(energy.get("joules_per_token"), "{:.3f}"),
                     cell(ratio, "{:.2f}x"), energy.get("why") or ""])
    if not rows:
        return []
    header = ["arm", "method", "J", "s", "W (all GPUs)", "tokens", "J/token", f"J/token vs {plain or '-'}", "why not"]
    return ["", "## Energy (all GPUs, load window after the ramp-in; tokens streamed in the same span)", "",
            *markdown_table(header, rows)]


def other_model_lines(arm: str, result: ArmResult | None, asked: str | None) -> list[str]:
    """A warning per model the answers named instead of the one asked: the figures may be that model's."""
    if result is None:
        return []
    return [f"{arm}: WARNING: {count} measured request(s) were answered naming model '{named}', not "
            f"'{asked or 'the one asked'}' that they asked for: the figures may be another model's (a router "
            f"sending to another model's worker, or a served-model alias)"
            for named, count in result.other_models.items()]


def cache_not_reset(arm: str, resets: list[dict]) -> str | None:
    """A sentence when some load of the arm did not start from an emptied prefix cache
    (its cache hit rate then depends on what ran before); None when every one did."""
    missed = [entry for entry in resets if not entry.get("reset")]
    if not missed:
        return None
    return (f"{arm}: the prefix cache was not reset before {len(missed)} of {len(resets)} load(s): "
            f"{missed[0].get('reason') or 'no reason given'}")


def counter_resets(arm: str, windows: list) -> list[str]:
    """A sentence per load whose server counters went backwards (its server figures are
    missing, the client's stand: harness/measure/server_metrics.py)."""
    many = len(windows) > 1
    return [f"{arm}{f' (load {i + 1} of {len(windows)})' if many else ''}: {w['counter_reset_note']}"
            for i, w in enumerate(windows) if isinstance(w, dict) and w.get("counter_reset_note")]


def fleet_section(experiment, arm_status: dict[str, dict]) -> list[str]:
    """Each fleet arm's workers: their share of the measured loads, and the imbalance."""
    rows = fleet_rows(arm_status, experiment.arm_names)
    if not rows:
        return []
    lines = ["", "## Fleet: each worker's share (its own /metrics, summed over the repeats)", ""]
    return lines + markdown_table(FLEET_HEADER, rows) + [""] + [f"- {line}" for line in
                                                              fleet_lines(arm_status, experiment.arm_names)]


def server_section(experiment, results: dict[str, ArmResult], arm_status: dict[str, dict]) -> list[str]:
    """What the client measured beside what the server's own /metrics histograms say over
    the same window (first repeat), each pair of the same meaning (harness/measure/agreement.py),
    then every pair that disagrees, in words."""
    rows = []
    for arm in experiment.arm_names:
        windows = [w for w in arm_status.get(arm, {}).get("server_metrics", []) if w]
        if arm not in results or not windows:
            continue
        server, r = windows[0], results[arm]
        rows.append([arm, cell(r.value("ttft_ms.mean"), "{:.1f}"), cell(server.get("ttft_mean_ms"), "{:.1f}"),
                     cell(r.value("decode_step_ms"), "{:.2f}"), cell(first_window_decode_ms(server, r), "{:.2f}"),
                     cell(server.get("accept_length"), "{:.2f}"),
                     positions_cell(server, r)])
    if not rows:
        return []
    header = ["arm", "TTFT mean client", "TTFT mean server", "decode ms/token client (TPOT)",
              "decode ms/token server", "accept len (server counters)", "acceptance per position"]
    lines = ["", "## Client vs server /metrics (same window, first repeat)", ""] + markdown_table(header, rows)
    return lines + disagreement_lines(experiment, results, arm_status)


def positions_cell(server: dict, result: ArmResult) -> str:
    """Acceptance per draft position: the server's counters (vLLM), else the requests' own
    histograms (SGLang's spec_correct_drafts_histogram), marked as such."""
    if server.get("acceptance_per_position"):
        return " ".join(f"{p:.2f}" for p in server["acceptance_per_position"])
    if result.acceptance_per_position:
        return " ".join(f"{p:.2f}" for p in result.acceptance_per_position) + " (requests)"
    return "-"


def first_window_decode_ms(server: dict, result: ArmResult) -> float | None:
    """The server's decode time per token; with repeats the client's token count is over all
    of them, so an engine counting steps has none for the first window alone."""
    if server.get("itl_observed_per") != ITL_PER_TOKEN and result.repeats > 1:
        return None
    return server_decode_ms_per_token(server, client_decoded_tokens(result))


def disagreement_lines(experiment, results: dict[str, ArmResult], arm_status: dict[str, dict]) -> list[str]:
    found = [sentence(arm, entry, results[arm].repeats if arm in results else 1)
             for arm in experiment.arm_names
             for entry in arm_status.get(arm, {}).get("client_server_disagreement") or []]
    return ([""] + [f"- {line}" for line in found]) if found else []


def client_section(experiment, results: dict[str, ArmResult]) -> list[str]:
    """Per arm, the client's own health over its load and whether its figures are the
    client's (harness/load/client_health.py, harness/gates/client_bound.py), in one line."""
    lines = []
    for arm in experiment.arm_names:
        client = results[arm].client if arm in results else None
        if not client:
            continue
        lag, gap, cpu = client.get("loop_lag_ms") or {}, client.get("send_gap_ms") or {}, client.get("cpu") or {}
        state = "CLIENT-BOUND" if client.get("client_bound") else "ok"
        lines.append(f"- {arm}: {state}: event-loop lag p50/p99/max {spread_cell(lag)} ms; send gap p50/p99/max "
                     f"{spread_cell(gap)} ms; CPU {cell(cpu.get('process_share_of_one_core'), '{:.0%}')} of one core "
                     f"(event loop {cell(cpu.get('loop_thread_share_of_one_core'), '{:.0%}')}; "
                     f"{cell(cpu.get('process_share_of_all_cores'), '{:.0%}')} of {cpu.get('cores', '?')} cores). "
                     f"{client.get('verdict', '')}")
        if client.get("ray_actors"):
            lines.append(f"- {arm}: {ray_actors_line(client['ray_actors'])}")
    return ["", "## Client health (is the load generator keeping up?)", ""] + lines if lines else []


def trace_section(experiment, results: dict[str, ArmResult]) -> list[str]:
    """Per arm that replayed a trace, its intended against its achieved send times."""
    lines = [trace_replay.sentence(arm, results[arm].trace, arm_speedup(experiment, arm))
             for arm in experiment.arm_names if arm in results and results[arm].trace]
    return ["", "## Trace replay (sent when the trace says?)", ""] + [f"- {line}" for line in lines] if lines else []


def arm_speedup(experiment, arm: str) -> float | None:
    return experiment.arm(arm).cfg.workload.get("trace_speedup")  # absent in an older record's config


def ray_actors_line(actors: list[dict]) -> str:
    """Where the Ray actors ran and how their clocks were put onto the driver's (workload.client_placement=ray)."""
    nodes = len({a["node_id"] for a in actors})
    each = "; ".join(f"actor {a['slot']} on {a['ip']} ({a['node_id'][:8]}): clock offset {a['clock_offset_ms']:+.3f} "
                     f"± {a['clock_uncertainty_ms']:.3f} ms" for a in actors)
    return (f"{len(actors)} client process(es) as Ray actors on {nodes} node(s), their times moved onto the "
            f"driver's clock (offset measured by round trips before and after the load): {each}")


def spread_cell(block: dict) -> str:
    return "/".join(cell(block.get(s), "{:.1f}") for s in ("p50", "p99", "max"))
