#!/usr/bin/env python3
"""Serve the tiny target with an EAGLE-3 head on vLLM's CPU build and say what the head
accepts, outside the harness: accept length and per-position acceptance from vLLM's own
/metrics counters, and whether greedy output equals the plain server's, token for token.

    measure_eagle3_head.py HEAD_DIR [--target DIR] [--prompts N] [--no-plain]

A quick look while tuning scripts/make_eagle3_heads.py (two servers, about 2 minutes on 2
cores); the gated figures are +exp=vllm_cpu_eagle3's (tests/engines/test_vllm_eagle3.py).
The prompts are rows spread over datasets/specmix.jsonl (first turns), not in the heads'
training text. Standard library only; the server runs in the vLLM venv.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPEC = "vllm:spec_decode_"
STEPS = 3  # num_speculative_tokens, as conf/drafter/eagle3_tiny_*.yaml


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get(url: str, timeout: float = 10) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read().decode()


def post(url: str, body: dict, timeout: float = 120) -> dict:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


class Server:
    """vLLM's OpenAI server as a child process, stopped on exit."""

    def __init__(self, python: Path, target: Path, head: Path | None, log: Path):
        self.port, self.log = free_port(), log
        command = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(target),
                   "--dtype", "float32", "--enforce-eager", "--max-model-len", "1024", "--port", str(self.port)]
        if head is not None:
            command += ["--speculative-config", json.dumps(
                {"method": "eagle3", "model": str(head), "num_speculative_tokens": STEPS})]
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
               "HF_HUB_OFFLINE": "1", "TORCHDYNAMO_DISABLE": "1"}
        self.command, self.env = command, env

    def __enter__(self) -> "Server":
        self.proc = subprocess.Popen(self.command, env=self.env, stdout=self.log.open("w"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"measure_eagle3_head: the server exited ({self.proc.returncode}); see {self.log}")
            try:
                get(self.url("/health"), timeout=2)
                return self
            except OSError:
                time.sleep(2)
        self.__exit__()
        raise SystemExit(f"measure_eagle3_head: the server was not healthy within 400 s; see {self.log}")

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def counters(self) -> dict[str, float]:
        """The speculative counters, per position too ("..._per_pos_total|1")."""
        found = {}
        for line in get(self.url("/metrics")).splitlines():
            match = re.match(rf'{SPEC}(\w+?)(?:_total)?(?:\{{[^}}]*position="(\d+)"[^}}]*\}}|\{{[^}}]*\}})?\s+([\d.e+-]+)$', line)
            if match:
                name, position, value = match.groups()
                key = f"{name}|{position}" if position is not None else name
                found[key] = found.get(key, 0.0) + float(value)
        return found

    def generate(self, prompt: str, max_tokens: int) -> list[int]:
        body = {"model": self.command[self.command.index("--model") + 1],
                "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
                "temperature": 0.0, "ignore_eos": True, "return_token_ids": True}
        return post(self.url("/v1/chat/completions"), body)["choices"][0]["token_ids"]


def measure(python: Path, target: Path, head: Path | None, prompts: list[str], max_tokens: int, log: Path) -> dict:
    with Server(python, target, head, log) as server:
        server.generate(prompts[0], 4)  # warm-up, outside the window
        before = server.counters()
        outputs = [server.generate(prompt, max_tokens) for prompt in prompts]
        after = server.counters()
    delta = {key: after.get(key, 0.0) - before.get(key, 0.0) for key in after}
    drafts = delta.get("num_drafts", 0.0)
    result = {"outputs": outputs}
    if head is not None and drafts:
        per_position = [delta.get(f"num_accepted_tokens_per_pos|{i}", 0.0) / drafts for i in range(STEPS)]
        result.update(drafts=int(drafts), accept_length=round(1 + delta.get("num_accepted_tokens", 0.0) / drafts, 3),
                      per_position=[round(rate, 3) for rate in per_position])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("head", type=Path)
    parser.add_argument("--target", type=Path, default=ROOT / ".cache" / "tiny-models" / "target")
    parser.add_argument("--python", type=Path, default=Path(os.environ.get("SPECGATE_VLLM_VENV") or ROOT / ".venv-vllm") / "bin" / "python")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--no-plain", action="store_true", help="skip the plain server (no lossless check)")
    args = parser.parse_args(argv)
    for path, what in ((args.head / "config.json", "head"), (args.target / "config.json", "target"), (args.python, "vLLM python")):
        if not path.exists():
            print(f"measure_eagle3_head: no {what} at {path}", file=sys.stderr)
            return 2
    rows = [json.loads(line) for line in (ROOT / "datasets" / "specmix.jsonl").read_text().splitlines() if line.strip()]
    spread = rows[::max(1, len(rows) // args.prompts)][:args.prompts]  # every category, not the first one's
    prompts = [row["prompt"] if "prompt" in row else row["turns"][0] for row in spread]
    logs = ROOT / "tmp"
    logs.mkdir(exist_ok=True)
    head = measure(args.python, args.target, args.head.resolve(), prompts, args.max_tokens, logs / "measure-eagle3-head.log")
    report = {key: head.get(key) for key in ("accept_length", "per_position", "drafts")}
    if not args.no_plain:
        plain = measure(args.python, args.target, None, prompts, args.max_tokens, logs / "measure-eagle3-plain.log")
        same = sum(a == b for a, b in zip(head["outputs"], plain["outputs"]))
        report["lossless"] = f"{same}/{len(prompts)} identical to plain"
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
