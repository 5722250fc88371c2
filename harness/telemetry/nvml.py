"""GPU readings straight from NVML (``import pynvml`` comes from nvidia-ml-py).

NVML ignores ``CUDA_VISIBLE_DEVICES``: its indices are the driver's (``nvidia-smi``'s)
order, so the caller selects GPUs by UUID (see ``resolve_uuids``).

Units as NVML gives them, converted once here: clocks MHz, power mW -> W, energy mJ
(cumulative since the driver loaded), temperature degrees C, utilization %, PCIe KB/s.

``nvmlDeviceGetPcieThroughput`` samples a byte counter over ~20 ms *inside the call*,
so reading TX and RX of 8 GPUs every 100 ms would take 320 ms and break the 10 Hz
rate; PCIe is therefore read at most every ``pcie_interval_s`` per GPU (None in the
samples between).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from harness.telemetry.base import (
    GpuInfo,
    GpuSample,
    Source,
    TelemetryUnavailable,
    decode_reasons,
    now,
    select_gpus,
)


class _GpuLost(Exception):
    pass


@dataclass
class _Gpu:
    info: GpuInfo
    handle: Any
    disabled: set[str] = field(default_factory=set)
    reasons_api: str = "event"  # "event" (nvmlDeviceGetCurrentClocksEventReasons) | "throttle" (older)
    pcie_last: float = float("-inf")


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, (bytes, bytearray)) else str(value)


class NvmlSource(Source):
    name = "nvml"

    def __init__(self, pynvml: Any = None, *, pcie_interval_s: float | None = 1.0):
        super().__init__()
        self._nv = pynvml
        self.pcie_interval_s = pcie_interval_s
        self._inited = False
        self._all: list[tuple[GpuInfo, Any]] = []
        self._gpus: list[_Gpu] = []

    # ------------------------------------------------------------------ NVML
    @property
    def nv(self) -> Any:
        if self._nv is None:
            try:
                import pynvml
            except ImportError as exc:  # pragma: no cover - a dependency of the project
                raise TelemetryUnavailable("no NVML binding (the nvidia-ml-py package is not installed)") from exc
            self._nv = pynvml
        return self._nv

    def _code(self, name: str, default: int) -> int:
        return getattr(self.nv, name, default)

    def _init(self) -> None:
        if self._inited:
            return
        nv = self.nv
        try:
            nv.nvmlInit()
        except nv.NVMLError as exc:
            code = getattr(exc, "value", None)
            if code in (self._code("NVML_ERROR_LIBRARY_NOT_FOUND", 12), self._code("NVML_ERROR_DRIVER_NOT_LOADED", 9)):
                raise TelemetryUnavailable(f"no NVIDIA driver (NVML: {exc})") from None
            raise TelemetryUnavailable(f"NVML could not start (NVML: {exc})") from None
        self._inited = True

    def _safe(self, fn: Callable[..., Any], *args: Any) -> Any:
        """For one-off info at open time: None when NVML cannot say."""
        try:
            return fn(*args)
        except self.nv.NVMLError:
            return None

    def enumerate(self) -> list[GpuInfo]:
        self._init()
        nv = self.nv
        driver = self._safe(nv.nvmlSystemGetDriverVersion)
        driver = _text(driver) if driver is not None else None
        try:
            count = nv.nvmlDeviceGetCount()
        except nv.NVMLError as exc:
            raise TelemetryUnavailable(f"NVML cannot count the GPUs (NVML: {exc})") from None
        out: list[tuple[GpuInfo, Any]] = []
        for i in range(count):
            try:
                handle = nv.nvmlDeviceGetHandleByIndex(i)
                uuid = _text(nv.nvmlDeviceGetUUID(handle))
            except nv.NVMLError as exc:
                self.note(f"GPU {i} skipped: NVML: {exc}")
                continue
            name = self._safe(nv.nvmlDeviceGetName, handle)
            sm_max = self._safe(nv.nvmlDeviceGetMaxClockInfo, handle, nv.NVML_CLOCK_SM)
            limit_mw = self._safe(nv.nvmlDeviceGetEnforcedPowerLimit, handle)
            info = GpuInfo(
                index=i,
                uuid=uuid,
                name=_text(name) if name is not None else "?",
                driver=driver,
                sm_clock_max_mhz=float(sm_max) if sm_max else None,
                power_limit_w=limit_mw / 1000.0 if limit_mw else None,
            )
            out.append((info, handle))
        self._all = out
        return [info for info, _h in out]

    def open(self, gpu_uuids: list[str] | None = None, gpu_indices: list[int] | None = None) -> list[GpuInfo]:
        infos = self.enumerate()
        chosen = select_gpus(infos, gpu_uuids, gpu_indices, "nvml")
        handles = {info.uuid: h for info, h in self._all}
        has_event_api = hasattr(self.nv, "nvmlDeviceGetCurrentClocksEventReasons")
        self._gpus = [_Gpu(info, handles[info.uuid], reasons_api="event" if has_event_api else "throttle") for info in chosen]
        if not has_event_api:
            self.note("this nvidia-ml-py has no nvmlDeviceGetCurrentClocksEventReasons; using nvmlDeviceGetCurrentClocksThrottleReasons")
        self.opened = list(chosen)
        return chosen

    def close(self) -> None:
        self._gpus = []
        if self._inited:
            self._inited = False
            try:
                self.nv.nvmlShutdown()
            except self.nv.NVMLError:
                pass

    # ------------------------------------------------------------------ reads
    def _call(self, gpu: _Gpu, key: str, fn: Callable[..., Any], *args: Any) -> Any:
        """One NVML call for one field: None when switched off or failing this time;
        a lost GPU raises ``_GpuLost``; an unsupported field is switched off for good."""
        if key in gpu.disabled:
            return None
        nv = self.nv
        try:
            return fn(*args)
        except nv.NVMLError as exc:
            code = getattr(exc, "value", None)
            if code in (
                self._code("NVML_ERROR_GPU_IS_LOST", 15),
                self._code("NVML_ERROR_NOT_FOUND", 6),
                self._code("NVML_ERROR_RESET_REQUIRED", 16),
            ):
                raise _GpuLost(str(exc)) from None
            if code in (
                self._code("NVML_ERROR_NOT_SUPPORTED", 3),
                self._code("NVML_ERROR_FUNCTION_NOT_FOUND", 13),
                self._code("NVML_ERROR_NO_PERMISSION", 4),
            ):
                gpu.disabled.add(key)
                self.disable(key, f"GPU {gpu.info.index} ({gpu.info.uuid}): NVML: {exc}")
                return None
            self.note(f"{key} unreadable on GPU {gpu.info.index} once or more: NVML: {exc}")
            return None

    def _reasons(self, gpu: _Gpu) -> tuple[str, ...]:
        nv = self.nv
        if "throttle_reasons" in gpu.disabled:
            return ()
        if gpu.reasons_api == "event":
            try:
                return decode_reasons(int(nv.nvmlDeviceGetCurrentClocksEventReasons(gpu.handle)))
            except nv.NVMLError as exc:
                code = getattr(exc, "value", None)
                if code not in (self._code("NVML_ERROR_FUNCTION_NOT_FOUND", 13), self._code("NVML_ERROR_NOT_SUPPORTED", 3)):
                    # Lost GPU, or a one-off failure: the common path says which.
                    return self._decoded(self._call(gpu, "throttle_reasons", _raise, exc))
                # A driver older than the call (R535): the older name reads the same bits.
                gpu.reasons_api = "throttle"
                self.note(
                    f"GPU {gpu.info.index}: nvmlDeviceGetCurrentClocksEventReasons failed (NVML: {exc}); "
                    "using nvmlDeviceGetCurrentClocksThrottleReasons"
                )
        fn = getattr(nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
        if fn is None:
            gpu.disabled.add("throttle_reasons")
            self.disable("throttle_reasons", "this nvidia-ml-py has no clocks-event reasons call")
            return ()
        return self._decoded(self._call(gpu, "throttle_reasons", fn, gpu.handle))

    @staticmethod
    def _decoded(mask: Any) -> tuple[str, ...]:
        return decode_reasons(int(mask)) if mask is not None else ()

    def _read_one(self, gpu: _Gpu) -> GpuSample:
        nv = self.nv
        h = gpu.handle
        t = now()
        sm = self._call(gpu, "sm_clock_mhz", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM)
        gr = self._call(gpu, "graphics_clock_mhz", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_GRAPHICS)
        mem = self._call(gpu, "mem_clock_mhz", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM)
        power_mw = self._call(gpu, "power_w", nv.nvmlDeviceGetPowerUsage, h)
        limit_mw = self._call(gpu, "power_limit_w", nv.nvmlDeviceGetEnforcedPowerLimit, h)
        energy = self._call(gpu, "energy_mj", nv.nvmlDeviceGetTotalEnergyConsumption, h)
        temp = self._call(gpu, "temperature_c", nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
        util = self._call(gpu, "utilization", nv.nvmlDeviceGetUtilizationRates, h)
        reasons = self._reasons(gpu)
        tx = rx = None
        if self.pcie_interval_s is not None and t - gpu.pcie_last >= self.pcie_interval_s:
            gpu.pcie_last = t
            tx = self._call(gpu, "pcie_tx_kbs", nv.nvmlDeviceGetPcieThroughput, h, nv.NVML_PCIE_UTIL_TX_BYTES)
            rx = self._call(gpu, "pcie_rx_kbs", nv.nvmlDeviceGetPcieThroughput, h, nv.NVML_PCIE_UTIL_RX_BYTES)
        return GpuSample(
            t=t,
            uuid=gpu.info.uuid,
            index=gpu.info.index,
            sm_clock_mhz=_num(sm),
            graphics_clock_mhz=_num(gr),
            mem_clock_mhz=_num(mem),
            sm_clock_max_mhz=gpu.info.sm_clock_max_mhz,
            power_w=power_mw / 1000.0 if power_mw is not None else None,
            power_limit_w=limit_mw / 1000.0 if limit_mw is not None else gpu.info.power_limit_w,
            energy_mj=_num(energy),
            temperature_c=_num(temp),
            gpu_util_pct=_num(getattr(util, "gpu", None)) if util is not None else None,
            mem_util_pct=_num(getattr(util, "memory", None)) if util is not None else None,
            pcie_tx_kbs=_num(tx),
            pcie_rx_kbs=_num(rx),
            throttle_reasons=reasons,
        )

    def read(self) -> list[GpuSample]:
        out: list[GpuSample] = []
        lost: list[_Gpu] = []
        for gpu in self._gpus:
            try:
                out.append(self._read_one(gpu))
            except _GpuLost as exc:
                lost.append(gpu)
                self.note(f"GPU {gpu.info.index} ({gpu.info.uuid}) dropped from sampling: NVML: {exc}")
        if lost:
            self._gpus = [g for g in self._gpus if g not in lost]
        return out


def _raise(exc: BaseException) -> Any:
    raise exc


def _num(value: Any) -> float | None:
    return float(value) if value is not None else None
