"""schedule.json and schedule.md in the sweep's folder, each written whole or not at all
(harness/record/atomic.py), plus the files an engine's form names (`files` of a form: SGLang's adaptive config).

    schedule.json   arm, plain_arm, the swept k values, confidence; per concurrency the
                    choice (k, 0 = plain), its status (decided, within_noise), the k values
                    within noise, every candidate's speedup and interval, the best's ratio over
                    each other candidate; the batch-size ranges; the engines' forms
    schedule.md     the same in words and tables
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from harness.engines import schedule_forms
from harness.record.atomic import atomic_write
from harness.schedule.choice import PLAIN_K, Candidate, Choice
from harness.schedule.grid import Grid
from harness.schedule.ranges import Range

SCHEDULE_JSON, SCHEDULE_MD = "schedule.json", "schedule.md"


def schedule_data(grid: Grid, choices: list[Choice], ranges: list[Range], confidence: float) -> dict[str, Any]:
    table = [(r.first, r.last, r.k) for r in ranges]
    return {"sweep": str(grid.sweep), "arm": grid.arm, "plain_arm": grid.plain_arm, "engine": grid.engine,
            "k_values": sorted({c.k for c in grid.cells}), "confidence": confidence,
            "concurrencies": [choice_json(c) for c in choices],
            "plain_wins_at": [c.concurrency for c in choices if c.plain_wins],
            "ranges": [r.to_json() for r in ranges],
            "forms": schedule_forms(grid.cells[0].drafter, table)}


def choice_json(choice: Choice) -> dict[str, Any]:
    return {"concurrency": choice.concurrency, "k": choice.best.k, "plain": choice.plain_wins,
            "speedup": round(choice.best.speedup, 4), "interval": choice.best.interval, "status": choice.status,
            "within_noise_of": choice.ties, "words": choice.words(),
            "candidates": [candidate_json(c) for c in choice.candidates],
            "best_over": {str(k): found for k, found in choice.against.items()}}


def candidate_json(c: Candidate) -> dict[str, Any]:
    found = {"k": c.k, "speedup": round(c.speedup, 4), "interval": c.interval, "point": c.point}
    return {**found, "why": c.why} if c.why else found


def write_schedule(sweep: Path, data: dict[str, Any]) -> list[Path]:
    """Every file, each atomically: an engine's extra files first, schedule.json last of the
    JSON, so a schedule.json on disk always has what it names beside it."""
    written = []
    for form in data["forms"].values():
        for name, content in (form.get("files") or {}).items():
            atomic_write(sweep / name, json.dumps(content, indent=2) + "\n")
            written.append(sweep / name)
    for name, text in ((SCHEDULE_JSON, json.dumps(data, indent=2) + "\n"), (SCHEDULE_MD, markdown(data))):
        atomic_write(sweep / name, text)
        written.append(sweep / name)
    return written


def cell(found: dict[str, Any]) -> str:
    interval = f" [{found['interval'][0]:.2f}, {found['interval'][1]:.2f}]" if found.get("interval") else ""
    return f"{found['speedup']:.2f}x{interval}"


def markdown(data: dict[str, Any]) -> str:
    ks = data["k_values"]
    lines = [f"# specgate schedule: {data['arm']} against {data['plain_arm']}", "",
             f"From the sweep `{data['sweep']}`: per concurrency the k (draft tokens per step) with the highest "
             f"speedup over plain decoding (k=0), with its {data['confidence']:.0%} one-sided interval at each end. "
             f"**decided**: its speedup over every other k is above 1 with that confidence; **within noise**: "
             f"the k values listed are as good as far as this sweep can tell.", "",
             "| concurrency | choice | status | " + " | ".join(f"k={k}" for k in ks) + " |",
             "| --- | --- | --- | " + " | ".join("---" for _ in ks) + " |"]
    for c in data["concurrencies"]:
        by_k = {x["k"]: x for x in c["candidates"]}
        choice = "plain" if c["plain"] else f"k={c['k']}"
        status = "decided" if c["status"] == "decided" else "within noise of " + ", ".join(
            "plain" if k == PLAIN_K else f"k={k}" for k in c["within_noise_of"])
        lines.append(f"| {c['concurrency']} | **{choice}** | {status} | "
                     + " | ".join(cell(by_k[k]) if k in by_k else "–" for k in ks) + " |")
    plain = data["plain_wins_at"]
    lines += ["", f"Plain decoding wins at concurrency {', '.join(map(str, plain))}." if plain
              else "Plain decoding wins at no concurrency swept.", "", "## By batch size", ""]
    lines += [f"- batch {r['first']}–{r['last']}: " + ("plain decoding" if r["k"] == PLAIN_K else f"k={r['k']}")
              for r in data["ranges"]]
    lines += ["", "## In the engines' forms", ""]
    for name, form in data["forms"].items():
        lines += [f"### {name}", "", form["note"] + ".", ""]
        if form.get("args"):
            lines += ["```", " ".join(quoted(a) for a in form["args"]), "```", ""]
        for server in form.get("servers") or []:
            lines.append(f"- batch {server['first']}–{server['last']}: `{' '.join(server['args'])}`")
        if form.get("servers"):
            lines.append("")
        if form.get("overrides"):
            lines += ["As specgate overrides: `" + " ".join(quoted(o) for o in form["overrides"]) + "`", ""]
    return "\n".join(lines).rstrip() + "\n"


def quoted(arg: str) -> str:
    return f"'{arg}'" if any(ch in arg for ch in " {}[]\"") else arg
