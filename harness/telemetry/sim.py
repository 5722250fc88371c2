"""GPU readings from the simulator's GPU model (``GET /sim/gpu``, a simulator-only route).

One small ``requests`` GET per read on a kept-alive session (the harness's client module
is for the engines' own surface; this route is not part of it).
"""

from __future__ import annotations

from typing import Any

import requests

from harness.telemetry.base import SAMPLE_FIELDS, GpuInfo, GpuSample, Source, TelemetryUnavailable, now, select_gpus


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


class SimSource(Source):
    name = "sim"

    @classmethod
    def for_server(cls, base_url: str | None) -> "SimSource":
        if not base_url:
            raise ValueError("telemetry source 'sim' needs the simulator's base_url")
        return cls(base_url)

    @classmethod
    def for_servers(cls, base_urls: list[str]) -> "Source":
        if len(base_urls) == 1:
            return cls.for_server(base_urls[0])
        return SimFleetSource([cls(url) for url in base_urls])

    def __init__(self, base_url: str, timeout_s: float = 1.0):
        super().__init__()
        self.url = base_url.rstrip("/") + "/sim/gpu"
        self.timeout_s = timeout_s
        self._session: requests.Session | None = None
        self._open: dict[str, GpuInfo] = {}

    def _get(self) -> list[dict]:
        if self._session is None:
            self._session = requests.Session()
        resp = self._session.get(self.url, timeout=self.timeout_s)
        if resp.status_code == 404:
            raise TelemetryUnavailable(f"{self.url} not found: this server is not the specgate simulator")
        resp.raise_for_status()
        return list(resp.json()["gpus"])

    def enumerate(self) -> list[GpuInfo]:
        try:
            gpus = self._get()
        except TelemetryUnavailable:
            raise
        except (requests.RequestException, ValueError, KeyError) as exc:
            raise TelemetryUnavailable(f"cannot read the simulator's GPUs at {self.url} ({type(exc).__name__}: {exc})") from None
        return [
            GpuInfo(
                index=int(g["index"]),
                uuid=str(g["uuid"]),
                name=str(g.get("name", "?")),
                driver=g.get("driver"),
                sm_clock_max_mhz=_num(g.get("sm_clock_max_mhz")),
                power_limit_w=_num(g.get("power_limit_w")),
            )
            for g in gpus
        ]

    def open(self, gpu_uuids: list[str] | None = None, gpu_indices: list[int] | None = None) -> list[GpuInfo]:
        chosen = select_gpus(self.enumerate(), gpu_uuids, gpu_indices, "sim")
        self._open = {g.uuid: g for g in chosen}
        self.opened = list(chosen)
        return chosen

    def close(self) -> None:
        self._open = {}
        if self._session is not None:
            self._session.close()
            self._session = None

    def read(self) -> list[GpuSample]:
        if not self._open:
            return []
        t0 = now()
        try:
            gpus = self._get()
        except (requests.RequestException, ValueError, KeyError, TelemetryUnavailable) as exc:
            self.note(f"sim read failed: {type(exc).__name__}: {exc}")
            return []
        t = (t0 + now()) / 2
        by_uuid = {str(g.get("uuid")): g for g in gpus}
        out: list[GpuSample] = []
        for uuid, info in list(self._open.items()):
            g = by_uuid.get(uuid)
            if g is None:
                del self._open[uuid]
                self.note(f"GPU {info.index} ({uuid}) dropped from sampling: the simulator no longer lists it")
                continue
            values = {f: _num(g.get(f)) for f in SAMPLE_FIELDS}
            out.append(
                GpuSample(
                    t=t,
                    uuid=uuid,
                    index=int(g.get("index", info.index)),
                    throttle_reasons=tuple(g.get("throttle_reasons") or ()),
                    **values,
                )
            )
        return out


class SimFleetSource(Source):
    """The GPUs of several simulators (a fleet's workers, a server's nodes) as one source,
    numbered on after the previous part's. The nodes of one server name their GPUs by TP rank,
    all distinct: kept. A fleet's workers are separate servers, each naming its own from
    rank 0 with the same UUIDs: each then suffixed with its worker (``-w1``), so that no two of
    the fleet's GPUs share a name."""

    name = "sim"

    def __init__(self, parts: list[SimSource]):
        super().__init__()
        self.parts = parts
        self.offsets: list[int] = []
        self.notes_forwarded = [0] * len(parts)  # each worker's notes already said as this source's
        self.suffixed = True  # whether the parts' UUIDs collide (enumerate() says)

    def fleet_uuid(self, uuid: str, worker: int) -> str:
        return f"{uuid}-w{worker}" if self.suffixed else uuid

    def enumerate(self) -> list[GpuInfo]:
        own = [part.enumerate() for part in self.parts]
        uuids = [g.uuid for gpus in own for g in gpus]
        self.suffixed = len(set(uuids)) < len(uuids)
        found, self.offsets = [], []
        for worker, gpus in enumerate(own):
            self.offsets.append(len(found))
            found += [GpuInfo(index=len(found) + i, uuid=self.fleet_uuid(g.uuid, worker), name=g.name, driver=g.driver,
                              sm_clock_max_mhz=g.sm_clock_max_mhz, power_limit_w=g.power_limit_w)
                      for i, g in enumerate(gpus)]
        return found

    def open(self, gpu_uuids: list[str] | None = None, gpu_indices: list[int] | None = None) -> list[GpuInfo]:
        chosen = select_gpus(self.enumerate(), gpu_uuids, gpu_indices, "sim")
        wanted = {g.uuid for g in chosen}
        for worker, part in enumerate(self.parts):
            own = [g.uuid for g in part.enumerate() if self.fleet_uuid(g.uuid, worker) in wanted]  # its own names
            part.open(own) if own else part.close()
        self.opened = list(chosen)
        return chosen

    def read(self) -> list[GpuSample]:
        out: list[GpuSample] = []
        for worker, part in enumerate(self.parts):
            for sample in part.read():
                sample.uuid = self.fleet_uuid(sample.uuid, worker)
                sample.index += self.offsets[worker]
                out.append(sample)
            for text in part.notes[self.notes_forwarded[worker]:]:
                self.note(f"worker {worker}: {text}")
            self.notes_forwarded[worker] = len(part.notes)
        return out

    def close(self) -> None:
        for part in self.parts:
            part.close()
