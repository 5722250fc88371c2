"""Does the server's own account of a load agree with what the client measured?

Two figures mean the same thing on both sides, over the same measured requests (the
/metrics window opens after the warm-up, before the first measured request, and closes
after the load; harness/measure/server_metrics.py):

- **TTFT mean**: the client's ``ttft_ms.mean`` (send to the first chunk with tokens) and
  the server's ``time_to_first_token_seconds`` sum ÷ count.
- **Decode time per token**: the client's ``decode_step_ms``, its TPOT pooled over
  tokens (Σ first-to-last-chunk span ÷ Σ (completion tokens − 1)), and the server's
  inter-token latency histogram: its sum ÷ its count where the engine counts tokens
  (SGLang), its sum ÷ the client's decoded tokens where it counts engine steps (vLLM:
  under speculation a step yields several tokens). The sum is the requests' decode time
  either way.

- **Generated tokens**: the completion tokens the client received (each request's usage
  count, checked against its stream: harness/load/crosscheck.py) and the growth of the
  server's generation-token counter (``PrometheusNames.generation_tokens``). A counter that
  says ten times what was streamed passes every per-request check; this is where it shows.

The client's ITL (the gap between chunks) is compared with neither: under speculation a
chunk carries several tokens, so it is a time per step on the client's side, and the
server's per-token mean is a time per token.

A pair disagrees when the two differ by more than ``DISAGREEMENT_RATIO`` of the larger
*and* by more than what legitimately lies between them (``OUTSIDE_SERVER_MS`` for the
times, one average request's tokens for the token counts: :func:`tokens_floor`). A
disagreement goes into the arm's ``client_server_disagreement`` in results.json and a
sentence in the summary; it is a warning, not a gate: it says one side's number is not
what it claims to be, not which one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.engines.base import ITL_PER_TOKEN
from harness.measure.metrics import ArmResult

DISAGREEMENT_RATIO = 0.10
# What lies outside the server's clocks, per request: the HTTP request and response paths,
# the server's parsing before its TTFT clock starts (vLLM's also holds its chat template
# and tokenization), the client's own event loop. Sub-millisecond on an idle localhost,
# but on the 2-core CI machine with other work running, honest runs measured 1.6-7.3 ms
# (the simulator, TTFT 4-30 ms) and 3-3.5 ms (vLLM's CPU build, TTFT 17-34 ms): against a
# few-ms TTFT that is far beyond 10 %, so smaller differences are never flagged. A
# request's decode span is stamped by both sides at its first and last output, so it can
# be off by the same amount once, shared by all its tokens.
OUTSIDE_SERVER_MS = 10.0

TTFT = "ttft_mean_ms"
DECODE_PER_TOKEN = "decode_ms_per_token"
GENERATED_TOKENS = "generated_tokens"
# metric -> (the server's figure, the client's figure), in the summary's words
WORDS = {
    TTFT: ("the server's own TTFT mean", "the client's TTFT mean"),
    DECODE_PER_TOKEN: ("the server's own decode time per token", "the client's TPOT"),
    GENERATED_TOKENS: ("the server's counter of generated tokens", "the tokens the client received"),
}
UNITS = {TTFT: "ms", DECODE_PER_TOKEN: "ms", GENERATED_TOKENS: "tokens"}


@dataclass(frozen=True)
class Pair:
    """One figure as the client and the server each measured it, in its unit (UNITS)."""

    metric: str
    client: float
    server: float
    floor: float  # a difference this small (in the figure's unit) is never a disagreement

    @property
    def difference(self) -> float:
        """|client − server| as a fraction of the larger (0.47: they differ by 47 %)."""
        return abs(self.client - self.server) / max(self.client, self.server)

    @property
    def disagrees(self) -> bool:
        return abs(self.client - self.server) > self.floor and self.difference > DISAGREEMENT_RATIO

    def to_json(self, repeat: int) -> dict[str, Any]:
        return {"metric": self.metric, "client": round(self.client, 4), "server": round(self.server, 4),
                "ratio": round(self.server / self.client, 4), "difference": round(self.difference, 4),
                f"floor_{UNITS[self.metric]}": round(self.floor, 4), "repeat": repeat}


def client_decoded_tokens(result: ArmResult) -> int:
    """Tokens decoded after each request's first (which came from prefill)."""
    return result.completion_tokens - result.requests_ok


def server_decode_ms_per_token(window: dict[str, Any], decoded_tokens: int) -> float | None:
    """The server's decode time per token over the window (None: it has no such figure).
    A window recorded before `itl_observed_per` existed is read as per step, as it was."""
    total_s, count = window.get("itl_sum_s"), window.get("itl_count")
    if not total_s:
        return None
    if window.get("itl_observed_per") == ITL_PER_TOKEN:
        return total_s * 1000.0 / count if count else None
    return total_s * 1000.0 / decoded_tokens if decoded_tokens > 0 else None


def pairs(result: ArmResult, window: dict[str, Any]) -> list[Pair]:
    """The figures both sides have for one repeat's load; none when a measured request
    failed or was cancelled: the server's histograms hold every request it served, the
    client's figures only those that succeeded."""
    if result.requests_failed or (result.cancel or {}).get("cancelled") or not result.requests_ok:
        return []
    found = []
    server_ttft = window.get("ttft_mean_ms")
    if server_ttft and result.value("ttft_ms.mean"):
        found.append(Pair(TTFT, result.value("ttft_ms.mean"), server_ttft, OUTSIDE_SERVER_MS))
    decoded = client_decoded_tokens(result)
    server_decode = server_decode_ms_per_token(window, decoded)
    if server_decode and result.value("decode_step_ms"):
        found.append(Pair(DECODE_PER_TOKEN, result.value("decode_step_ms"), server_decode,
                          OUTSIDE_SERVER_MS * result.requests_ok / decoded))
    server_tokens = window.get("generation_tokens")
    if server_tokens is not None and result.completion_tokens:
        found.append(Pair(GENERATED_TOKENS, result.completion_tokens, server_tokens, tokens_floor(result)))
    return found


def tokens_floor(result: ArmResult) -> float:
    """The generated-token difference never flagged: one average request's tokens. The window
    opens after the warm-up with nothing in flight, so warm-up tokens are never in it; what may
    honestly differ is a request counted on the other side of a snapshot (an engine may add a
    request's tokens to its counter a moment after its stream ended) or another client's request
    on a shared server: a request's worth, where a lying counter is off by multiples."""
    return result.completion_tokens / max(result.requests_ok, 1)


def disagreements(result: ArmResult, window: dict[str, Any], repeat: int) -> list[dict[str, Any]] | None:
    """results.json's entries for one repeat: [] when every figure agreed, None when there
    was nothing to compare."""
    compared = pairs(result, window)
    return [p.to_json(repeat) for p in compared if p.disagrees] if compared else None


def sentence(arm: str, entry: dict[str, Any], repeats: int = 1) -> str:
    """'eagle3: the server's own decode time per token (1.70 ms) and the client's TPOT
    (3.20 ms) disagree by 47 % (> 10 %): one of them is not measuring what it claims'."""
    server_words, client_words = WORDS[entry["metric"]]
    unit = UNITS[entry["metric"]]
    value = (lambda x: f"{x:.2f} ms") if unit == "ms" else (lambda x: f"{x:.0f} {unit}")
    where = f" (repeat {entry['repeat'] + 1})" if repeats > 1 else ""
    return (f"{arm}{where}: {server_words} ({value(entry['server'])}) and {client_words} ({value(entry['client'])}) "
            f"disagree by {entry['difference'] * 100:.0f} % (> {DISAGREEMENT_RATIO * 100:.0f} %): "
            f"one of them is not measuring what it claims")
