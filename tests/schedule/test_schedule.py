"""`specgate schedule` on sweeps written by hand (tests/schedule/fake_sweep.py): the choice per
concurrency, its interval and status, the batch ranges, the engines' forms, and bad input."""

from __future__ import annotations

import json

import pytest

from harness import cli
from harness.schedule.choice import choose
from harness.schedule.grid import read_grid
from harness.schedule.make import make_schedule
from harness.schedule.ranges import batch_ranges, boundary
from tests.schedule.fake_sweep import write_sweep

# (concurrency, k) -> (plain tok/s, speculative tok/s): k=2 pays most at 1, k=1 at 4, plain at 16
CLEAR = {(1, 1): (200, 300), (1, 2): (200, 400), (4, 1): (600, 780), (4, 2): (600, 630),
         (16, 1): (1500, 1050), (16, 2): (1500, 900)}


def schedule_files(sweep):
    return sorted(p.name for p in sweep.iterdir() if p.is_file() and p.name != "sweep.json")


def test_each_concurrency_gets_the_fastest_k_or_plain_decided_with_its_interval(tmp_path, capsys):
    sweep = write_sweep(tmp_path, CLEAR)
    assert cli.main(["schedule", str(sweep)]) == 0
    data = json.loads((sweep / "schedule.json").read_text())
    picked = {c["concurrency"]: (c["k"], c["status"]) for c in data["concurrencies"]}
    assert picked == {1: (2, "decided"), 4: (1, "decided"), 16: (0, "decided")}
    assert data["plain_wins_at"] == [16] and data["k_values"] == [1, 2]
    one = data["concurrencies"][0]
    assert one["speedup"] == pytest.approx(2.0) and one["interval"][0] < 2.0 < one["interval"][1]
    assert one["interval"][0] > 1.5  # k=1's 1.5x lies below it: the windows' Poisson noise is a few %
    assert one["best_over"]["1"]["ratio"] == pytest.approx(2.0 / 1.5, rel=1e-3)
    assert one["best_over"]["1"]["interval"][0] > 1.0 and one["best_over"]["0"]["beaten"]
    out = capsys.readouterr().out
    assert "concurrency 1: k=2 (2.00x over plain), decided" in out
    assert "concurrency 16: plain decoding, decided" in out
    assert schedule_files(sweep) == ["schedule.json", "schedule.md", "sglang_adaptive.json"]  # both real engines
    summary = (sweep / "schedule.md").read_text()
    assert "| 1 | **k=2** | decided |" in summary and "Plain decoding wins at concurrency 16." in summary


def test_the_ranges_split_between_swept_concurrencies_on_a_log_scale():
    assert boundary(1, 4) == 2 and boundary(4, 16) == 8 and boundary(1, 2) == 1 and boundary(4, 8) == 5


def test_the_schedule_in_vllms_and_sglangs_forms(tmp_path):
    sweep = write_sweep(tmp_path, CLEAR, engine="vllm")
    data, written = make_schedule(sweep)
    assert data["ranges"] == [{"first": 1, "last": 2, "k": 2}, {"first": 3, "last": 8, "k": 1},
                              {"first": 9, "last": 16, "k": 0}]
    vllm = data["forms"]["vllm"]
    assert vllm["speculative_config"]["num_speculative_tokens"] == 2  # each k is capped at it
    assert vllm["speculative_config"]["num_speculative_tokens_per_batch_size"] == [[1, 2, 2], [3, 8, 1], [9, 16, 0]]
    assert vllm["args"][0] == "--speculative-config" and json.loads(vllm["args"][1]) == vllm["speculative_config"]
    assert vllm["overrides"] == ["drafter.num_steps=2",
                                 "++drafter.vllm_speculative_config.num_speculative_tokens_per_batch_size="
                                 "[[1,2,2],[3,8,1],[9,16,0]]"]
    sglang = data["forms"]["sglang"]
    assert sglang["files"]["sglang_adaptive.json"] == {"1": {"candidate_steps": [2]}, "3": {"candidate_steps": [1]},
                                         "9": {"candidate_steps": [0]}}
    assert "--speculative-adaptive" in sglang["args"] and sglang["args"][-1] == "sglang_adaptive.json"
    assert sglang["args"][sglang["args"].index("--speculative-num-steps") + 1] == "2"
    assert json.loads((sweep / "sglang_adaptive.json").read_text()) == sglang["files"]["sglang_adaptive.json"]
    assert sorted(p.name for p in written) == ["schedule.json", "schedule.md", "sglang_adaptive.json"]


def test_sglang_serves_an_ngram_schedule_as_one_server_per_range(tmp_path):
    from harness.config.schema import DrafterConfig
    from harness.engines import ENGINES

    drafter = DrafterConfig(name="ngram_k3", algorithm="NGRAM", model_path=None, num_steps=3, eagle_topk=1,
                            vllm_speculative_config={"prompt_lookup_max": 4})
    form = ENGINES["sglang"].schedule_form(drafter, [(1, 2, 3), (3, 8, 0)])
    assert [(s["first"], s["last"], s["k"]) for s in form["servers"]] == [(1, 2, 3), (3, 8, 0)]
    assert form["servers"][1]["args"] == ["--max-running-requests", "8"]  # k=0: no speculative flags
    assert "one server per batch-size range" in form["note"]
    vllm = ENGINES["vllm"].schedule_form(drafter, [(1, 2, 3), (3, 8, 0)])
    assert vllm["speculative_config"] == {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4,
                                          "num_speculative_tokens_per_batch_size": [[1, 2, 3], [3, 8, 0]]}
    assert ENGINES["vllm"].schedule_form(drafter, [(1, 8, 0)])["args"] == []  # plain everywhere


def test_candidates_within_noise_are_said_so_not_decided(tmp_path):
    sweep = write_sweep(tmp_path, {(1, 1): (200, 300), (1, 2): (200, 303), (4, 1): (600, 610), (4, 2): (600, 400)})
    choices = {c.concurrency: c for c in choose(read_grid(sweep))}
    assert choices[1].status == "within_noise" and choices[1].best.k == 2 and choices[1].ties == [1]
    assert choices[4].status == "within_noise" and choices[4].ties == [0]  # 1.02x over plain is noise
    assert "within noise of k=1" in choices[1].words() and "within noise of plain" in choices[4].words()


@pytest.mark.parametrize("case, words", [
    ("not a sweep", "is not a sweep's folder (no readable sweep.json)"),
    ("one k", "sweeps one k only (eagle3 at k=2); a schedule chooses between k values"),
    ("no plain arm", "has no plain_arm, so no speedup and no 'plain wins'"),
    ("failed point", "has points that did not run to the end (1_concurrency-1_num_steps-2)"),
    ("unfinished", "is a sweep that did not finish (status interrupted)"),
])
def test_bad_input_is_one_sentence_and_nothing_written(tmp_path, capsys, case, words):
    if case == "not a sweep":
        sweep = tmp_path
    elif case == "one k":
        sweep = write_sweep(tmp_path, {(1, 2): (200, 400), (4, 2): (600, 630)})
    elif case == "no plain arm":
        sweep = write_sweep(tmp_path, CLEAR, plain_arm=None)
    elif case == "unfinished":
        sweep = write_sweep(tmp_path, CLEAR, status="interrupted")
    else:
        sweep = write_sweep(tmp_path, CLEAR)
        data = json.loads((sweep / "sweep.json").read_text())
        data["points"][1]["status"] = "no_record"
        (sweep / "sweep.json").write_text(json.dumps(data))
    assert cli.main(["schedule", str(sweep)]) == 4
    err = capsys.readouterr().err.strip()
    assert words in err and err.count("\n") == 0 and err.startswith("specgate: ")
    assert schedule_files(sweep) == [], "a refused schedule wrote something"


def test_an_arm_that_was_not_measured_is_refused(tmp_path, capsys):
    sweep = write_sweep(tmp_path, CLEAR)
    data = json.loads((sweep / "sweep.json").read_text())
    data["points"][2]["arms"]["eagle3"]["status"] = "server_failed"
    (sweep / "sweep.json").write_text(json.dumps(data))
    assert cli.main(["schedule", str(sweep), "--arm", "eagle3"]) == 4
    assert "point 2_concurrency-4_num_steps-1's arm 'eagle3' was not measured (status server_failed)" in capsys.readouterr().err
    assert cli.main(["schedule", str(sweep), "--arm", "baseline"]) == 4
    assert "--arm names the plain arm 'baseline', which drafts nothing" in capsys.readouterr().err
    assert schedule_files(sweep) == []


def test_the_default_confidence_is_the_gates_and_a_bad_one_is_refused(tmp_path, capsys):
    from harness.config.schema import GateConfig

    assert cli.parser().parse_args(["schedule", "x"]).confidence == GateConfig().confidence
    sweep = write_sweep(tmp_path, CLEAR)
    assert cli.main(["schedule", str(sweep), "--confidence", "1.5"]) == 4
    assert "--confidence is a one-sided confidence in [0.5, 1)" in capsys.readouterr().err
    assert schedule_files(sweep) == []


def test_the_vllm_forms_overrides_serve_the_table_back(tmp_path):
    """The overrides the vLLM form gives, on vllm_cpu_schedule: the server's own
    --speculative-config carries the table, as JSON vLLM parses."""
    from harness.run.compose import compose
    from harness.engines import ENGINES

    sweep = write_sweep(tmp_path, CLEAR, engine="vllm")
    data, _ = make_schedule(sweep)
    cfg = compose(["+exp=vllm_cpu_schedule", *data["forms"]["vllm"]["overrides"]]).arm("ngram").typed
    args = ENGINES["vllm"].args(cfg, 8000, "127.0.0.1")
    config = json.loads(args[args.index("--speculative-config") + 1])
    assert config == {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 4, "prompt_lookup_min": 2,
                      "num_speculative_tokens_per_batch_size": [[1, 2, 2], [3, 8, 1], [9, 16, 0]]}
    # plain decoding everywhere: the same arm served without speculation
    plain = compose(["+exp=vllm_cpu_schedule", "drafter=none"]).arm("ngram").typed
    assert "--speculative-config" not in ENGINES["vllm"].args(plain, 8000, "127.0.0.1")


@pytest.mark.engine_setup  # the installed vLLM (scripts/ensure_vllm_cpu.sh)
def test_vllms_own_code_reads_the_written_table_as_the_schedule(tmp_path):
    """The table through the installed vLLM's own validator and lookup (the scheduler's dense
    batch size -> k table): every batch size gets the k its range says, 17 and on the last."""
    import subprocess
    from pathlib import Path

    from harness.run.compose import compose

    python = Path(compose(["+exp=vllm_cpu_schedule"]).arm("ngram").cfg.build.python)
    if not python.exists():
        pytest.skip(f"no vLLM venv at {python} (make install)")
    data, _ = make_schedule(write_sweep(tmp_path, CLEAR, engine="vllm"))
    config = data["forms"]["vllm"]["speculative_config"]
    code = ("import json, sys; from vllm.v1.spec_decode.dynamic.utils import build_dynamic_sd_schedule_lookup as b; "
            "c = json.loads(sys.argv[1]); print(json.dumps(b(c['num_speculative_tokens_per_batch_size'], "
            "vllm_max_batch_size=20, vllm_num_speculative_tokens=c['num_speculative_tokens'])))")
    done = subprocess.run([str(python), "-c", code, json.dumps(config)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)[1:] == [2, 2] + [1] * 6 + [0] * 12
