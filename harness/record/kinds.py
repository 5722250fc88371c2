"""The kinds of record specgate writes, one per driver, and how a folder tells its kind.

    run        <record.root>/<UTC timestamp>_<exp>/            results.json   (pytest suites/, specgate run)
    sweep      <record.root>/<UTC timestamp>_<exp>_sweep/      sweep.json     (specgate sweep; each point's
                                                                               run record is inside it)
    capacity   <record.root>/<UTC timestamp>_<exp>_capacity/   capacity.json  (specgate capacity)
    ab         <record.root>/<UTC timestamp>_<exp>_ab/         ab.json        (specgate ab)
    calibration <record.root>/<UTC timestamp>_<exp>_calibration/ calibration.json (specgate calibrate; each
                                                                               run's record inside it, and
                                                                               noise_profile.json once it ends)
    bisect     <record.root>/<UTC timestamp>_<exp>_bisect/     bisect.json    (specgate bisect; each probe's
                                                                               A/B record inside it, steps/)

Every kind has a summary.md beside its JSON, and the JSON's `status` says running, finished
or interrupted. One writer (harness/record/recorder.py's Recorder) writes every kind. Each kind
carries its own HTML page (`specgate report DIR` writes the page of the folder's kind): named
as `module:function`, not imported, since the pages sit above this package (they read gates,
figures and charts); `write_page` loads it when a page is asked for.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RecordKind:
    name: str  # run | sweep | capacity | ab | calibration | bisect
    suffix: str  # the folder is <UTC timestamp>_<exp><suffix>
    data_file: str  # the record's JSON: its figures, verdicts and status
    writes_configs: bool  # config.yaml, overrides.yaml, arms/<arm>/config.yaml (a sweep's points keep their own)
    step_summary: bool  # summary.md goes to GitHub's job page too (a sweep's points put their own there)
    page: str  # its page's writer, `module:function`, called (folder, out) -> the page's path

    def write_page(self, folder: Path, out: Path | None = None) -> Path:
        """The record's HTML page (default `<folder>/report.html`); returns its path."""
        module, function = self.page.split(":")
        return getattr(importlib.import_module(module), function)(folder, out)


RUN = RecordKind("run", "", "results.json", writes_configs=True, step_summary=True,
                 page="harness.report.html:write_report")
SWEEP = RecordKind("sweep", "_sweep", "sweep.json", writes_configs=False, step_summary=False,
                   page="harness.sweep.report:write_sweep_report")
CAPACITY = RecordKind("capacity", "_capacity", "capacity.json", writes_configs=True, step_summary=False,
                      page="harness.capacity.report:write_capacity_report")
AB = RecordKind("ab", "_ab", "ab.json", writes_configs=True, step_summary=True, page="harness.ab.report:write_ab_report")
CALIBRATION = RecordKind("calibration", "_calibration", "calibration.json", writes_configs=True, step_summary=False,
                         page="harness.calibrate.report:write_calibration_report")
BISECT = RecordKind("bisect", "_bisect", "bisect.json", writes_configs=False, step_summary=True,
                    page="harness.bisect.report:write_bisect_report")
KINDS: dict[str, RecordKind] = {kind.name: kind for kind in (RUN, SWEEP, CAPACITY, AB, CALIBRATION, BISECT)}


def kind_of(folder: Path) -> RecordKind | None:
    """The kind of record a folder is, by the JSON it holds; None for a folder that is none."""
    return next((kind for kind in KINDS.values() if (Path(folder) / kind.data_file).is_file()), None)
