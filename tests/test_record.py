"""Run records: atomic writes, a `latest` link, secrets redacted everywhere."""

import json
import os

import pytest

from harness.record import RecordError, Redactor, RunRecord, atomic_write, load_results, read_run


def test_record_layout_and_latest_link(tmp_path):
    record = RunRecord(tmp_path, "sim_smoke")
    assert record.path.parent == tmp_path and record.path.name.endswith("_sim_smoke")
    assert (tmp_path / "latest").resolve() == record.path.resolve()
    record.write_json("results.json", {"arms": {"a": {"output_tok_s": 1.0}}})
    assert load_results(record.path)["arms"]["a"]["output_tok_s"] == 1.0
    second = RunRecord(tmp_path, "sim_smoke")  # same second: a distinct folder, latest moves
    assert second.path != record.path and (tmp_path / "latest").resolve() == second.path.resolve()


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
    assert clean["server"]["env"] == {"HF_TOKEN": "***", "NCCL_ALGO": "Ring"}
    assert clean["server"]["extra_args"] == ["--api-key", "***", "--tp", "8"]
    assert redactor.text("loaded with token hf_supersecretvalue ok") == "loaded with token *** ok"


def test_ordinary_token_counts_are_not_secrets():
    redactor = Redactor()
    data = {"workload": {"max_tokens": 500}, "completion_tokens": 3, "arm": "eagle3", "keep_requests": True,
            "drafter": {"num_draft_tokens": 3, "eagle_topk": 1}, "server": {"tokenizer_path": "/m"},
            "sim": {"verify_per_token_ms": 3.9, "prefill_ms_per_token": 0.05}, "key_count": 3}
    redactor.learn(data)
    assert redactor.data(data) == data
    assert redactor.text("eagle3 0.5.23") == "eagle3 0.5.23"


def test_requests_jsonl_and_log_scrubbing(tmp_path):
    redactor = Redactor({"sk-abcdef123"})
    record = RunRecord(tmp_path, "x", redactor)
    record.add_requests("a", [{"index": 0}])
    record.add_requests("b", [{"index": 0, "error": "bad key sk-abcdef123"}])
    lines = [json.loads(l) for l in (record.path / "requests.jsonl").read_text().splitlines()]
    assert [l["arm"] for l in lines] == ["a", "b"] and lines[1]["error"] == "bad key ***"
    log = record.arm_dir("a") / "server.log"
    log.write_text("args: --api-key sk-abcdef123\n")
    record.scrub_file("arms/a/server.log")
    assert "sk-abcdef123" not in log.read_text()


def test_one_reader_for_a_record_folder_the_latest_link_and_results_json(tmp_path):
    record = RunRecord(tmp_path, "sim_smoke")
    record.write_json("results.json", {"arms": {"a": {"status": "measured"}}, "future_key": 1})
    for path in (record.path, tmp_path / "latest", record.path / "results.json"):
        run = read_run(path)
        assert run.label == record.path.name and run.path.name == "results.json"
        assert run.arms == {"a": {"status": "measured"}} and run.data["future_key"] == 1


@pytest.mark.parametrize("content, why", [(None, "does not exist"), ("{torn", "not a readable run record"),
                                          ('{"arms": [1]}', "has no 'arms' mapping")])
def test_a_path_that_is_not_a_record_is_a_record_error_in_one_sentence(tmp_path, content, why):
    path = tmp_path / "results.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(RecordError) as info:
        read_run(path)
    assert why in str(info.value) and "\n" not in str(info.value)
