"""Secrets as a type (harness/secrets.py): decided by where a value sits when the config
is composed, written everywhere as a keyed fingerprint, revealed only to the server; what
specgate did not write itself (a server's log, a launcher's, a traceback) scrubbed of every
secret in every encoding (harness/record/secrets.py). Nothing that is not a secret changes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from harness.run.compose import compose
from harness.secrets import BOOK, FINGERPRINT, Policy, fingerprint, masked_override, secret_name
from harness.engines import ENGINES
from harness.record.secrets import Redactor, readable_env, terminal_text
from harness.servers.processes import ServerProcess, environment_mismatches
from tests.support.runs import run_suites, specgate

ROOT = Path(__file__).resolve().parents[2]
QUICK = ["+exp=sim_smoke", "backend=process", "telemetry=off", "workload.num_prompts=2", "workload.max_tokens=16"]


@pytest.mark.parametrize("name, secret", [
    ("HF_TOKEN", True), ("--api-key", True), ("--api-keys", True), ("--tokens", True), ("--secrets", True),
    ("--passwords", True), ("--hf-token", True), ("AWS_SECRET_ACCESS_KEY", True), ("GH_PAT", True),
    ("db.password", True), ("Authorization", True), ("api_key", True), ("OPENAI_API_KEY", True),
    ("max_tokens", False), ("--sim-prefill-ms-per-token", False), ("verify_per_token_ms", False),
    ("completion_tokens", False), ("num_draft_tokens", False), ("--speculative-num-draft-tokens", False), ("--tokenizer", False), ("PWD", False),
    ("SSH_AUTH_SOCK", False),
    # a plural after any other word counts tokens (the simulator's usage line once lost its metavar)
    ("--sim-compute-knee-tokens", False), ("chunked_prefill_tokens", False),
    ("API_TOKENS", True), ("GITHUB_TOKENS", True), ("refresh_tokens", True),
])
def test_what_counts_as_a_secret_name(name, secret):
    assert secret_name(name) is secret


# --- by location, deny by default ------------------------------------------------------


PLANTED = ["server.extra_args=[--api-keys,K1plural,K2plural,--tokens,tokA,"
           "--model-loader-extra-config,'{\"token\": \"jsonTOK9\", \"load_format\": \"pt\"}',--mem-fraction-static,0.85]",
           "+build.build_args.GH_PAT=ghpBUILD7", "+server.env.SHORT=ab", "+server.env.NCCL_ALGO=Ring",
           '+server.env.DB_PASSWORD="correct horse battery staple"', "+server.env.APP_MODE=baseline",
           "+server.env.MY_MODEL=sim/model"]
PLANTED_VALUES = ("K1plural", "K2plural", "tokA", "jsonTOK9", "ghpBUILD7", "horse battery staple")


def test_a_secret_is_decided_by_where_it_sits_and_becomes_its_fingerprint():
    cfg = compose([*QUICK, *PLANTED]).arm("baseline").cfg
    args = list(cfg.server.extra_args)
    assert args[0] == "--api-keys" and all(FINGERPRINT.fullmatch(a) for a in args[1:3])  # every value up to the next flag
    assert args[3] == "--tokens" and FINGERPRINT.fullmatch(args[4])
    inner = json.loads(args[6])
    assert FINGERPRINT.fullmatch(inner["token"]) and FINGERPRINT.fullmatch(inner["load_format"])  # keys kept
    assert args[7:] == ["--mem-fraction-static", "0.85"]  # the engine declares this flag readable
    assert FINGERPRINT.fullmatch(cfg.build.build_args.GH_PAT)
    env = cfg.server.env
    assert env.NCCL_ALGO == "Ring"
    for name in ("SHORT", "DB_PASSWORD", "APP_MODE", "MY_MODEL"):  # short ones too
        assert FINGERPRINT.fullmatch(env[name]), name
    assert env.SHORT == fingerprint("ab") and env.APP_MODE == fingerprint("baseline")
    # ... and nothing else: the model path, arm and experiment names are what they were
    assert cfg.server.model_path == "sim/model"


def test_a_url_user_alone_and_secret_query_parameters_are_secrets():
    policy = Policy()
    assert policy.mask_text("http://ghp_TOKEN@127.0.0.1:8000/x?api_key=q123&model=m", "url") == \
        f"http://{fingerprint('ghp_TOKEN')}@127.0.0.1:8000/x?api_key={fingerprint('q123')}&model=m"
    cfg = compose([*QUICK, "backend=attach", "backend.url=http://ghp_TOKEN@127.0.0.1:1"]).arm("baseline").cfg
    assert cfg.backend.url == f"http://{fingerprint('ghp_TOKEN')}@127.0.0.1:1"


def test_an_unknown_flag_of_any_engine_hides_its_value_and_a_readable_one_shows():
    for engine in ENGINES.values():
        policy = Policy.for_engine(engine)
        assert policy.mask_args(["--new-flag", "v1", "--port", "8000"], "x")[1] == fingerprint("v1")
        assert policy.mask_args(["--port", "8000"], "x") == ["--port", "8000"] or engine.name not in ("sglang", "vllm", "sim")
        assert policy.mask_args(["positional"], "x") == [fingerprint("positional")]  # before any flag: deny
        assert policy.mask_args(["--api-key=k"], "x") == [f"--api-key={fingerprint('k')}"]
        assert policy.mask_args(["--api-key k9 k8"], "x") == [f"--api-key {fingerprint('k9 k8')}"]  # one token, a space


def test_every_flag_an_engine_writes_itself_is_readable():
    """The engines' own launch flags must read in the record (nothing not secret is hidden)."""
    for exp in ("sim_smoke", "vllm_cpu_eagle3"):
        experiment = compose([f"+exp={exp}"])
        for arm in experiment.arms:
            engine = ENGINES[arm.cfg.server.engine]
            args = engine.args(arm.typed, 8000, "127.0.0.1")
            assert not [a for a in args if FINGERPRINT.search(a)], (exp, arm.name, args)
            assert Policy.for_engine(engine).mask_args(args, "x") == args, (exp, arm.name)


def test_the_values_go_back_only_to_the_server():
    cfg = compose([*QUICK, *PLANTED]).arm("baseline").cfg
    args = BOOK.reveal(list(cfg.server.extra_args))
    assert args[:5] == ["--api-keys", "K1plural", "K2plural", "--tokens", "tokA"]
    assert json.loads(args[6]) == {"token": "jsonTOK9", "load_format": "pt"}
    assert BOOK.reveal(dict(cfg.server.env))["DB_PASSWORD"] == "correct horse battery staple"
    assert BOOK.reveal(dict(cfg.build.build_args)) == {"GH_PAT": "ghpBUILD7"}


def test_a_fingerprint_is_keyed_stable_and_kept_apart_from_the_key(tmp_path, monkeypatch):
    from harness import secrets
    assert fingerprint("same value") == fingerprint("same value") != fingerprint("other value")
    assert "same value" not in fingerprint("same value")
    monkeypatch.setattr(secrets, "_KEY", [])
    monkeypatch.delenv(secrets.KEY_ENV, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    first = fingerprint("same value")
    key_file = tmp_path / "specgate" / "fingerprint.key"
    assert oct(key_file.stat().st_mode & 0o777) == "0o600"
    monkeypatch.setattr(secrets, "_KEY", [])
    assert fingerprint("same value") == first  # the same key next time: runs compare
    monkeypatch.setattr(secrets, "_KEY", [])
    monkeypatch.setenv(secrets.KEY_ENV, "another key")
    assert fingerprint("same value") != first  # without the key, a guess cannot be checked


def test_overrides_are_shown_with_fingerprints_and_nothing_else_changed():
    experiment = compose([*QUICK, *PLANTED])
    shown = " ".join(experiment.shown_overrides)
    for value in PLANTED_VALUES:
        assert value not in shown, shown
    assert "+server.env.NCCL_ALGO=Ring" in shown and "--mem-fraction-static,0.85" in shown
    assert f"+server.env.SHORT={fingerprint('ab')}" in shown
    policy = Policy.for_engine(ENGINES["sim"])
    assert masked_override("workload.concurrency=4", policy) == "workload.concurrency=4"
    assert masked_override("+server.env.FOO_CFG=K\\ sp", policy) == f"+server.env.FOO_CFG={fingerprint('K sp')}"
    # a sweep's values, each of them, and a whole command line as a record holds it
    assert masked_override("+server.env.APP=va1,vb2", policy) == \
        f"+server.env.APP={fingerprint('va1')},{fingerprint('vb2')}"
    assert experiment.shown_command(["specgate", "sweep", "+server.env.SHORT=ab", "-k", "x=y", "--junitxml=j.xml"]) == \
        ["specgate", "sweep", f"+server.env.SHORT={fingerprint('ab')}", "-k", "x=y", "--junitxml=j.xml"]


# --- free text: every secret in every encoding, and nothing else -------------------------


def test_free_text_loses_every_encoding_of_a_secret():
    compose([*QUICK, *PLANTED, '+server.env.ODD="a\\"b c/d"'])
    r = Redactor()
    text = ("hydra: +server.env.DB_PASSWORD=correct\\ horse\\ battery\\ staple; json {\"x\": \"a\\\"b c/d\"}; "
            "url correct%20horse%20battery%20staple and correct+horse+battery+staple; "
            "shell 'correct horse battery staple'; repr ['K1plural', 'jsonTOK9']; env APP_MODE=baseline")
    out = r.text(text)
    for value in (*PLANTED_VALUES, "correct", 'a\\"b', "APP_MODE=baseline"):
        assert value not in out, out


def test_values_the_record_shows_anyway_are_never_blanked():
    experiment = compose([*QUICK, *PLANTED])
    r = Redactor()
    line = f"# {experiment.name}: arms baseline, eagle3 on sim/model"
    assert r.text(line) == line
    assert r.data({"experiment": "sim_smoke", "arm": "baseline", "model": "sim/model"}) == \
        {"experiment": "sim_smoke", "arm": "baseline", "model": "sim/model"}
    # a word specgate writes itself is not hunted as a bare word; beside its name it goes
    compose([*QUICK, "+server.env.APP_STATE=throughput", "+server.env.APP_VERDICT=passed"])
    sentence = "output_tok_s throughput: passed (the speedup gate passed)"
    assert r.text(sentence) == sentence
    assert "throughput" not in r.text("server: APP_STATE=throughput")


def test_shapes_of_a_secret_in_foreign_text():
    r = Redactor()
    text = ("launch --api-key sk-extra-999 k2-extra-888 --hf-token=hf_inline_000 --sim-prefill-ms-per-token 0.02 "
            "url http://admin:pw_s3cret@127.0.0.1:8000/v1?api_key=qk_123456&model=m http://ghpUSERONLY@host/ "
            "Authorization: Bearer tok_abcdef X-API-Key: xk_987654 HF_TOKEN=hf_env_111 max_tokens=500 "
            "{'hf_token': 'hf_dict_222'}")
    out = r.text(text)
    for secret in ("sk-extra-999", "k2-extra-888", "hf_inline_000", "admin:pw_s3cret", "qk_123456", "ghpUSERONLY",
                   "tok_abcdef", "xk_987654", "hf_env_111", "hf_dict_222"):
        assert secret not in out, out
    for kept in ("--sim-prefill-ms-per-token 0.02", "@127.0.0.1:8000/v1", "model=m", "max_tokens=500"):
        assert kept in out, out
    prose = "no generation-token and verify-call counters; pre-token count=3"
    assert r.text(prose) == prose
    counts = "SimModel(compute_knee_tokens=None, prompt_tokens=12, api_key_count=3) {'num_tokens': 4.5e3}"
    assert r.text(counts) == counts  # a number or null after a secret-like name is a count


def test_data_read_back_is_hidden_by_location_without_hunting_its_values():
    r = Redactor(readable=["MY_*"])
    env = {"HOME": "/root", "NCCL_ALGO": "Ring", "MY_FLAG": "1", "MY_TOKEN": "abc", "VLLM_API_KEY": "vk"}
    shown = r.data({"environment": env}, None)["environment"]
    assert shown == {"HOME": fingerprint("/root"), "NCCL_ALGO": "Ring", "MY_FLAG": "1",
                     "MY_TOKEN": fingerprint("abc"), "VLLM_API_KEY": fingerprint("vk")}
    assert r.text("/root/models") == "/root/models"  # a process's variable is not hunted in all text
    assert r.data(["--api-key", "k1", "--port", "8000"]) == ["--api-key", fingerprint("k1"), "--port", "8000"]


def test_a_command_line_read_back_holds_the_fingerprints_the_config_does():
    cfg = compose([*QUICK, *PLANTED]).arm("baseline").cfg
    process = ServerProcess(pid=1, ppid=0, cmdline=["python", "-m", "x", *BOOK.reveal(list(cfg.server.extra_args))])
    assert process.command == " ".join(["python", "-m", "x", *cfg.server.extra_args])
    assert "tokA" not in process.describe() and "jsonTOK9" not in process.describe()


def test_the_environment_check_compares_fingerprints():
    process = ServerProcess(pid=1, ppid=0, cmdline=["server"], environ={"APP_MODE": "baseline", "NCCL_ALGO": "Ring"})
    assert environment_mismatches([process], {"APP_MODE": fingerprint("baseline"), "NCCL_ALGO": "Ring"}) == []
    (problem,) = environment_mismatches([process], {"APP_MODE": fingerprint("other")})
    assert "baseline" not in problem and fingerprint("baseline") in problem


@pytest.mark.parametrize("override, secrets", [
    ("server.extra_args=[--api-key,skPARSE-123456", ["skPARSE-123456"]),  # unclosed: Hydra cannot parse it
    ("server.extra_args=[--api-keys,k1-aaaaaa,k2-bbbbbb]", ["k1-aaaaaa", "k2-bbbbbb"]),
    ('+server.env.DB_PASSWORD="correct horse battery staple"', ["correct horse battery staple"]),
    ("+server.env.HF_TOKEN=hf_aaaaaa,hf_bbbbbb", ["hf_aaaaaa", "hf_bbbbbb"]),  # a sweep over two tokens
    ("b:+server.env.APP_SECRETISH=sideB_value", ["sideB_value"]),  # an A/B side's, prefix and all
    ("b:+build.build_args.GH_PAT=sideB_pat9", ["sideB_pat9"]),
])
def test_the_terminal_loses_the_secrets_of_the_command_line(override, secrets):
    message = terminal_text(f"cannot parse the override: no viable alternative at input '{override}'", [override])
    for secret in secrets:
        assert secret not in message, message


def test_a_secret_override_shows_its_fingerprint_in_a_folder_name():
    r = Redactor()
    assert r.override_label("+server.env.HF_TOKEN=ab") == f"+server.env.HF_TOKEN={fingerprint('ab')}"
    assert r.override_label("workload.concurrency=4") == "workload.concurrency=4"
    assert r.override_label("+server.env.NCCL_ALGO=Ring") == "+server.env.NCCL_ALGO=Ring"


def test_a_replay_of_a_record_with_secrets_asks_for_them(tmp_path):
    from harness.config.compose import ConfigError
    from harness.record.recorder import Recorder
    from harness.run.replay import replay_experiment

    experiment = compose([*QUICK, f"record.root={tmp_path}", "+server.env.HF_TOKEN=hf_replay_1"])
    recorder = Recorder(experiment)
    recorder.write_data({"arms": {}})
    BOOK.by_fingerprint.pop(fingerprint("hf_replay_1"))  # a new process: it was never given the value
    with pytest.raises(ConfigError, match=r"server\.env\.HF_TOKEN.*give each value again"):
        replay_experiment(recorder.path, [], ROOT / "conf")
    replayed, _ = replay_experiment(recorder.path, ["server.env.HF_TOKEN=hf_replay_1"], ROOT / "conf")
    assert replayed.arm("baseline").cfg.server.env.HF_TOKEN == fingerprint("hf_replay_1")


def test_record_readable_env_extends_the_allow_list():
    assert not readable_env("VLLM_API_KEY") and readable_env("NCCL_ALGO") and not readable_env("DB_PASSWORD")
    assert readable_env("MY_FLAG", ["MY_*"]) and not readable_env("MY_TOKEN", ["MY_*"])  # a secret name never reads


def test_the_docs_say_the_design_the_code_has():
    import re
    from harness.record.secrets import readable_patterns
    READABLE_ENV = readable_patterns()
    docs = (ROOT / "docs/record.md").read_text()
    section = docs[docs.index("## No secrets"):docs.index("## Per-request data")]
    named = set(re.findall(r"`([A-Z][A-Z_]*_\*)`", section))
    assert named and named <= set(READABLE_ENV), named - set(READABLE_ENV)
    for claim in ("secret:", "fingerprint", "build_args", "readable_flags", "readable_json_keys", "SPECGATE_FINGERPRINT_KEY",
                  "record.readable_env"):
        assert claim in section, claim
    readme = (ROOT / "README.md").read_text()
    assert {"NCCL_*", "CUDA_*"} <= set(re.findall(r"`([A-Z][A-Z_]*_\*)`", readme)) <= set(READABLE_ENV)
    assert "fingerprint" in readme and "record.readable_env" in readme


# --- through every way out, grepping every byte --------------------------------------------


def every_written_file(*roots: Path) -> list[Path]:
    return [p for root in roots for p in ([root] if root.is_file() else root.rglob("*")) if p.is_file()]


def assert_nowhere(values, *roots: Path, text: str = "") -> None:
    for value in values:
        assert value not in text, f"{value} reached the terminal"
        for path in every_written_file(*roots):
            assert value.encode() not in path.read_bytes(), f"{value} leaked into {path}"
            assert value not in str(path), f"{value} names {path}"


@pytest.mark.slow
def test_secrets_of_every_class_reach_no_byte_of_a_run_and_harmless_values_stay_readable(tmp_path):
    junit, step = tmp_path / "junit.xml", tmp_path / "step.md"
    proc = run_suites(*QUICK, *PLANTED, f"record.root={tmp_path / 'runs'}", "-k", "baseline and (requests_succeed or environment)",
                      f"--junitxml={junit}", env={"GITHUB_STEP_SUMMARY": str(step)})
    assert proc.returncode == 0, proc.stdout[-3000:]
    record = (tmp_path / "runs" / "latest").resolve()
    report = specgate("report", str(record), timeout=120)
    assert report.returncode == 0, report.stderr
    assert_nowhere(PLANTED_VALUES, record, junit, step, text=proc.stdout + proc.stderr + report.stdout + report.stderr)
    log = (record / "arms" / "baseline" / "server.log").read_text()
    assert fingerprint("K1plural") in log  # the simulator logged its unknown flags, scrubbed as written
    assert oct((record / "arms" / "baseline" / "server.log").stat().st_mode & 0o777) == "0o600"
    config = (record / "config.yaml").read_text()
    assert "NCCL_ALGO: Ring" in config and f"DB_PASSWORD: {fingerprint('correct horse battery staple')}" in config
    results = json.loads((record / "results.json").read_text())
    assert results["experiment"] == "sim_smoke" and "baseline" in results["arms"]  # harmless values readable
    assert results["arms"]["baseline"]["identity"]["server.model"] == "sim/model"
    assert "--sim-prefill-ms-per-token" in json.dumps(results)
    summary = (record / "summary.md").read_text()
    assert "sim_smoke" in summary and "baseline" in summary
    # the identity check still works: another model against this record is refused (exit 4)
    other = run_suites(*QUICK, *PLANTED, "server.model_path=other/model", f"gate.baseline={record}",
                       f"record.root={tmp_path / 'other'}", "-k", "baseline and (requests_succeed or baseline)")
    assert other.returncode == 4, other.stdout[-3000:]
    same = run_suites(*QUICK, *PLANTED, f"gate.baseline={record}", f"record.root={tmp_path / 'same'}",
                      "-k", "baseline and (requests_succeed or baseline)", "gate.inconclusive=pass", "gate.undecided=warn")
    assert same.returncode == 0, same.stdout[-3000:]


@pytest.mark.slow
def test_a_url_user_or_password_of_an_attached_server_reaches_no_byte(tmp_path):
    from harness.servers.process import ProcessServer

    cfg = compose([*QUICK]).arm("baseline").typed
    server = ProcessServer("baseline", cfg, tmp_path / "sim.log")
    server.start()
    try:
        port = server.base_url.rsplit(":", 1)[1]
        junit = tmp_path / "junit.xml"
        runs = []
        for userinfo in ("ghpUSERONLY77", "admin:pw_s3cret_77"):
            runs.append(run_suites(*QUICK, "backend=attach", f"backend.url=http://{userinfo}@127.0.0.1:{port}",
                                   f"record.root={tmp_path / 'runs'}", "-k", "baseline and requests_succeed",
                                   f"--junitxml={junit}"))
            assert runs[-1].returncode == 0, runs[-1].stdout[-3000:]  # the client got the real URL: it connected
            assert_nowhere(["ghpUSERONLY77", "pw_s3cret_77"], tmp_path / "runs", junit,
                           text=runs[-1].stdout + runs[-1].stderr)
    finally:
        server.stop()


@pytest.mark.slow
def test_secrets_reach_no_byte_of_show_a_hydra_error_a_sweep_and_a_capacity_search(tmp_path):
    shown = specgate("show", *QUICK, *PLANTED)
    assert shown.returncode == 0 and "NCCL_ALGO: Ring" in shown.stdout, shown.stderr
    assert "experiment: sim_smoke" in shown.stdout and "model_path: sim/model" in shown.stdout
    assert_nowhere(PLANTED_VALUES, text=shown.stdout + shown.stderr)
    broken = run_suites(*QUICK, "server.extra_args=[--api-key,skPARSE-123456", f"record.root={tmp_path / 'r2'}",
                        refused=True)
    assert broken.returncode == 4 and "cannot parse the override" in broken.stderr, broken.stderr
    assert_nowhere(["skPARSE-123456"], text=broken.stdout + broken.stderr)
    swept = ["hf_swept_aaaaaa", "hf_swept_bbbbbb"]
    done = specgate("sweep", *QUICK, *PLANTED, f"+server.env.HF_TOKEN={','.join(swept)}",
                    f"record.root={tmp_path / 'sweeps'}", "-k", "baseline and requests_succeed", "--no-progress",
                    timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (sweep_dir,) = (tmp_path / "sweeps").iterdir()
    labels = sorted(p.name for p in (sweep_dir / "points").iterdir())
    assert labels == sorted(f"{i}_HF_TOKEN-{fingerprint(v).replace(':', '_')}" for i, v in enumerate(swept)), labels
    assert_nowhere([*PLANTED_VALUES, *swept], sweep_dir, text=done.stdout + done.stderr)
    searched = specgate("capacity", "+exp=sim_capacity", "backend=process", "capacity.max=2", "arms={baseline: []}",
                        *PLANTED[:5], f"record.root={tmp_path / 'capacity'}", timeout=600)
    assert searched.returncode in (0, 1), searched.stdout[-3000:] + searched.stderr[-3000:]
    assert_nowhere(PLANTED_VALUES, tmp_path / "capacity", text=searched.stdout + searched.stderr)


@pytest.mark.slow
def test_secrets_reach_no_byte_of_an_ab_or_a_calibration(tmp_path):
    side = ["b:+server.env.SIDE_B_SECRET=sideBvalue77", "b:+build.build_args.GH_PAT=sideBpat88"]
    # what is judged is no question here: two busy rounds of one build may leave a change undecided
    done = specgate("ab", *QUICK, *PLANTED[:5], *side, "ab.rounds=2", "gate.undecided=warn",
                    f"record.root={tmp_path / 'ab'}", timeout=600)
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    assert fingerprint("sideBvalue77") in done.stdout  # the side's line shows the fingerprint
    assert_nowhere([*PLANTED_VALUES, "sideBvalue77", "sideBpat88"], tmp_path / "ab", text=done.stdout + done.stderr)
    refused = specgate("ab", *QUICK, "b:+server.env.SIDE_B_SECRET=sideBvalue77", "b:workload.nope=sideBbad99",
                       timeout=120)
    assert refused.returncode == 4
    assert_nowhere(["sideBvalue77"], text=refused.stdout + refused.stderr)
    calibrated = specgate("calibrate", *QUICK, *PLANTED[:5], "calibrate.runs=3", "-k", "baseline and requests_succeed",
                          f"record.root={tmp_path / 'cal'}", timeout=600)
    assert calibrated.returncode in (0, 1), calibrated.stdout[-3000:] + calibrated.stderr[-3000:]
    assert_nowhere(PLANTED_VALUES, tmp_path / "cal", text=calibrated.stdout + calibrated.stderr)


@pytest.mark.parametrize("exp", sorted(p.stem for p in (Path(__file__).parents[2] / "conf" / "exp").glob("*.yaml")))
def test_a_shipped_experiment_hides_nothing_of_its_own(exp):
    """The shipped configs hold no secret, so every value they set stays readable: a knob left
    off the allow-lists (vLLM's TORCHDYNAMO_DISABLE=1) is hidden by location, and its value,
    "1", then hid every "1" of the server's command line read back (--tensor-parallel-size)."""
    for arm in compose([f"+exp={exp}"]).arms:
        text = json.dumps(OmegaConf.to_container(arm.cfg, resolve=True), default=str)
        assert not FINGERPRINT.search(text), (exp, arm.name, FINGERPRINT.findall(text), text[:300])
