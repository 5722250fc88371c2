"""workload.client_placement=ray: the load's client processes as Ray actors on a cluster's nodes
(harness/load/ray_clients.py): the indices dealt out, the start barrier, the records merged
onto the driver's clock by each actor's measured offset, which the record and summary state.
The real case runs on a local Ray cluster of two nodes (two raylets on this machine)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import cli
from harness.load import LoadPlan, LoadResult, RequestRecord, run_load
from harness.load.ray_clients import ClockOffset, actor_share, combined, shifted
from harness.report.summary import ray_actors_line
from harness.servers.ports import free_port
from tests.support.ray_cluster import two_node_cluster
from tests.load.test_client_processes import sim_url, workload  # noqa: F401  (the simulator fixture)


def test_an_actors_times_move_onto_the_drivers_clock_by_its_offset():
    rec = RequestRecord(index=0, warmup=False, send_time=105.0, scheduled_time=104.9, chunk_times=[105.2, 105.3],
                        end_time=105.4)
    result = LoadResult(records=[rec], start_time=105.0, end_time=105.4, api="completions", model="m", run_start=104.0)
    moved = shifted(result, 100.0)  # the actor's clock reads 100 s more than the driver's
    assert (rec.send_time, rec.scheduled_time, rec.end_time) == pytest.approx((5.0, 4.9, 5.4))
    assert rec.chunk_times == pytest.approx([5.2, 5.3])
    assert (moved.start_time, moved.end_time, moved.run_start) == pytest.approx((5.0, 5.4, 4.0))


def test_an_offset_measured_twice_is_their_mean_uncertain_by_the_worse_probe_and_half_the_drift():
    both = combined(ClockOffset(0.010, 0.001), ClockOffset(0.014, 0.002))
    assert both.offset_s == pytest.approx(0.012) and both.uncertainty_s == pytest.approx(0.002 + 0.002)


def test_every_loop_deals_its_indices_out_to_the_actors():
    closed = workload(concurrency=5, num_prompts=7)
    plan = LoadPlan.of(closed, "http://x", "m")
    shares = [actor_share(plan, slot, 2) for slot in (0, 1)]
    assert [s[0].concurrency for s in shares] == [3, 2] and [s[0].warmup_requests for s in shares] == [1, 0]
    claimed = [[budget.claim(None) for _ in range(5)] for _, budget, _ in shares]
    assert claimed == [[0, 2, 4, 6, None], [1, 3, 5, None, None]]


def test_a_bad_placement_or_a_ray_address_that_does_not_answer_is_one_sentence(tmp_path, capsys):
    base = ["run", "+exp=sim_smoke", "backend=process", f"record.root={tmp_path}"]
    port = free_port()
    assert cli.main([*base, "workload.client_placement=ray", f"workload.ray_address=127.0.0.1:{port}"]) == 4
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"specgate: workload.ray_address=127.0.0.1:{port}: no Ray cluster answers there") \
        and "\n" not in err
    assert cli.main([*base, "workload.client_placement=cloud"]) == 4
    assert "workload.client_placement=cloud: one of local, ray" in capsys.readouterr().err
    assert cli.main([*base, "workload.ray_address=127.0.0.1:6379"]) == 4
    assert "only with workload.client_placement=ray" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_an_actor_that_cannot_reach_the_server_is_named_in_one_sentence():
    from harness.load.ray_clients import reach_error, unreachable_sentence

    closed = f"http://127.0.0.1:{free_port()}"
    assert "refused" in reach_error(closed).lower()
    nodes = [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}]
    said = unreachable_sentence(closed, nodes, [None, "Connection refused"])
    assert said == (f"workload.client_placement=ray: the server at {closed} cannot be reached from actor 1 on "
                    f"10.0.0.2 (Connection refused); 127.0.0.1 is a loopback address, each node's own: serve on an "
                    f"address the nodes reach (backend=attach backend.url=http://HOST:PORT)")
    assert unreachable_sentence("http://gpu-box:30000", nodes, [None, None]) is None
    assert "loopback" not in unreachable_sentence("http://gpu-box:30000", nodes, ["timed out", None])


def test_the_summary_states_each_actors_node_and_clock_offset():
    line = ray_actors_line([{"slot": 0, "node_id": "aaaaaaaa11", "ip": "10.0.0.1", "clock_offset_ms": 0.02,
                             "clock_uncertainty_ms": 0.4},
                            {"slot": 1, "node_id": "bbbbbbbb22", "ip": "10.0.0.2", "clock_offset_ms": -3.5,
                             "clock_uncertainty_ms": 0.6}])
    assert line.startswith("2 client process(es) as Ray actors on 2 node(s)")
    assert "actor 1 on 10.0.0.2 (bbbbbbbb): clock offset -3.500 ± 0.600 ms" in line


@pytest.fixture(scope="module")
def two_nodes():
    with two_node_cluster() as address:
        yield address


@pytest.mark.cluster
def test_client_processes_as_ray_actors_on_two_nodes(two_nodes, sim_url):  # noqa: F811
    marks = []
    plan = LoadPlan.of(workload(client_processes=2, client_placement="ray", ray_address=two_nodes,
                                prewarm_connections=True), sim_url, "procs")
    result = run_load(plan, on_measured_start=lambda: marks.append("start"),
                      on_tokens_flowing=lambda t: marks.append(t))
    assert sorted(r.index for r in result.measured) == list(range(16))  # every index once, from either actor
    assert [r.index for r in result.records if r.warmup] == [0] and all(r.ok for r in result.records)
    assert marks[0] == "start" and len(marks) == 2  # the barrier, then the first token once
    assert result.start_time <= marks[1] <= result.end_time  # on the driver's clock, inside the load
    actors = result.client["ray_actors"]
    assert [a["slot"] for a in actors] == [0, 1] and len({a["node_id"] for a in actors}) == 2  # two nodes
    for actor in actors:  # one machine: one monotonic clock, so the offset is 0 within what was measured
        assert 0 < actor["clock_uncertainty_ms"] < 50
        assert abs(actor["clock_offset_ms"]) <= actor["clock_uncertainty_ms"] + 1.0
    assert result.client["processes"] == 2 and result.client["send_gap_ms"]["n"] == 16
    lines = [r.to_json() for r in result.records]
    assert all(line["send_ms"] >= 0 for line in lines)  # one t0 for the merged records


@pytest.mark.cluster
def test_actors_that_cannot_reach_the_server_stop_the_load_before_it_starts(two_nodes):
    from harness.load.ray_clients import ClientsCannotReach

    closed = f"http://127.0.0.1:{free_port()}"
    plan = LoadPlan.of(workload(client_processes=2, client_placement="ray", ray_address=two_nodes), closed, "procs")
    with pytest.raises(ClientsCannotReach) as caught:
        run_load(plan)
    assert str(caught.value).startswith(f"workload.client_placement=ray: the server at {closed} cannot be reached "
                                        f"from actor 0 on ") and "actor 1 on " in str(caught.value)


@pytest.mark.slow
@pytest.mark.cluster
def test_a_run_with_ray_actors_records_and_states_their_clock_offsets(tmp_path, own_ray_folders):
    from tests.support.runs import specgate

    done = specgate("run", "+exp=sim_smoke", "backend=process", "workload.num_prompts=8", "workload.max_tokens=32",
                    "workload.concurrency=2", "workload.client_processes=2", "workload.client_placement=ray",
                    f"record.root={tmp_path}", timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (record,) = [p for p in tmp_path.iterdir() if p.is_dir() and not p.is_symlink()]
    results = json.loads((record / "results.json").read_text())
    for arm in ("baseline", "eagle3"):
        actors = results["arms"][arm]["client"]["ray_actors"]
        assert [a["slot"] for a in actors] == [0, 1] and all("clock_uncertainty_ms" in a for a in actors)
    summary = (record / "summary.md").read_text()
    assert summary.count("2 client process(es) as Ray actors on 1 node(s)") == 2 and "clock offset" in summary
    assert own_ray_folders() == set()  # the run's Ray instance went with it


def actors_running(session: int) -> bool:
    """A load actor of this run's Ray instance is running its load (its process title)."""
    from harness.sweep.ray_cluster import session_members

    for pid, _ in session_members(session):
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"ray::LoadActor.run"):
                return True
        except OSError:
            continue
    return False


@pytest.mark.slow
@pytest.mark.cluster
def test_ctrl_c_keeps_what_the_actors_had_finished_and_leaves_no_ray(tmp_path, own_ray_folders):
    import signal
    import subprocess
    import time

    import pyarrow.parquet as pq

    from tests.support.runs import start_specgate
    from tests.sweep.test_sweep_launchers import WITH_SIGINT, finished, wait_for

    process = start_specgate("run", "+exp=sim_smoke", "backend=process", "workload.num_prompts=40",
                             "workload.max_tokens=300", "workload.concurrency=2", "workload.client_processes=2",
                             "workload.client_placement=ray", f"record.root={tmp_path}", prefix=WITH_SIGINT,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    wait_for(lambda: actors_running(process.pid), 120, "load actors running")
    time.sleep(4)  # some requests end
    process.send_signal(signal.SIGINT)
    status, output = finished(process, timeout=120)
    assert status == 2, output[-3000:]
    assert "LoadInterrupted: load interrupted with" in output and " 0 measured request(s) finished" not in output
    (record,) = tmp_path.glob("2*_sim_smoke")
    assert json.loads((record / "results.json").read_text())["status"] == "interrupted"
    assert pq.read_table(record / "arms" / "baseline" / "requests.parquet").num_rows > 0
    assert own_ray_folders() == set()
