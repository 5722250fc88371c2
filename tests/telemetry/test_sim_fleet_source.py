"""A fleet's simulated GPUs as one telemetry source: each worker's GPUs numbered on after the
previous worker's, their UUIDs (the same in every simulator) made distinct by the worker."""

from __future__ import annotations

from harness.telemetry.base import make_source
from harness.telemetry.sim import SimFleetSource, SimSource


def gpu(index, clock=2600.0):
    return {"index": index, "uuid": f"GPU-sim-{index}", "name": "sim", "sm_clock_mhz": clock, "sm_clock_max_mhz": 2617.0}


def part(url, gpus):
    source = SimSource(url)
    source._get = lambda: gpus  # the simulator's /sim/gpu answer
    return source


def test_a_fleet_of_simulators_is_one_source_of_all_their_gpus():
    fleet = make_source("sim", base_urls=["http://127.0.0.1:1", "http://127.0.0.1:2"])
    assert isinstance(fleet, SimFleetSource) and len(fleet.parts) == 2
    assert isinstance(make_source("sim", base_urls=["http://127.0.0.1:1"]), SimSource)


def test_gpus_are_numbered_on_and_named_by_their_worker():
    fleet = SimFleetSource([part("u0", [gpu(0), gpu(1)]), part("u1", [gpu(0, clock=1200.0)])])
    gpus = fleet.open()
    assert [(g.index, g.uuid) for g in gpus] == [(0, "GPU-sim-0-w0"), (1, "GPU-sim-1-w0"), (2, "GPU-sim-0-w1")]
    samples = fleet.read()
    assert [(s.index, s.uuid, s.sm_clock_mhz) for s in samples] == [
        (0, "GPU-sim-0-w0", 2600.0), (1, "GPU-sim-1-w0", 2600.0), (2, "GPU-sim-0-w1", 1200.0)]


def test_a_chosen_gpu_is_sampled_on_its_own_worker_only():
    fleet = SimFleetSource([part("u0", [gpu(0)]), part("u1", [gpu(0)])])
    assert [g.uuid for g in fleet.open(["GPU-sim-0-w1"])] == ["GPU-sim-0-w1"]
    assert [s.uuid for s in fleet.read()] == ["GPU-sim-0-w1"]


def test_a_workers_notes_are_the_fleets_said_once_with_the_worker():
    broken = part("u1", [gpu(0)])
    fleet = SimFleetSource([part("u0", [gpu(0)]), broken])
    fleet.open()
    broken._get = lambda: (_ for _ in ()).throw(ValueError("down"))
    fleet.read()
    fleet.read()
    assert fleet.notes == ["worker 1: sim read failed: ValueError: down"]


def test_the_nodes_of_one_server_keep_their_gpus_rank_names():
    node0 = part("u0", [{**gpu(0), "uuid": "GPU-sim-0000"}, {**gpu(1), "uuid": "GPU-sim-0001"}])
    node1 = part("u1", [{**gpu(0), "uuid": "GPU-sim-0002"}, {**gpu(1), "uuid": "GPU-sim-0003"}])
    server = SimFleetSource([node0, node1])
    assert [(g.index, g.uuid) for g in server.open()] == [
        (0, "GPU-sim-0000"), (1, "GPU-sim-0001"), (2, "GPU-sim-0002"), (3, "GPU-sim-0003")]
    assert [s.uuid for s in server.read()] == ["GPU-sim-0000", "GPU-sim-0001", "GPU-sim-0002", "GPU-sim-0003"]
