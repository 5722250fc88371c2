"""What every GPU telemetry source returns, and how one is chosen.

A *source* (NVML, ``nvidia-smi``, the simulator's ``/sim/gpu``) reads one sample per
opened GPU when asked; the :class:`~harness.telemetry.sampler.Sampler` asks it at a fixed
rate from a background thread and tags each sample with the phase of the load it fell in.

A source never raises for one field: a field the GPU does not support is switched off
(``None`` from then on, named in ``disabled_fields``) and a GPU that vanishes is dropped
with a note, so one bad counter never costs a measurement.
"""

from __future__ import annotations

import importlib
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any


def _reason_bits() -> dict[int, str]:
    """NVML clocks-event reason bit -> name, from pynvml's own constants where it has them."""
    # Values as NVML defines them (nvml.h), used when the binding lacks a constant.
    fallback = {
        "GpuIdle": 0x1,
        "ApplicationsClocksSetting": 0x2,
        "SwPowerCap": 0x4,
        "HwSlowdown": 0x8,
        "SyncBoost": 0x10,
        "SwThermalSlowdown": 0x20,
        "HwThermalSlowdown": 0x40,
        "HwPowerBrakeSlowdown": 0x80,
        "DisplayClockSetting": 0x100,
    }
    try:
        import pynvml as nv
    except ImportError:  # pragma: no cover - nvidia-ml-py is a dependency
        nv = None
    bits: dict[int, str] = {}
    for name, value in fallback.items():
        for prefix in ("nvmlClocksEventReason", "nvmlClocksThrottleReason"):
            got = getattr(nv, prefix + name, None) if nv is not None else None
            if isinstance(got, int) and got:
                value = got
                break
        bits[int(value)] = name
    return bits


THROTTLE_REASONS: dict[int, str] = _reason_bits()


def decode_reasons(mask: int | None) -> tuple[str, ...]:
    """A clocks-event bit mask as reason names, lowest bit first; unknown bits as ``0x...``."""
    if not mask:
        return ()
    names = [name for bit, name in sorted(THROTTLE_REASONS.items()) if mask & bit]
    rest = mask & ~sum(THROTTLE_REASONS)
    if rest:
        names.append(f"0x{rest:x}")
    return tuple(names)


@dataclass
class GpuInfo:
    index: int
    uuid: str
    name: str
    driver: str | None
    sm_clock_max_mhz: float | None
    power_limit_w: float | None


@dataclass
class GpuSample:
    t: float  # time.perf_counter() when read
    uuid: str
    index: int
    sm_clock_mhz: float | None
    graphics_clock_mhz: float | None
    mem_clock_mhz: float | None
    sm_clock_max_mhz: float | None
    power_w: float | None
    power_limit_w: float | None
    energy_mj: float | None  # cumulative energy counter (mJ since the driver loaded)
    temperature_c: float | None
    gpu_util_pct: float | None
    mem_util_pct: float | None
    pcie_tx_kbs: float | None
    pcie_rx_kbs: float | None
    throttle_reasons: tuple[str, ...] = ()
    phase: str = ""  # set by the Sampler: "idle" | "warmup" | "ramp_in" | "load" | "after"


# The numeric fields of a sample, in CSV / report order.
SAMPLE_FIELDS: tuple[str, ...] = (
    "sm_clock_mhz",
    "graphics_clock_mhz",
    "mem_clock_mhz",
    "sm_clock_max_mhz",
    "power_w",
    "power_limit_w",
    "energy_mj",
    "temperature_c",
    "gpu_util_pct",
    "mem_util_pct",
    "pcie_tx_kbs",
    "pcie_rx_kbs",
)


class TelemetryUnavailable(Exception):
    """Telemetry cannot start here; the message is one sentence, e.g.
    ``no NVIDIA driver (NVML: Driver Not Loaded)``."""


class Source(ABC):
    """One way of reading GPUs.  ``open`` picks the GPUs, ``read`` samples them all."""

    name: str = "?"

    def __init__(self) -> None:
        self.notes: list[str] = []
        self.disabled_fields: list[str] = []
        self.opened: list[GpuInfo] = []  # what open() chose (dropped GPUs stay listed)
        self._note_counts: dict[str, int] = {}

    @abstractmethod
    def enumerate(self) -> list[GpuInfo]:
        """Every GPU this source can see, in its own index order (used by ``resolve_uuids``)."""

    @abstractmethod
    def open(self, gpu_uuids: list[str] | None = None, gpu_indices: list[int] | None = None) -> list[GpuInfo]:
        """Choose the GPUs to sample: by UUID when given, else by index, else all."""

    @abstractmethod
    def read(self) -> list[GpuSample]:
        """One sample per opened GPU (fewer once a GPU was dropped)."""

    def close(self) -> None:
        """Release what ``open`` took; a closed source can be opened again."""

    @classmethod
    def for_server(cls, base_url: str | None) -> "Source":
        """The source that samples the GPUs of the server at ``base_url`` (most sources read
        the local machine and ignore it; the simulator's are behind its HTTP routes)."""
        return cls()

    @classmethod
    def for_servers(cls, base_urls: list[str]) -> "Source":
        """The source that samples the GPUs of every server at ``base_urls`` (a fleet's
        workers): one source of this machine's GPUs for the sources that read the machine."""
        return cls.for_server(base_urls[0] if base_urls else None)

    # ------------------------------------------------------------------ helpers
    def note(self, text: str) -> None:
        """Add a note once; repeats are counted rather than listed (a 10 Hz loop must not
        grow the record by one line per read)."""
        n = self._note_counts.get(text, 0)
        self._note_counts[text] = n + 1
        if n == 0:
            self.notes.append(text)

    def disable(self, field_name: str, why: str) -> None:
        if field_name not in self.disabled_fields:
            self.disabled_fields.append(field_name)
        self.note(f"{field_name} switched off: {why}")

    def repeated_notes(self) -> list[str]:
        """Notes with their repeat counts, for the record."""
        return [f"{t} (x{self._note_counts[t]})" if self._note_counts.get(t, 1) > 1 else t for t in self.notes]

    def __enter__(self) -> "Source":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def select_gpus(
    gpus: list[GpuInfo], gpu_uuids: list[str] | None, gpu_indices: list[int] | None, source: str
) -> list[GpuInfo]:
    """The shared ``open`` selection rule; an unknown UUID or index is a one-sentence error."""
    if gpu_uuids:
        by_uuid = {g.uuid: g for g in gpus}
        missing = [u for u in gpu_uuids if u not in by_uuid]
        if missing:
            raise TelemetryUnavailable(
                f"{source}: no GPU with UUID {', '.join(missing)} (this machine has {_seen(gpus)})"
            )
        return [by_uuid[u] for u in gpu_uuids]
    if gpu_indices:
        by_index = {g.index: g for g in gpus}
        missing_i = [i for i in gpu_indices if i not in by_index]
        if missing_i:
            raise TelemetryUnavailable(
                f"{source}: no GPU with index {', '.join(map(str, missing_i))} (this machine has {_seen(gpus)})"
            )
        return [by_index[i] for i in gpu_indices]
    return list(gpus)


def _seen(gpus: list[GpuInfo]) -> str:
    if not gpus:
        return "no GPU"
    return ", ".join(f"{g.index}={g.uuid}" for g in gpus)


def resolve_uuids(source: Source, indices_or_ids: list[str]) -> list[str]:
    """``"0"``, ``"1"``, ``"GPU-xxxx"`` (docker ``device_ids`` / ``CUDA_VISIBLE_DEVICES``
    entries) -> full UUIDs, through the source's own enumeration.

    Indices are the source's (NVML's, i.e. ``nvidia-smi``'s) indices, which is what
    docker's ``device_ids`` mean.  ``CUDA_VISIBLE_DEVICES`` indices follow CUDA's order,
    which is the same only with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``; prefer UUIDs there.
    A UUID may be given by a unique prefix (as CUDA accepts); ``"all"`` means every GPU;
    entries may also be comma-separated strings.
    """
    gpus = source.enumerate()
    items = [part.strip() for item in indices_or_ids for part in str(item).split(",") if part.strip()]
    out: list[str] = []
    for item in items:
        if item.lower() == "all":
            found = [g.uuid for g in gpus]
        elif item.lstrip("-").isdigit():
            matches = [g for g in gpus if g.index == int(item)]
            if not matches:
                raise TelemetryUnavailable(f"{source.name}: no GPU with index {item} (this machine has {_seen(gpus)})")
            found = [matches[0].uuid]
        else:
            exact = [g for g in gpus if g.uuid == item]
            matches = exact or [g for g in gpus if g.uuid.startswith(item)]
            if len(matches) != 1:
                what = "no GPU" if not matches else f"{len(matches)} GPUs"
                raise TelemetryUnavailable(
                    f"{source.name}: {what} with UUID {item} (this machine has {_seen(gpus)})"
                )
            found = [matches[0].uuid]
        out.extend(u for u in found if u not in out)
    return out


# name -> "module:Class". A source's module is imported only when it is chosen (NVML's
# library may be missing). Adding a source: its module here in harness/telemetry/ + one line.
SOURCES = {
    "nvml": "harness.telemetry.nvml:NvmlSource",
    "smi": "harness.telemetry.smi:SmiSource",
    "sim": "harness.telemetry.sim:SimSource",
}
NOT_SAMPLING = ("off", "auto")  # auto is resolved to nvml or off when the config is composed


def make_source(kind: str, *, base_url: str | None = None, base_urls: list[str] | None = None) -> Source | None:
    """The source named by ``telemetry.source`` (``"off"`` -> None), for the server at
    ``base_url`` or the servers at ``base_urls`` (a fleet's workers: the GPUs of them all)."""
    kind = (kind or "off").lower()
    if kind == "off":
        return None
    if kind not in SOURCES:
        raise ValueError(f"unknown telemetry source {kind!r}; valid: {', '.join([*SOURCES, 'off'])}")
    module, _, name = SOURCES[kind].partition(":")
    source_class = getattr(importlib.import_module(module), name)
    return source_class.for_servers(base_urls) if base_urls else source_class.for_server(base_url)


def now() -> float:
    """The clock every sample and mark uses."""
    return time.perf_counter()
