"""Run records: atomic writes, a `latest` link, a status from start to end, secrets
redacted everywhere."""

import json
import os

import pytest

from harness.secrets import fingerprint
from harness.run.compose import compose
from harness.record.requests import read_lines
from harness.record.store import (RecordError, Redactor, RunRecord, atomic_write, load_results, read_reference_runs,
                            read_run, read_runs)
from harness.run.runner import Runner


def test_record_layout_and_latest_link(tmp_path):
    record = RunRecord(tmp_path, "sim_smoke")
    assert record.path.parent == tmp_path and record.path.name.endswith("_sim_smoke")
    assert not (tmp_path / "latest").exists(), "latest moved to a run that has not ended"
    record.point_latest()
    assert (tmp_path / "latest").resolve() == record.path.resolve()
    record.write_json("results.json", {"arms": {"a": {"output_tok_s": 1.0}}})
    assert load_results(record.path)["arms"]["a"]["output_tok_s"] == 1.0
    second = RunRecord(tmp_path, "sim_smoke")  # same second: a distinct folder
    assert second.path != record.path and (tmp_path / "latest").resolve() == record.path.resolve()
    second.point_latest()
    assert (tmp_path / "latest").resolve() == second.path.resolve()


def runner_for(root) -> Runner:
    return Runner(compose(["+exp=sim_smoke", f"record.root={root}"]))


def results(path) -> dict:
    return json.loads((path / "results.json").read_text())


@pytest.mark.parametrize("interrupted, status", [(False, "finished"), (True, "interrupted")])
def test_a_record_says_running_from_its_creation_and_moves_latest_only_when_the_run_ends(tmp_path, interrupted, status):
    earlier = runner_for(tmp_path)
    earlier.start_record()
    earlier.finish()
    runner = runner_for(tmp_path)
    path = runner.start_record()
    assert path != earlier.recorder.path
    assert results(path)["status"] == "running" and results(path)["finished_utc"] is None
    assert read_run(path).status == "running"
    assert (tmp_path / "latest").resolve() == earlier.recorder.path.resolve(), "latest named a run still going"
    runner.finish(interrupted=interrupted)
    assert results(path)["status"] == status and results(path)["interrupted"] is interrupted
    assert results(path)["finished_utc"]
    assert (tmp_path / "latest").resolve() == path.resolve()


def write_results(root, name, **data):
    path = root / name
    path.mkdir(parents=True)
    (path / "results.json").write_text(json.dumps({"arms": {}, **data}))
    return path


@pytest.mark.parametrize("data, status", [({}, "finished"), ({"interrupted": True}, "interrupted"),
                                          ({"interrupted": False}, "finished"), ({"status": "running"}, "running"),
                                          ({"status": "interrupted", "interrupted": True}, "interrupted")])
def test_records_without_a_status_read_as_written_at_the_end(tmp_path, data, status):
    run = read_run(write_results(tmp_path, "r", **data))
    assert run.status == status and run.finished is (status == "finished")
    assert bool(run.incompleteness) is (status != "finished")


def test_a_reference_run_must_have_finished(tmp_path):
    dead = write_results(tmp_path, "20261201T000000Z_x", status="running")
    with pytest.raises(RecordError) as info:
        read_reference_runs(dead)
    assert "still says running" in str(info.value) and "a reference run must have finished" in str(info.value)
    assert "\n" not in str(info.value)
    stopped = write_results(tmp_path, "20261201T000001Z_x", status="interrupted", interrupted=True)
    with pytest.raises(RecordError, match="interrupted"):
        read_reference_runs(stopped)
    old = write_results(tmp_path, "20261201T000002Z_x")  # written before `status`: finished
    assert read_reference_runs(old) == (read_runs(old), [])


def test_a_history_folder_leaves_out_its_unfinished_runs_and_says_so(tmp_path):
    for i, status in enumerate(["finished", "running", "finished", "interrupted"]):
        write_results(tmp_path, f"20261201T00000{i}Z_x", status=status)
    runs, notes = read_reference_runs(tmp_path)
    assert [r.label for r in runs] == ["20261201T000000Z_x", "20261201T000002Z_x"]
    assert notes == [f"gate.baseline: left out 2 unfinished record(s) of {tmp_path}: "
                     "20261201T000001Z_x, 20261201T000003Z_x"]
    assert len(read_runs(tmp_path)) == 4  # compare still shows them all


def test_a_history_folder_with_no_finished_run_is_refused(tmp_path):
    write_results(tmp_path, "20261201T000000Z_x", status="running")
    with pytest.raises(RecordError, match="holds no finished run record"):
        read_reference_runs(tmp_path)


def test_atomic_write_never_leaves_half_a_file(tmp_path, monkeypatch):
    target = tmp_path / "results.json"
    atomic_write(target, '{"old": true}')

    def crash(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, '{"new": ' + "1" * 100000)
    assert json.loads(target.read_text()) == {"old": True}
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"], "temp file left behind"


def test_secrets_are_redacted_in_data_args_and_text(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_supersecretvalue")
    redactor = Redactor()
    config = {"server": {"env": {"HF_TOKEN": "hf_supersecretvalue", "NCCL_ALGO": "Ring"},
                         "extra_args": ["--api-key", "sk-abcdef123", "--tp", "8"]}}
    redactor.learn(config)
    clean = redactor.data(config)
    assert clean["server"]["env"] == {"HF_TOKEN": fingerprint("hf_supersecretvalue"), "NCCL_ALGO": "Ring"}
    assert clean["server"]["extra_args"] == ["--api-key", fingerprint("sk-abcdef123"), "--tp", "8"]
    assert redactor.text("loaded with token hf_supersecretvalue ok") == \
        f"loaded with token {fingerprint('hf_supersecretvalue')} ok"


def test_ordinary_token_counts_are_not_secrets():
    redactor = Redactor()
    data = {"workload": {"max_tokens": 500}, "completion_tokens": 3, "arm": "eagle3", "keep_requests": True,
            "drafter": {"num_draft_tokens": 3, "eagle_topk": 1}, "server": {"tokenizer_path": "/m"},
            "sim": {"verify_per_token_ms": 3.9, "prefill_ms_per_token": 0.05}, "key_count": 3}
    redactor.learn(data)
    assert redactor.data(data) == data
    assert redactor.text("eagle3 0.5.23") == "eagle3 0.5.23"


def test_request_files_and_log_scrubbing(tmp_path):
    redactor = Redactor({"sk-abcdef123"})
    record = RunRecord(tmp_path, "x", redactor)
    record.add_requests("a", [{"index": 0}])
    record.add_requests("b", [{"index": 0, "error": "bad key sk-abcdef123", "text": "echo sk-abcdef123"}])
    lines = read_lines(record.path)
    hidden = fingerprint("sk-abcdef123")
    assert [l["arm"] for l in lines] == ["a", "b"] and lines[1]["error"] == f"bad key {hidden}"
    assert lines[1]["text"] == f"echo {hidden}" and lines[0]["text"] is None
    log = record.arm_dir("a") / "server.log"
    log.write_text("args: --api-key sk-abcdef123\n")
    record.scrub_file("arms/a/server.log")
    assert "sk-abcdef123" not in log.read_text()


def test_one_reader_for_a_record_folder_the_latest_link_and_results_json(tmp_path):
    record = RunRecord(tmp_path, "sim_smoke")
    record.write_json("results.json", {"arms": {"a": {"status": "measured"}}, "future_key": 1})
    record.point_latest()
    for path in (record.path, tmp_path / "latest", record.path / "results.json"):
        run = read_run(path)
        assert run.label == record.path.name and run.path.name == "results.json"
        assert run.arms == {"a": {"status": "measured"}} and run.data["future_key"] == 1


@pytest.mark.parametrize("name, content, why", [
    ("results.json", None, "does not exist"), ("results.json", "{torn", "not a readable run record"),
    ("results.json", '{"arms": [1]}', "has no 'arms' mapping"), ("empty.json", "{}", "has no 'arms' mapping"),
    ("results.json", "[1, 2]", "holds no JSON object"),
    # another kind's JSON, by its kind (today's records) or its name (older ones)
    ("results.json", '{"record_kind": "sweep", "arms": {}, "points": []}', "it is a sweep record's results.json"),
    ("sweep.json", '{"experiment": "x", "arms": {}, "points": []}', "it is a sweep record's sweep.json"),
    ("capacity.json", '{"experiment": "x", "arms": {"a": {}}}', "it is a capacity record's capacity.json"),
])
def test_a_path_that_is_not_a_record_is_a_record_error_in_one_sentence(tmp_path, name, content, why):
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    with pytest.raises(RecordError) as info:
        read_run(path)
    assert why in str(info.value) and "\n" not in str(info.value)
