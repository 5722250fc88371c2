"""One redaction policy: secrets planted through every path (CLI flags in both forms, env,
URL userinfo and query, headers, what the server prints) never reach the record, the
server log, the summary, the step summary, JUnit or the HTML report; nothing else is
redacted."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.config.compose import compose
from harness.record.secrets import REDACTED, Redactor, secret_name
from harness.servers.process import ProcessServer
from tests.support.runs import run_suites, specgate

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name, secret", [
    ("HF_TOKEN", True), ("--api-key", True), ("--hf-token", True), ("AWS_SECRET_ACCESS_KEY", True),
    ("db.password", True), ("Authorization", True), ("api_key", True), ("OPENAI_API_KEY", True),
    ("max_tokens", False), ("--sim-prefill-ms-per-token", False), ("verify_per_token_ms", False),
    ("completion_tokens", False), ("--tokenizer", False), ("PWD", False), ("SSH_AUTH_SOCK", False),
])
def test_what_counts_as_a_secret_name(name, secret):
    assert secret_name(name) is secret


def test_text_patterns_cover_flags_urls_headers_and_assignments():
    r = Redactor()
    text = ("launch --api-key sk-extra-999 --hf-token=hf_inline_000 --sim-prefill-ms-per-token 0.02 "
            "url http://admin:pw_s3cret@127.0.0.1:8000/v1?api_key=qk_123456&model=m "
            "Authorization: Bearer tok_abcdef X-API-Key: xk_987654 HF_TOKEN=hf_env_111 max_tokens=500")
    out = r.text(text)
    for secret in ("sk-extra-999", "hf_inline_000", "pw_s3cret", "qk_123456", "tok_abcdef", "xk_987654", "hf_env_111"):
        assert secret not in out, out
    for kept in ("--sim-prefill-ms-per-token 0.02", "admin:***@127.0.0.1:8000/v1", "model=m", "max_tokens=500"):
        assert kept in out, out


def test_data_hides_secret_keys_flag_values_and_learns_them_for_text():
    r = Redactor()
    data = {"server": {"extra_args": ["--api-key", "sk-extra-999", "--hf-token=hf_inline_000", "--port", "8000"],
                       "env": {"HF_TOKEN": "hf_env_111", "NCCL_ALGO": "Ring"}},
            "backend": {"url": "http://admin:pw_s3cret@host:1"}}
    r.learn(data)
    out = r.data(data)
    assert out["server"]["extra_args"] == ["--api-key", REDACTED, f"--hf-token={REDACTED}", "--port", "8000"]
    assert out["server"]["env"] == {"HF_TOKEN": REDACTED, "NCCL_ALGO": "Ring"}
    assert out["backend"]["url"] == f"http://admin:{REDACTED}@host:1"
    echoed = r.text("server args: ['sk-extra-999'] hf_inline_000 pw_s3cret hf_env_111")
    assert echoed.count(REDACTED) == 4


# --- secrets known by where they are, not only by their spelling -----------------------------


def test_every_value_after_a_secret_flag_up_to_the_next_flag_is_secret():
    # vLLM's --api-key takes several keys
    r = Redactor()
    args = ["--api-key", "k1-aaaaaa", "k2-bbbbbb", "--port", "8000"]
    r.learn({"extra_args": args})
    assert r.data(args) == ["--api-key", REDACTED, REDACTED, "--port", "8000"]
    assert Redactor().text("vllm serve m --api-key k1-aaaaaa k2-bbbbbb --port 8000") == \
        f"vllm serve m --api-key {REDACTED} {REDACTED} --port 8000"
    assert "k2-bbbbbb" not in r.text("cmdline: ['--api-key', 'k1-aaaaaa', 'k2-bbbbbb']")


ENV = {"DB_PASSWORD": "correct horse battery staple", "OTEL_EXPORTER_OTLP_HEADERS": "x-honeycomb-team=hc_KEY_1234,x=y",
       "EXTRA_HEADERS": "X-Auth-Token: xat_KEY_5678", "VLLM_API_KEY": "vk_abc", "MY_FLAG": "1",
       "NCCL_ALGO": "Ring", "CUDA_VISIBLE_DEVICES": "0,1", "SGLANG_ENABLE_TORCH_COMPILE": "1"}


def test_a_server_env_value_is_secret_unless_users_need_to_read_it():
    r = Redactor()
    r.learn({"server": {"env": ENV}})
    shown = r.data({"server": {"env": ENV}})["server"]["env"]
    hidden = {"DB_PASSWORD", "OTEL_EXPORTER_OTLP_HEADERS", "EXTRA_HEADERS", "VLLM_API_KEY", "MY_FLAG"}
    assert {k for k, v in shown.items() if v == REDACTED} == hidden  # short values too, where they sit
    assert shown["NCCL_ALGO"] == "Ring" and shown["CUDA_VISIBLE_DEVICES"] == "0,1"
    # learned whole, spaces and all: no pattern half-redacts it first
    text = r.text('DB_PASSWORD="correct horse battery staple" OTEL_EXPORTER_OTLP_HEADERS=x-honeycomb-team=hc_KEY_1234,x=y')
    for fragment in ("horse", "battery", "hc_KEY_1234"):
        assert fragment not in text, text
    # the record's view of the processes' environment is judged the same way
    assert r.data({"vars": {"EXTRA_HEADERS": "X-Auth-Token: xat_KEY_5678", "NCCL_PROTO": "Simple"}}, "environment") == \
        {"vars": {"EXTRA_HEADERS": REDACTED, "NCCL_PROTO": "Simple"}}


def test_record_readable_env_extends_the_allow_list():
    r = Redactor(readable=["MY_*"])
    assert r.data({"env": {"MY_FLAG": "1", "OTHER": "2"}}) == {"env": {"MY_FLAG": "1", "OTHER": REDACTED}}
    assert r.data({"env": {"MY_TOKEN": "abc"}}) == {"env": {"MY_TOKEN": REDACTED}}  # a secret name never reads


@pytest.mark.parametrize("override, secrets", [
    ("server.extra_args=[--api-key,skPARSE-123456", ["skPARSE-123456"]),  # unclosed: Hydra cannot parse it
    ("server.extra_args=[--api-key,k1-aaaaaa,k2-bbbbbb]", ["k1-aaaaaa", "k2-bbbbbb"]),
    ('+server.env.DB_PASSWORD="correct horse battery staple"', ["correct horse battery staple"]),
    ("+server.env.HF_TOKEN=hf_aaaaaa,hf_bbbbbb", ["hf_aaaaaa", "hf_bbbbbb"]),  # a sweep over two tokens
])
def test_an_override_as_typed_teaches_its_secrets(override, secrets):
    r = Redactor()
    r.learn([override])
    message = r.text(f"cannot parse the override: no viable alternative at input '{override}'")
    for secret in secrets:
        assert secret not in message, message


def test_a_secret_override_is_redacted_in_a_folder_name():
    r = Redactor()
    assert r.override_label("+server.env.HF_TOKEN=ab") == "server.env.HF_TOKEN=redacted"
    assert r.override_label("workload.concurrency=4") == "workload.concurrency=4"
    assert r.override_label("+server.env.NCCL_ALGO=Ring") == "+server.env.NCCL_ALGO=Ring"


SECRETS = ("sk-extra-999999", "hf_inline_000000", "hf_env_0000000", "pw_s3cret_77")


def every_written_file(*roots: Path) -> list[Path]:
    return [p for root in roots for p in ([root] if root.is_file() else root.rglob("*")) if p.is_file()]


def assert_no_secret(*roots: Path) -> None:
    for path in every_written_file(*roots):
        data = path.read_bytes()
        for secret in SECRETS:
            assert secret.encode() not in data, f"{secret} leaked into {path}"


@pytest.mark.slow
def test_planted_secrets_reach_no_file_and_no_report(tmp_path):
    junit, step = tmp_path / "junit.xml", tmp_path / "step.md"
    proc = run_suites("+exp=sim_smoke", "backend=process", "telemetry=off", f"record.root={tmp_path / 'runs'}",
                      "server.extra_args=[--api-key,sk-extra-999999,'--hf-token=hf_inline_000000']",
                      "+server.env.HF_TOKEN=hf_env_0000000", "-k", "baseline and not eagle3", f"--junitxml={junit}",
                      env={"GITHUB_STEP_SUMMARY": str(step)})
    assert proc.returncode == 0, proc.stdout[-3000:]
    record = (tmp_path / "runs" / "latest").resolve()
    report = specgate("report", str(record), timeout=120)
    assert report.returncode == 0, report.stderr
    log = (record / "arms" / "baseline" / "server.log").read_text()
    assert "sk-extra" not in log and REDACTED in log  # the simulator logged its unknown flags, scrubbed as written
    assert oct((record / "arms" / "baseline" / "server.log").stat().st_mode & 0o777) == "0o600"
    assert "--sim-prefill-ms-per-token" in (record / "results.json").read_text()  # not over-redacted
    assert "--sim-prefill-ms-per-token ***" not in (record / "summary.md").read_text()
    assert_no_secret(record, junit, step)
    for secret in SECRETS:
        assert secret not in proc.stdout and secret not in proc.stderr


@pytest.mark.slow
def test_a_password_in_the_attach_url_reaches_no_file(tmp_path):
    cfg = compose(["+exp=sim_smoke", "backend=process", "telemetry=off"]).arm("baseline").cfg
    server = ProcessServer("baseline", cfg, tmp_path / "sim.log")
    server.start()
    try:
        port = server.base_url.rsplit(":", 1)[1]
        junit = tmp_path / "junit.xml"
        proc = run_suites("+exp=sim_smoke", "backend=attach", f"backend.url=http://admin:pw_s3cret_77@127.0.0.1:{port}",
                          "telemetry=off", f"record.root={tmp_path / 'runs'}", "-k", "baseline and not eagle3",
                          f"--junitxml={junit}")
    finally:
        server.stop()
    assert proc.returncode in (0, 1), proc.stdout[-3000:]
    assert_no_secret((tmp_path / "runs" / "latest").resolve(), junit)
    assert "pw_s3cret_77" not in proc.stdout and "pw_s3cret_77" not in proc.stderr


# Every class of the policy at once, through every way out: a run (files, JUnit, step summary,
# terminal), `specgate show`, a Hydra parse error, a basic sweep (files, folder names, terminal)
# and a capacity search. (tests/sweep/test_sweep_launchers.py plants the same through submitit.)
PLANTED = ["server.extra_args=[--api-key,k1-multi-aaaaaa,k2-multi-bbbbbb]",
           '+server.env.DB_PASSWORD="correct horse battery staple"',
           "+server.env.OTEL_EXPORTER_OTLP_HEADERS='x-honeycomb-team=hc_KEY_1234,x=y'",
           "+server.env.EXTRA_HEADERS='X-Auth-Token: xat_KEY_5678'", "+server.env.NCCL_ALGO=Ring"]
PLANTED_VALUES = ("k1-multi-aaaaaa", "k2-multi-bbbbbb", "horse battery staple", "hc_KEY_1234", "xat_KEY_5678")
QUICK = ["+exp=sim_smoke", "backend=process", "telemetry=off", "workload.num_prompts=2", "workload.max_tokens=16"]


def assert_nowhere(values, *roots: Path, text: str = "") -> None:
    for value in values:
        assert value not in text, f"{value} reached the terminal"
        for path in every_written_file(*roots):
            assert value.encode() not in path.read_bytes(), f"{value} leaked into {path}"
            assert value not in str(path), f"{value} names {path}"


@pytest.mark.slow
def test_secrets_of_every_class_reach_no_byte_that_leaves_a_run(tmp_path):
    junit, step = tmp_path / "junit.xml", tmp_path / "step.md"
    proc = run_suites(*QUICK, *PLANTED, f"record.root={tmp_path / 'runs'}", "-k", "baseline and requests_succeed",
                      f"--junitxml={junit}", env={"GITHUB_STEP_SUMMARY": str(step)})
    assert proc.returncode == 0, proc.stdout[-3000:]
    record = (tmp_path / "runs" / "latest").resolve()
    assert_nowhere(PLANTED_VALUES, record, junit, step, text=proc.stdout + proc.stderr)
    config = (record / "config.yaml").read_text()
    assert "NCCL_ALGO: Ring" in config and "DB_PASSWORD: '***'" in config  # readable stays readable
    shown = specgate("show", *QUICK, *PLANTED)
    assert shown.returncode == 0 and "NCCL_ALGO: Ring" in shown.stdout, shown.stderr
    assert_nowhere(PLANTED_VALUES, text=shown.stdout + shown.stderr)
    broken = run_suites(*QUICK, "server.extra_args=[--api-key,skPARSE-123456", f"record.root={tmp_path / 'r2'}",
                        refused=True)
    assert broken.returncode == 4 and "cannot parse the override" in broken.stderr, broken.stderr
    assert_nowhere(["skPARSE-123456"], text=broken.stdout + broken.stderr)


@pytest.mark.slow
def test_secrets_reach_no_byte_of_a_sweep_or_a_capacity_search(tmp_path):
    swept = ["hf_swept_aaaaaa", "hf_swept_bbbbbb"]
    done = specgate("sweep", *QUICK, *PLANTED, f"+server.env.HF_TOKEN={','.join(swept)}",
                    f"record.root={tmp_path / 'sweeps'}", "-k", "baseline and requests_succeed", "--no-progress",
                    timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (sweep_dir,) = (tmp_path / "sweeps").iterdir()
    assert sorted(p.name for p in (sweep_dir / "points").iterdir()) == ["0_HF_TOKEN-redacted", "1_HF_TOKEN-redacted"]
    assert_nowhere([*PLANTED_VALUES, *swept], sweep_dir, text=done.stdout + done.stderr)
    searched = specgate("capacity", "+exp=sim_capacity", "backend=process", "capacity.max=2", "arms={baseline: []}",
                        PLANTED[0], PLANTED[1], f"record.root={tmp_path / 'capacity'}", timeout=600)
    assert searched.returncode in (0, 1), searched.stdout[-3000:] + searched.stderr[-3000:]
    assert_nowhere(PLANTED_VALUES[:3], tmp_path / "capacity", text=searched.stdout + searched.stderr)


def test_the_docs_list_of_readable_variables_is_the_codes():
    import re
    from harness.record.secrets import readable_patterns, readable_env
    READABLE_ENV = readable_patterns()
    docs = (ROOT / "docs/record.md").read_text()
    section = docs[docs.index("## No secrets"):docs.index("## Per-request data")]
    named = set(re.findall(r"`([A-Z][A-Z_]*_\*)`", section))
    assert named and named <= set(READABLE_ENV), named - set(READABLE_ENV)
    readme = (ROOT / "README.md").read_text()
    assert {"NCCL_*", "CUDA_*"} <= set(re.findall(r"`([A-Z][A-Z_]*_\*)`", readme)) <= set(READABLE_ENV)
    assert "record.readable_env" in readme and "record.readable_env" in section
    assert not readable_env("VLLM_API_KEY") and readable_env("NCCL_ALGO") and not readable_env("DB_PASSWORD")
