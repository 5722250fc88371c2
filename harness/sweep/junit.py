"""A sweep's JUnit XML: each point runs its own pytest, so `--junitxml=FILE` given to the
sweep would be written by every point in turn and keep the last one only (a red sweep, a
green report). Instead each point writes `points/<label>/junit.xml`, and the sweep writes
FILE once it ends: every point's test suites (named by the point) plus a `sweep` suite with
the sweep's own verdicts, and an error case for a point that wrote no JUnit at all (it never
started, or was killed). Written atomically through the sweep's redaction."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from harness.record.atomic import atomic_write

JUNIT_OPTIONS = ("--junitxml", "--junit-xml")
POINT_FILE = "junit.xml"


def junit_target(options: list[str]) -> tuple[Path | None, list[str]]:
    """(the sweep's JUnit file, the pytest options without it)."""
    target, kept, skip = None, [], False
    for i, option in enumerate(options):
        if skip:
            skip = False
            continue
        name, _, value = option.partition("=")
        if name in JUNIT_OPTIONS:
            if not value and i + 1 < len(options):
                value, skip = options[i + 1], True
            target = Path(value)
        else:
            kept.append(option)
    return target, kept


def point_options(options: list[str], point_root: Path) -> list[str]:
    """A point's pytest options: the sweep's, with its JUnit file inside the point's folder."""
    target, kept = junit_target(options)
    return [*kept, f"--junitxml={point_root / POINT_FILE}"] if target is not None else list(options)


def write_sweep_junit(target: Path, points_dir: Path, entries: list[dict], verdicts: list[dict],
                      scrub) -> None:
    """The sweep's merged JUnit file (see the module's docstring)."""
    root = ET.Element("testsuites", name="specgate sweep")
    for entry in entries:
        root.extend(point_suites(points_dir / entry["label"] / POINT_FILE, entry))
    root.append(verdict_suite(verdicts))
    for suite in root:
        for key in ("tests", "failures", "errors", "skipped"):
            suite.set(key, str(sum(1 for case in suite.iter("testcase") if counts_as(case, key))))
    text = ET.tostring(root, encoding="unicode")
    atomic_write(target, scrub('<?xml version="1.0" encoding="utf-8"?>\n' + text + "\n"))


def counts_as(case: ET.Element, key: str) -> bool:
    tag = {"tests": None, "failures": "failure", "errors": "error", "skipped": "skipped"}[key]
    return tag is None or case.find(tag) is not None


def point_suites(file: Path, entry: dict) -> list[ET.Element]:
    """The point's own test suites, named by the point; an error case when it wrote none."""
    label = entry["label"]
    try:
        tree = ET.parse(file)
    except (OSError, ET.ParseError):
        suite = ET.Element("testsuite", name=f"point {label}")
        case = ET.SubElement(suite, "testcase", classname=f"point {label}", name="point")
        why = entry.get("error") or f"exit status {entry.get('exit_status')}"
        ET.SubElement(case, "error", message=f"point {label} wrote no JUnit report: {why}")
        return [suite]
    found = tree.getroot()
    suites = [found] if found.tag == "testsuite" else list(found.iter("testsuite"))
    for suite in suites:
        suite.set("name", f"point {label}: {suite.get('name', 'pytest')}")
        for case in suite.iter("testcase"):
            case.set("classname", f"{label}.{case.get('classname', '')}")
    return suites


def verdict_suite(verdicts: list[dict[str, Any]]) -> ET.Element:
    """The sweep's own gates, one case each: failed ones fail the report, as they fail the sweep."""
    suite = ET.Element("testsuite", name="sweep gates")
    for verdict in verdicts:
        case = ET.SubElement(suite, "testcase", classname="sweep", name=f"{verdict['name']}[{verdict['arm']}]")
        status, detail = verdict.get("status"), verdict.get("detail", "")
        if status == "failed":
            ET.SubElement(case, "failure", message=detail)
        elif status in ("skipped", "not_evaluable", "inconclusive"):  # an undecided gate is no pass either
            ET.SubElement(case, "skipped", message=detail)
        ET.SubElement(case, "system-out").text = detail
    return suite
