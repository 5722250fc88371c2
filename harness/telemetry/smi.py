"""GPU readings from ``nvidia-smi --query-gpu`` (CSV), for boxes where the Python NVML
binding cannot be used (e.g. a container with the driver's tools but no matching lib).

Every read runs ``nvidia-smi`` once for all GPUs (tens of ms, more with many GPUs):
prefer ``nvml`` at 10 Hz.  ``nvidia-smi --query-gpu`` offers no energy counter (its field
lists have ``power.draw``, ``.average`` and ``.instant``, no total energy) and no PCIe
throughput, so those fields are always None here (listed in ``disabled_fields``); energy
per token is then integrated from ``power.draw`` (harness/telemetry/energy.py).
Drivers before R535 name the reasons field ``clocks_throttle_reasons.active``; it is
used when ``clocks_event_reasons.active`` is refused.
"""

from __future__ import annotations

import csv
import shutil
import subprocess
from dataclasses import dataclass

from harness.telemetry.base import (
    GpuInfo,
    GpuSample,
    Source,
    TelemetryUnavailable,
    decode_reasons,
    now,
    select_gpus,
)

QUERY_FIELDS = (
    "index",
    "uuid",
    "name",
    "driver_version",
    "clocks.sm",
    "clocks.gr",
    "clocks.mem",
    "clocks.max.sm",
    "power.draw",
    "power.limit",
    "temperature.gpu",
    "utilization.gpu",
    "utilization.memory",
    "clocks_event_reasons.active",
)
OLD_REASONS_FIELD = "clocks_throttle_reasons.active"

# nvidia-smi query column -> GpuSample field
_NUMERIC = {
    "clocks.sm": "sm_clock_mhz",
    "clocks.gr": "graphics_clock_mhz",
    "clocks.mem": "mem_clock_mhz",
    "clocks.max.sm": "sm_clock_max_mhz",
    "power.draw": "power_w",
    "power.limit": "power_limit_w",
    "temperature.gpu": "temperature_c",
    "utilization.gpu": "gpu_util_pct",
    "utilization.memory": "mem_util_pct",
}
NOT_OFFERED = ("energy_mj", "pcie_tx_kbs", "pcie_rx_kbs")


def parse_value(text: str) -> str | None:
    """``[N/A]``, ``[Not Supported]``, ``N/A``, ``[Unknown Error]`` ... -> None."""
    text = text.strip()
    if not text or text.startswith("[") or text.upper() in ("N/A", "NA"):
        return None
    return text


def parse_float(text: str) -> float | None:
    value = parse_value(text)
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        return None


def parse_reasons(text: str) -> tuple[str, ...]:
    value = parse_value(text)
    if value is None:
        return ()
    try:
        return decode_reasons(int(value, 16) if value.lower().startswith("0x") else int(value))
    except ValueError:
        return ()


@dataclass
class SmiRow:
    """One GPU's line of the query, parsed (raw strings kept for 'Not Supported' checks)."""

    index: int
    uuid: str
    name: str
    driver: str | None
    values: dict[str, float | None]
    raw: dict[str, str]
    reasons: tuple[str, ...]


def parse_csv(text: str, fields: tuple[str, ...] = QUERY_FIELDS) -> list[SmiRow]:
    rows: list[SmiRow] = []
    for cols in csv.reader(text.splitlines(), skipinitialspace=True):
        if len(cols) != len(fields):
            continue  # a warning line or a GPU that could not be read
        raw = dict(zip(fields, (c.strip() for c in cols)))
        index = parse_value(raw["index"])
        uuid = parse_value(raw["uuid"])
        if index is None or uuid is None or not index.isdigit():
            continue
        rows.append(
            SmiRow(
                index=int(index),
                uuid=uuid,
                name=parse_value(raw["name"]) or "?",
                driver=parse_value(raw["driver_version"]),
                values={out: parse_float(raw[col]) for col, out in _NUMERIC.items()},
                raw=raw,
                reasons=parse_reasons(raw[fields[-1]]),
            )
        )
    return rows


class SmiSource(Source):
    name = "smi"

    def __init__(self, binary: str = "nvidia-smi", timeout_s: float = 5.0):
        super().__init__()
        self.binary = binary
        self.timeout_s = timeout_s
        self.fields = QUERY_FIELDS
        self._path: str | None = None
        self._open: dict[str, GpuInfo] = {}

    def _run(self) -> tuple[int, str, str]:
        if self._path is None:
            self._path = shutil.which(self.binary)
            if self._path is None:
                raise TelemetryUnavailable("no NVIDIA driver (nvidia-smi not found)")
        cmd = [self._path, "--query-gpu=" + ",".join(self.fields), "--format=csv,noheader,nounits"]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            return -1, "", f"nvidia-smi did not answer within {self.timeout_s:g} s"
        except OSError as exc:
            return -1, "", f"nvidia-smi could not run: {exc}"
        return proc.returncode, proc.stdout, proc.stderr

    def _query(self) -> list[SmiRow]:
        """Rows of one query; raises RuntimeError(one line) when nvidia-smi fails."""
        rc, out, err = self._run()
        if rc != 0 and self.fields[-1] != OLD_REASONS_FIELD and "clocks_event_reasons" in (out + err):
            self.fields = (*QUERY_FIELDS[:-1], OLD_REASONS_FIELD)
            self.note(f"this nvidia-smi has no clocks_event_reasons.active; using {OLD_REASONS_FIELD}")
            rc, out, err = self._run()
        if rc != 0:
            line = next((ln.strip() for ln in (out + "\n" + err).splitlines() if ln.strip()), f"exit status {rc}")
            raise RuntimeError(line)
        return parse_csv(out, self.fields)

    def enumerate(self) -> list[GpuInfo]:
        try:
            rows = self._query()
        except RuntimeError as exc:
            msg = str(exc)
            if "driver" in msg.lower() or "nvml" in msg.lower():
                raise TelemetryUnavailable(f"no NVIDIA driver (nvidia-smi: {msg})") from None
            raise TelemetryUnavailable(f"nvidia-smi failed: {msg}") from None
        return [
            GpuInfo(r.index, r.uuid, r.name, r.driver, r.values["sm_clock_max_mhz"], r.values["power_limit_w"])
            for r in rows
        ]

    def open(self, gpu_uuids: list[str] | None = None, gpu_indices: list[int] | None = None) -> list[GpuInfo]:
        chosen = select_gpus(self.enumerate(), gpu_uuids, gpu_indices, "smi")
        self._open = {g.uuid: g for g in chosen}
        for f in NOT_OFFERED:
            if f not in self.disabled_fields:
                self.disabled_fields.append(f)
        self.note("nvidia-smi --query-gpu offers no energy counter or PCIe throughput")
        self.opened = list(chosen)
        return chosen

    def close(self) -> None:
        self._open = {}

    def read(self) -> list[GpuSample]:
        if not self._open:
            return []
        t0 = now()
        try:
            rows = self._query()
        except (RuntimeError, TelemetryUnavailable) as exc:
            self.note(f"nvidia-smi read failed: {exc}")
            return []
        t = (t0 + now()) / 2  # the readings are from somewhere inside the call
        by_uuid = {r.uuid: r for r in rows}
        out: list[GpuSample] = []
        for uuid, info in list(self._open.items()):
            row = by_uuid.get(uuid)
            if row is None:
                del self._open[uuid]
                self.note(f"GPU {info.index} ({uuid}) dropped from sampling: nvidia-smi no longer lists it")
                continue
            for col, field_name in _NUMERIC.items():
                if row.raw[col].strip() == "[Not Supported]" and field_name not in self.disabled_fields:
                    self.disable(field_name, f"GPU {row.index}: nvidia-smi says [Not Supported] for {col}")
            v = row.values
            out.append(
                GpuSample(
                    t=t,
                    uuid=uuid,
                    index=row.index,
                    sm_clock_mhz=v["sm_clock_mhz"],
                    graphics_clock_mhz=v["graphics_clock_mhz"],
                    mem_clock_mhz=v["mem_clock_mhz"],
                    sm_clock_max_mhz=v["sm_clock_max_mhz"],
                    power_w=v["power_w"],
                    power_limit_w=v["power_limit_w"],
                    energy_mj=None,
                    temperature_c=v["temperature_c"],
                    gpu_util_pct=v["gpu_util_pct"],
                    mem_util_pct=v["mem_util_pct"],
                    pcie_tx_kbs=None,
                    pcie_rx_kbs=None,
                    throttle_reasons=row.reasons,
                )
            )
        return out
