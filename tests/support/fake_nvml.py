"""The slice of ``pynvml`` that NvmlSource uses, faked: a GPU's readings are a dict (``gpu_readings``
makes a plausible one), and any call can be made to fail with an NVML error code. Shared by the
telemetry and energy tests."""

from __future__ import annotations

import types

class FakeNvml:
    """The slice of pynvml that NvmlSource uses, with NVML's constants and error codes.

    ``gpus``: one dict per GPU with its readings; ``fail[fn] = code`` makes that call raise
    ``NVMLError(code)`` on that GPU; ``calls`` counts calls per function name."""

    NVML_CLOCK_GRAPHICS, NVML_CLOCK_SM, NVML_CLOCK_MEM = 0, 1, 2
    NVML_TEMPERATURE_GPU = 0
    NVML_PCIE_UTIL_TX_BYTES, NVML_PCIE_UTIL_RX_BYTES = 0, 1
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_NO_PERMISSION = 4
    NVML_ERROR_NOT_FOUND = 6
    NVML_ERROR_DRIVER_NOT_LOADED = 9
    NVML_ERROR_LIBRARY_NOT_FOUND = 12
    NVML_ERROR_FUNCTION_NOT_FOUND = 13
    NVML_ERROR_GPU_IS_LOST = 15
    NVML_ERROR_UNKNOWN = 999
    MESSAGES = {
        3: "Not Supported",
        6: "Not Found",
        9: "Driver Not Loaded",
        12: "NVML Shared Library Not Found",
        13: "Function Not Found",
        15: "GPU is lost",
        999: "Unknown Error",
    }

    class NVMLError(Exception):
        def __init__(self, value: int):
            super().__init__(value)
            self.value = value

        def __str__(self) -> str:
            return FakeNvml.MESSAGES.get(self.value, f"NVML Error with code {self.value}")

    def __init__(self, gpus: list[dict], init_error: int | None = None):
        self.gpus = gpus
        self.init_error = init_error
        self.calls: dict[str, int] = {}
        self.inits = self.shutdowns = 0

    def _dev(self, name: str, handle: int) -> dict:
        self.calls[name] = self.calls.get(name, 0) + 1
        g = self.gpus[handle]
        code = g.get("fail", {}).get(name)
        if code is not None:
            raise self.NVMLError(code)
        return g

    def module(self, without: tuple[str, ...] = ()) -> types.SimpleNamespace:
        """A module-like object (only the attributes a real binding would have)."""
        attrs = {k: getattr(self, k) for k in dir(FakeNvml) if k.startswith(("NVML", "nvml"))}
        attrs["NVMLError"] = self.NVMLError
        for name in without:
            attrs.pop(name, None)
        return types.SimpleNamespace(**attrs)

    # ---- library
    def nvmlInit(self) -> None:
        self.inits += 1
        if self.init_error is not None:
            raise self.NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return b"550.54.15"

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    # ---- device
    def nvmlDeviceGetUUID(self, h: int) -> bytes:
        return self._dev("nvmlDeviceGetUUID", h)["uuid"].encode()

    def nvmlDeviceGetName(self, h: int) -> str:
        return self._dev("nvmlDeviceGetName", h).get("name", "NVIDIA H200")

    def nvmlDeviceGetMaxClockInfo(self, h: int, kind: int) -> int:
        assert kind == self.NVML_CLOCK_SM
        return self._dev("nvmlDeviceGetMaxClockInfo", h)["sm_max"]

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        return self._dev("nvmlDeviceGetEnforcedPowerLimit", h)["limit_mw"]

    def nvmlDeviceGetClockInfo(self, h: int, kind: int) -> int:
        g = self._dev("nvmlDeviceGetClockInfo", h)
        return {self.NVML_CLOCK_SM: g["sm"], self.NVML_CLOCK_GRAPHICS: g["gr"], self.NVML_CLOCK_MEM: g["mem"]}[kind]

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return self._dev("nvmlDeviceGetPowerUsage", h)["power_mw"]

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        return self._dev("nvmlDeviceGetTotalEnergyConsumption", h)["energy_mj"]

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        assert sensor == self.NVML_TEMPERATURE_GPU
        return self._dev("nvmlDeviceGetTemperature", h)["temp"]

    def nvmlDeviceGetUtilizationRates(self, h: int) -> types.SimpleNamespace:
        g = self._dev("nvmlDeviceGetUtilizationRates", h)
        return types.SimpleNamespace(gpu=g["util"], memory=g["mem_util"])

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        return self._dev("nvmlDeviceGetCurrentClocksEventReasons", h)["reasons"]

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: int) -> int:
        return self._dev("nvmlDeviceGetCurrentClocksThrottleReasons", h)["reasons"]

    def nvmlDeviceGetPcieThroughput(self, h: int, counter: int) -> int:
        g = self._dev("nvmlDeviceGetPcieThroughput", h)
        return g["tx"] if counter == self.NVML_PCIE_UTIL_TX_BYTES else g["rx"]


def gpu_readings(i: int, **kw) -> dict:
    g = dict(
        uuid=f"GPU-{i:x}{i:x}aaaaaa-0000-1111-2222-33333333333{i}",
        sm=1980, gr=1980, mem=2619, sm_max=1980, limit_mw=700_000, power_mw=350_123, energy_mj=123_456_789,
        temp=45, util=97, mem_util=61, reasons=0x4 | 0x20, tx=1234, rx=567,
    )
    g.update(kw)
    return g
