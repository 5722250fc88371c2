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
