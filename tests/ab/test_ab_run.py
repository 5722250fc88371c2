"""`specgate ab` end to end on the simulator: two configs through the process backend, two
simulator images through the docker backend, a round that fails, and Ctrl-C. Each run is
short (one arm, a small load, 2 rounds): the statistics are tested in test_paired.py and
measured in benchmarks/verdicts.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import docker
import pytest

from harness import cli
from harness.record.requests import read_lines
from harness.servers.labels import RECORD
from tests.support.runs import as_a_background_job, require_whole_run_marker, start_specgate
from harness.servers.labels import labelled_containers

pytestmark = pytest.mark.slow

LOAD = ["telemetry=off", "workload=chat_short", "workload.num_prompts=16", "workload.concurrency=4",
        "workload.max_tokens=32", "ab.rounds=2"]


def run_ab(tmp_path: Path, *tokens: str) -> tuple[int, dict, Path]:
    require_whole_run_marker()
    runs = tmp_path / "runs"
    status = cli.main(["ab", *LOAD, *tokens, f"record.root={runs}"])
    (folder,) = [p for p in runs.iterdir() if p.name != "latest"]
    return status, json.loads((folder / "ab.json").read_text()), folder


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def servers(data: dict) -> list[dict]:
    return [block["server"] for rounds in data["arms"].values() for entry in rounds
            for block in (entry["A"], entry["B"]) if block and block.get("server")]


def test_two_configs_in_abba_rounds_on_the_process_backend_until_decided(tmp_path):
    # ab.rounds=auto: judged from round 3 on (with two, a paired interval has one degree of
    # freedom, t = 12.7), stopped once decided, at round 4 at the latest; one round bent by a
    # busy machine (seen at load 5-10: A 685 then 876 tok/s) is what round 4 is there for
    status, data, folder = run_ab(tmp_path, "backend=process", "b:server.sim.decode_step_ms=6.0", "ab.rounds=auto",
                                  "ab.max_rounds=4")
    assert status == 1 and (data["status"], data["exit_status"]) == ("finished", 1)  # B is 50 % slower per step
    rounds = data["arms"]["default"]
    assert [(r["round"], r["order"], r["counted"]) for r in rounds[:3]] == [(1, "AB", True), (2, "BA", True),
                                                                            (3, "AB", True)]
    sequential = data["sequential"]
    assert sequential["max_rounds"] == 4 and sequential["rounds_run"] == {"default": len(rounds)} and len(rounds) <= 4
    assert sequential["why"]["default"].startswith(f"stopped after round {len(rounds)}: "), sequential
    verdicts = {v["name"]: v for v in data["gates"]}
    assert "sequential: 5% error split over 2 looks (rounds 3-4) and 3 verdicts" in verdicts["ab.output_tok_s"]["detail"]
    assert verdicts["ab.output_tok_s"]["status"] == "failed", verdicts["ab.output_tok_s"]["detail"]
    # TPOT is the per-token decode time a stalled client can blur: failed, or inconclusive naming the client
    tpot = verdicts["ab.tpot_ms.p50"]
    assert tpot["status"] == "failed" or (tpot["status"] == "inconclusive" and "client-bound" in tpot["detail"]), tpot
    assert "B regressed: output_tok_s A " in verdicts["ab.output_tok_s"]["detail"]
    assert all(v["scope"] == "ab" for v in data["gates"])
    assert data["sides"]["B"]["overrides"] == ["server.sim.decode_step_ms=6.0"]
    # one fresh server per side and round, each with its config and requests in the record
    ran = len(rounds)  # only the rounds that ran: the fourth's folders, planned up front, go if it never started
    assert sorted(p.name for p in (folder / "arms").iterdir()) == sorted(f"default.{side}{r}" for side in "AB"
                                                                         for r in range(1, ran + 1))
    assert "decode_step_ms: 6.0" in (folder / "arms" / "default.B2" / "config.yaml").read_text()
    lines = read_lines(folder, "default.B2")
    assert {(line["round"], line["side"]) for line in lines} == {(2, "B")}
    summary = (folder / "summary.md").read_text()
    assert "status **finished**, exit status 1: " in summary and "| 2 | BA | B | measured |" in summary
    assert f"over {ran} rounds (ab.rounds=auto, up to 4: stopped once decided)" in summary
    assert not any(alive(s["pid"]) for s in servers(data))
    assert cli.main(["report", str(folder)]) == 0
    page = (folder / "report.html").read_text()
    assert "A/B: default" in page and "B regressed" in page and "http://" not in page


def test_two_simulator_images_on_the_docker_backend(tmp_path):
    """Side B runs an image built from another recipe (a build argument of its own): the
    same speed, so nothing regresses; each side's server names its image."""
    # what this checks is two images end to end, not the statistics: a 10 % allowed change keeps
    # two rounds of a busy machine (t with one degree of freedom) from deciding anything here
    status, data, folder = run_ab(tmp_path, "backend=docker", "b:+build.build_args.SPECGATE_AB_SIDE=b",
                                  "gate.tolerance=0.10", "gate.undecided=warn")
    assert data["status"] == "finished" and all(r["counted"] for r in data["arms"]["default"])
    assert not [v for v in data["gates"] if v["status"] == "failed"] and status == 0, data["gates"]
    images = {entry[side]["server"]["image"]["id"] for entry in data["arms"]["default"] for side in "AB"}
    by_side = {side: {e[side]["server"]["image"]["id"] for e in data["arms"]["default"]} for side in "AB"}
    assert len(images) == 2 and by_side["A"].isdisjoint(by_side["B"])
    labelled = labelled_containers(docker.from_env(), f"{RECORD}={folder.resolve()}")
    assert not labelled


def test_a_side_that_cannot_start_stops_the_ab_with_one_sentence(tmp_path, capsys):
    status, data, folder = run_ab(tmp_path, "backend=process", "b:build.module=harness.no_such_module")
    assert status == 1 and data["status"] == "finished"
    (entry,) = data["arms"]["default"]  # the A/B stopped in round 1
    assert entry["A"]["status"] == "measured" and entry["B"]["status"] == "server_failed" and not entry["counted"]
    assert data["stopped"].startswith("round 1, arm 'default', side B: ")
    assert data["stopped"].endswith("; the A/B stopped there; rounds that counted: none")
    assert f"specgate ab: {data['stopped']}" in capsys.readouterr().err
    assert all(v["status"] == "inconclusive" for v in data["gates"])
    assert not any(alive(s["pid"]) for s in servers(data) if s.get("pid"))


def test_ctrl_c_stops_the_round_and_closes_the_record(tmp_path):
    runs = tmp_path / "runs"
    child = start_specgate("ab", *LOAD, "backend=process", "b:server.sim.decode_step_ms=4.4", "ab.rounds=4",
                           f"record.root={runs}", stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           start_new_session=True, preexec_fn=as_a_background_job)  # Ctrl-C inherited ignored
    try:
        for line in child.stdout:  # round 1 ended: round 2 is under way
            if "round 2, arm 'default', side B: starting" in line:
                break
        child.send_signal(signal.SIGINT)
        output = child.communicate(timeout=60)[0]
    finally:
        if child.poll() is None:
            child.kill()
    (folder,) = [p for p in runs.iterdir() if p.name != "latest"]
    data = json.loads((folder / "ab.json").read_text())
    assert child.returncode == 2, output
    assert (data["status"], data["exit_status"]) == ("interrupted", 2)
    assert data["arms"]["default"][0]["counted"] and not data["arms"]["default"][-1]["counted"]
    assert "status **interrupted**" in (folder / "summary.md").read_text()
    assert not any(alive(s["pid"]) for s in servers(data) if s.get("pid"))
    assert not list(folder.rglob(".*.tmp"))


def test_both_servers_kept_up_serve_every_round(tmp_path):
    """ab.keep_up=true: one server per side for the whole A/B, every round's load on it."""
    status, data, folder = run_ab(tmp_path, "backend=process", "ab.keep_up=true", "b:server.sim.decode_step_ms=6.0")
    assert status == 1 and data["keep_up"] and [r["counted"] for r in data["arms"]["default"]] == [True, True]
    assert sorted(p.name for p in (folder / "arms").iterdir()) == ["default.A", "default.B"]
    for side in "AB":
        assert (folder / "arms" / f"default.{side}" / "server.log").read_text().count("server_args:") == 1
        assert {line["round"] for line in read_lines(folder, f"default.{side}")} == {1, 2}
    # a 50 % slower side fails; on a machine too busy to trust the load (the client fell behind),
    # the verdict may only be inconclusive with that cause named, never passed
    verdict = {v["name"]: v for v in data["gates"]}["ab.output_tok_s"]
    assert verdict["status"] == "failed" or (verdict["status"] == "inconclusive" and verdict.get("cause")), verdict
    assert not any(alive(s["pid"]) for s in servers(data))
