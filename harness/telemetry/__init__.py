"""GPU telemetry: sources (``nvml``, ``smi``, ``sim``) behind one interface, a background
``Sampler`` that tags samples idle / ramp_in / load / after against the load marks, and
the summary, CSV and plot of what it read, and the energy per output token over the
load (``energy``).  Only this package knows NVML.

``driver.nvidia_driver_status`` (the pre-flight driver check) lives here too.
"""

from harness.telemetry.base import (
    THROTTLE_REASONS,
    GpuInfo,
    GpuSample,
    Source,
    TelemetryUnavailable,
    make_source,
    resolve_uuids,
)
from harness.telemetry.sampler import Sampler, Telemetry
from harness.telemetry.summary import plot_png, summarize, write_csv

__all__ = [
    "THROTTLE_REASONS",
    "GpuInfo",
    "GpuSample",
    "Source",
    "TelemetryUnavailable",
    "make_source",
    "resolve_uuids",
    "Sampler",
    "Telemetry",
    "summarize",
    "write_csv",
    "plot_png",
]
