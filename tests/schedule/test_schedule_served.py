"""`specgate schedule SWEEP --served RUN` (harness/schedule/served.py) on records written by hand
(tests/schedule/fake_sweep.py): each served arm's speedup against the interval the sweep
predicted for the k it drafts (a per-batch-size table's k at the run's concurrency, an adaptive
server's scheduled k, a static k), held or the difference said, what cannot be checked said
and never read as held, and bad input in one sentence."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from harness import cli
from harness.schedule.served import served_k
from tests.schedule.fake_sweep import arm_config, arm_lines, write_sweep
from tests.schedule.test_schedule import CLEAR

TABLE = [[1, 2, 2], [3, 8, 1]]  # k=2 up to a batch of 2, then k=1 (what the vLLM form writes)


def served_run(root: Path, concurrency: int, arms: dict[str, tuple[float, dict]], seed: int = 1) -> Path:
    """A run record: arm -> (tok/s, its config's drafter, or None for plain) at `concurrency`."""
    record, rng, lines = root / "20261206T000000Z_served", np.random.default_rng(seed), []
    plain_rate = arms["baseline"][0]
    blocks = {}
    for arm, (rate, cfg) in arms.items():
        (record / "arms" / arm).mkdir(parents=True)
        (record / "arms" / arm / "config.yaml").write_text(yaml.safe_dump({**cfg, "workload": {"concurrency": concurrency}}))
        lines += arm_lines(arm, rate, rng)
        blocks[arm] = {"status": "measured", "output_tok_s": rate,
                       **({} if arm == "baseline" else {"speedup_vs_baseline": rate / plain_rate})}
    (record / "requests.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (record / "results.json").write_text(json.dumps({"experiment": "served", "status": "finished",
                                                     "plain_arm": "baseline", "arms": blocks}))
    return record


def vllm(k: int, table: list | None = None) -> dict:
    cfg = arm_config("vllm", k)
    if table:
        cfg["drafter"]["vllm_speculative_config"] = {"num_speculative_tokens_per_batch_size": table}
    return cfg


def scheduled(tmp_path: Path) -> Path:
    sweep = write_sweep(tmp_path, CLEAR, engine="vllm")
    assert cli.main(["schedule", str(sweep)]) == 0
    return sweep


def test_a_schedule_served_beside_its_static_k_holds_and_says_so(tmp_path, capsys):
    sweep = scheduled(tmp_path)  # at concurrency 1: k=2, 2.0x
    run = served_run(tmp_path, 1, {"baseline": (200, arm_config("vllm", None)), "eagle3": (400, vllm(2)),
                                   "eagle3_scheduled": (400, vllm(2, TABLE))})
    capsys.readouterr()
    assert cli.main(["schedule", str(sweep), "--served", str(run)]) == 0
    out = capsys.readouterr().out
    assert "eagle3 (static, k=2 at concurrency 1) served 2." in out and ": held" in out
    assert "eagle3_scheduled (per-batch-size table, k=2 at concurrency 1) served 2." in out
    assert "served schedule: 2 of 2 arm(s) held" in out
    (block,) = json.loads((sweep / "schedule.json").read_text())["served"]
    assert block["run"] == str(run) and [c["held"] for c in block["checks"]] == [True, True]
    predicted = block["checks"][0]["predicted"]
    assert predicted["k"] == 2 and predicted["interval"][0] < block["checks"][0]["speedup"] < predicted["interval"][1]
    assert cli.main(["schedule", str(sweep), "--served", str(run)]) == 0  # checked again: replaced, not added
    assert len(json.loads((sweep / "schedule.json").read_text())["served"]) == 1


def test_a_served_speedup_outside_the_predicted_interval_is_said_with_the_difference(tmp_path, capsys):
    sweep = scheduled(tmp_path)
    run = served_run(tmp_path, 1, {"baseline": (200, arm_config("vllm", None)),
                                   "eagle3_scheduled": (300, vllm(2, TABLE))})  # 1.5x where 2.0x was predicted
    capsys.readouterr()
    assert cli.main(["schedule", str(sweep), "--served", str(run)]) == 1
    out = capsys.readouterr().out
    assert "NOT held, below the interval (-2" in out and "served schedule: 0 of 1 arm(s) held" in out


def test_what_cannot_be_checked_says_why_and_fails(tmp_path, capsys):
    sweep = scheduled(tmp_path)
    run = served_run(tmp_path, 2, {"baseline": (200, arm_config("vllm", None)), "eagle3": (400, vllm(2))})
    capsys.readouterr()
    assert cli.main(["schedule", str(sweep), "--served", str(run)]) == 1  # could not decide is not "held"
    out = capsys.readouterr().out
    assert "not checked: the sweep measured no concurrency 2 (it swept 1, 4, 16)" in out
    check = json.loads((sweep / "schedule.json").read_text())["served"][0]["checks"][0]
    assert check["held"] is None


def test_the_k_an_arm_drafts_at_the_runs_concurrency():
    schedule = {"concurrency": 4, "k": 1}  # the schedule's choice at the run's concurrency
    assert served_k(vllm(2, TABLE), 2, schedule) == (2, "per-batch-size table")
    assert served_k(vllm(2, TABLE), 4, schedule) == (1, "per-batch-size table")
    assert served_k(vllm(2, TABLE), 64, schedule) == (1, "per-batch-size table")  # vLLM carries the last k on
    adaptive = {**arm_config("sglang", 3), "server": {"engine": "sglang", "extra_args": ["--speculative-adaptive"]}}
    assert served_k(adaptive, 4, schedule) == (1, "adaptive")
    assert served_k(vllm(3), 4, schedule) == (3, "static")


def test_a_table_that_drafts_nothing_there_is_not_checked(tmp_path, capsys):
    sweep = scheduled(tmp_path)
    run = served_run(tmp_path, 16, {"baseline": (1500, arm_config("vllm", None)),
                                    "eagle3": (1500, vllm(2, [[1, 8, 2], [9, 16, 0]]))})
    assert cli.main(["schedule", str(sweep), "--served", str(run)]) == 1
    assert "it drafts nothing at concurrency 16 (k=0 there: plain decoding)" in capsys.readouterr().out


@pytest.mark.parametrize("case, says", [
    ("no schedule", "schedule.json cannot be read"),
    ("no plain arm", "has no measured plain arm and speculative arm beside it"),
    ("not a record", "is not a run record"),
])
def test_bad_input_is_one_sentence_with_exit_status_4(tmp_path, capsys, case, says):
    sweep = write_sweep(tmp_path, CLEAR, engine="vllm") if case == "no schedule" else scheduled(tmp_path)
    run = served_run(tmp_path, 1, {"baseline": (200, arm_config("vllm", None)), "eagle3": (400, vllm(2))})
    if case == "no plain arm":
        data = json.loads((run / "results.json").read_text())
        (run / "results.json").write_text(json.dumps({**data, "plain_arm": None}))
    if case == "not a record":
        run = tmp_path / "empty"
        run.mkdir()
    before = (sweep / "schedule.json").read_text() if (sweep / "schedule.json").exists() else None
    capsys.readouterr()
    assert cli.main(["schedule", str(sweep), "--served", str(run)]) == 4
    err = capsys.readouterr().err
    assert err.startswith("specgate: ") and says in err and err.count("\n") == 1, err
    after = (sweep / "schedule.json").read_text() if (sweep / "schedule.json").exists() else None
    assert after == before  # nothing written
