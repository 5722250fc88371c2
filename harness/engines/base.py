"""What an inference engine is to specgate: one class per engine owns everything that
differs between engines, so backends, the load, the suites and the record never ask which
engine they are talking to.

An engine class provides:

- ``launch(cfg, port, host, in_container)``: the command that starts a server (an
  executable and its arguments; not necessarily Python), and ``environment(cfg)`` and
  ``shm_size(cfg)`` it needs;
- ``health_paths``: the routes that must all answer 2xx before a server is healthy, and
  ``readiness()``: the wait strategy built on them (harness/engines/readiness.py), which
  every backend waits on;
- ``min_processes(cfg)``: how many processes a healthy server has at least (the
  environment suite checks each of them);
- ``apis``: the ``workload.api`` values it serves; ``request_extras(api)`` (JSON fields
  added to every request), ``output_details(api, top_logprobs)`` (the fields that ask for
  output token ids and top logprobs, sent only when a lossless gate compares arms or
  workload.logprobs is set) and ``spec_details(event)`` (per-request speculative counts
  in a stream event); ``token_counter(cfg)``: the server's exact tokenizer, if known, to
  check its token counts with (harness/load/crosscheck.py); ``tokenize_route`` /
  ``prompt_tokenizer(cfg, base_url, model)``: what counts a prompt's tokens, to size
  random prompts to ``workload.input_len`` (harness/load/sizing.py);
- ``server_version(client)``, ``served_model_fallback`` and
  ``server_accept_length(client)``: its info routes;
- ``bad_request_message(body)``: the shape of its 400 (the API suite checks it);
- ``spec_stats``: where speculative statistics come from: ``per_request`` (fields on each
  response) or ``metrics_window`` (``/metrics`` counters differenced over the load),
  ``prometheus``: its metric names, and ``window_spec_stats(counters)``: its own formula
  for the accept length (and what else its counters say) over such a window;
- ``prefix_cache_reset_route`` and ``reset_prefix_cache(client, cfg)``: how it empties its
  prefix cache (SGLang and the simulator ``POST /flush_cache``, vLLM ``POST
  /reset_prefix_cache``), called before each load's measured requests so every arm and
  repeat starts from the same cache; a :class:`CacheReset` says whether it was reset, or why
  not (None: the engine has no such route);
- ``check(cfg)``: config rules of its own (e.g. which drafter keys it needs);
- ``options``: the dataclass of its own options, if it has any: the config block
  ``server.<name>`` (the schema adds one per engine; e.g. ``server.vllm.max_num_seqs``).

A new engine is one module here with its class, one line in ``ENGINES``
(harness/engines/__init__.py), a ``conf/server/*.yaml`` with ``engine: <name>``, and a
``conf/build/*.yaml`` when it runs from an image.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from harness.config.schema import DrafterConfig, SpecgateConfig
from harness.engines.readiness import HttpWaitStrategy

if TYPE_CHECKING:
    from harness.http_client import ServerClient
    from harness.load.crosscheck import CountTokens
    from harness.load.sizing import PromptTokenizer

DEFAULT_IMAGE_PYTHON = "python3"  # a Python engine's interpreter in its image, unless build.image_python
PER_REQUEST = "per_request"
METRICS_WINDOW = "metrics_window"
# What one observation of an engine's inter-token latency histogram is (PrometheusNames):
ITL_PER_TOKEN = "token"  # each decoded token, its output's interval ÷ its tokens: sum ÷ count = time per token
ITL_PER_STEP = "step"  # each engine step of a request, the whole interval: sum ÷ count = time per step


class EngineConfigError(ValueError):
    """A config this engine cannot serve (one sentence)."""


@dataclass(frozen=True)
class Launch:
    """What starts a server: `executable` (a program, or an interpreter and its module)
    and its `args`. Backends place it: a child process, a container's entrypoint + cmd."""

    executable: list[str]
    args: list[str]

    @property
    def argv(self) -> list[str]:
        return [*self.executable, *self.args]


@dataclass(frozen=True)
class PrometheusNames:
    """The engine's /metrics names specgate reads (None: it has no such metric), and what
    its inter-token latency histogram counts. Either way the histogram's sum over a
    request is its decode time (first token to last); what differs is the count:
    ITL_PER_TOKEN (SGLang) counts every token after the first, so sum ÷ count is the decode
    time per token, the client's TPOT; ITL_PER_STEP (vLLM) counts engine steps, so under
    speculation (several tokens a step) sum ÷ count is the time per step, and the time per
    token needs the token count from elsewhere (harness/measure/agreement.py)."""

    ttft_histogram: str | None = None  # seconds; *_sum and *_count are differenced
    itl_histogram: str | None = None
    itl_observed_per: str = ITL_PER_STEP  # ITL_PER_TOKEN or ITL_PER_STEP
    spec_prefix: str | None = None  # <prefix>num_drafts_total, num_draft_tokens_total, ...
    # Counters whose ratio over the window is SGLang's accept length (tokens ÷ verify calls):
    # the tokens every finished request produced, its first, prefill-produced one included,
    # and the verify cycles they took (both counted when a request finishes).
    generation_tokens: str | None = None
    spec_verify_calls: str | None = None
    # Counters of prompt tokens looked up in the prefix cache and of those it held (the hit
    # rate over a window is their deltas' ratio); None: the engine exports no such pair.
    prefix_cache_queries: str | None = None
    prefix_cache_hits: str | None = None
    # requests the server finished (a fleet's share of them per worker: harness/measure/fleet.py)
    requests_finished: str | None = None
    # seconds per stage of a request, one `stage` label each (SGLang's per-stage histogram: a split
    # fleet's TTFT split into prefill, KV transfer and first decode, harness/measure/fleet.py)
    stage_histogram: str | None = None


@dataclass(frozen=True)
class CacheReset:
    """Whether the prefix cache was emptied before a load, through which route, or why not:
    what the record keeps per arm and repeat."""

    reset: bool
    route: str | None = None  # e.g. "POST /flush_cache"; None: the engine has none
    reason: str | None = None  # why it was not reset (None when it was)

    def to_json(self) -> dict[str, Any]:
        return {"reset": self.reset, "route": self.route, **({"reason": self.reason} if self.reason else {})}


class CounterWindow(Protocol):
    """An engine's /metrics counters differenced over a load window
    (harness/measure/server_metrics.py builds it from two snapshots)."""

    def delta(self, name: str) -> float | None:
        """How much the counter `name` grew over the window (None: the server has no such counter)."""

    def per_position(self) -> list[float]:
        """Accepted draft tokens per draft position over the window, position 0 first."""


class Engine:
    name: ClassVar[str]
    apis: ClassVar[tuple[str, ...]] = ("chat", "completions")
    health_paths: ClassVar[tuple[str, ...]] = ("/health",)
    spec_stats: ClassVar[str] = PER_REQUEST
    prometheus: ClassVar[PrometheusNames] = PrometheusNames()
    # the engine's own tuning variables (glob patterns): values the record and terminal may show
    # (harness/record/secrets.py; every other server.env value is a secret)
    readable_env: ClassVar[tuple[str, ...]] = ()
    # its command-line flags (glob patterns) whose values the record and terminal may show; the
    # value of any other flag in server.extra_args is a secret (harness/secrets.py), so
    # a flag this engine does not know, `--api-key`, `--tokens`, never shows
    readable_flags: ClassVar[tuple[str, ...]] = ()
    # inside a JSON-valued argument of a readable flag: the keys whose string values may show
    # (numbers, booleans show; any other string is a secret)
    readable_json_keys: ClassVar[tuple[str, ...]] = ()
    version_routes: ClassVar[tuple[str, ...]] = ()  # GET routes whose JSON has "version"
    served_model_fallback: ClassVar[str | None] = None  # a GET route with "model_path", if /v1/models lists none
    drafter_keys: ClassVar[tuple[str, ...]] = ("num_steps",)  # drafter fields a speculative arm must set
    checks_drafter_fit: ClassVar[bool] = True  # False: checkpoint paths are only names (the simulator)
    simulates_gpus: ClassVar[bool] = False  # serves a GPU model that telemetry=sim reads
    tokenize_route: ClassVar[str | None] = None  # POST {"model", "prompt"} -> {"count", ...}, if it has one
    options: ClassVar[type | None] = None  # the dataclass of its options block, server.<name>
    prefix_cache_reset_route: ClassVar[str | None] = None  # POST route that empties its prefix cache, if any

    # --- starting a server -------------------------------------------------------------
    def launch(self, cfg: SpecgateConfig, port: int, host: str, in_container: bool) -> Launch:
        raise NotImplementedError

    def environment(self, cfg: SpecgateConfig) -> dict[str, str]:
        """The server's environment on top of the backend's: the NCCL preset, server.env."""
        env = {k: str(v) for k, v in cfg.nccl.env.items()}
        env.update({k: str(v) for k, v in cfg.server.env.items()})
        return env

    def shm_size(self, cfg: SpecgateConfig) -> str | None:
        """/dev/shm a container needs when backend.shm_size is not set (None: docker's default)."""
        return None

    def min_processes(self, cfg: SpecgateConfig) -> int:
        """The fewest processes a healthy server of this config has."""
        return 1

    def check(self, cfg: SpecgateConfig) -> None:
        """Raise EngineConfigError when this engine cannot serve `cfg`."""
        if cfg.workload.api not in self.apis:
            raise EngineConfigError(f"workload.api={cfg.workload.api} is not served by {self.name}; "
                                    f"valid: {', '.join(self.apis)}")
        drafter = cfg.drafter
        if drafter.algorithm is not None:
            missing = [k for k in self.drafter_keys if getattr(drafter, k) is None]
            if missing:
                raise EngineConfigError(f"drafter '{drafter.name}' sets algorithm {drafter.algorithm} "
                                        f"but not {', '.join(missing)}")
        self.check_forced_acceptance(cfg)
        if cfg.server.nnodes > 1 and self.node_args(cfg.server.nnodes, 0, "127.0.0.1:1") is None:
            raise EngineConfigError(f"server.nnodes={cfg.server.nnodes}: {self.name} has no multi-node launch here "
                                    f"(SGLang's --nnodes/--node-rank/--dist-init-addr); use one node")
        if cfg.router.disaggregated and self.disaggregation_args("prefill", 1, cfg.router.transfer_backend) is None:
            raise EngineConfigError(f"router.prefill/decode split requests over prefill and decode workers, and "
                                    f"{self.name} has no such launch here (SGLang's --disaggregation-mode); "
                                    f"use a fleet of whole workers (server.workers)")
        if cfg.server.tp_size % cfg.server.nnodes:
            raise EngineConfigError(f"server.tp_size={cfg.server.tp_size} does not split over server.nnodes="
                                    f"{cfg.server.nnodes}: each node holds tp_size / nnodes ranks")

    def node_args(self, nnodes: int, rank: int, init_address: str) -> list[str] | None:
        """The launch flags of node `rank` of a server spanning `nnodes` nodes that meet at
        `init_address` (HOST:PORT); None: this engine has no such launch."""
        return None

    def disaggregation_args(self, mode: str, bootstrap_port: int, transfer_backend: str) -> list[str] | None:
        """The launch flags of a `mode` ('prefill' | 'decode') worker of a split fleet, a prefill
        one serving its bootstrap at `bootstrap_port`; None: this engine has no such launch."""
        return None

    def check_forced_acceptance(self, cfg: SpecgateConfig) -> None:
        """drafter.forced_accept_length / forced_accept_rates as every engine reads them: one of
        the two, within what a cycle of this drafter can yield; then whether this engine (and
        build) can force acceptance at all (:meth:`forced_unsupported`). A plain arm drafts
        nothing, so there is nothing of it to force (the command line reaches every arm)."""
        drafter = cfg.drafter
        length, rates = drafter.forced_accept_length, drafter.forced_accept_rates
        if length is not None and rates is not None:
            raise EngineConfigError("drafter.forced_accept_length and drafter.forced_accept_rates both force the "
                                    "acceptance: set one (a mean length, or a rate per draft position)")
        if not drafter.algorithm or (length is None and rates is None and self.forced_by_hand(cfg) is None):
            return
        steps = int(drafter.num_steps or 0)
        if length is not None and not 1.0 <= float(length) <= steps + 1:
            raise EngineConfigError(f"drafter.forced_accept_length={length:g} is outside [1, {steps + 1}]: a cycle of "
                                    f"drafter '{drafter.name}' ({steps} draft steps) yields 1 to {steps + 1} tokens")
        if rates is not None:
            check_forced_rates(list(rates), steps, drafter.name)
        if (why := self.forced_unsupported(cfg)) is not None:
            raise EngineConfigError(why)

    def forced_acceptance(self, cfg: SpecgateConfig) -> str | None:
        """What forces this arm's acceptance, in words (None: the drafter's own acceptance):
        specgate's drafter key, or this engine's own knob set by hand. Such an arm is
        benchmark-only: its outputs are not the model's, its accept length is the one set."""
        drafter = cfg.drafter
        if not drafter.algorithm:
            return None
        if drafter.forced_accept_length is not None:
            return f"drafter.forced_accept_length={drafter.forced_accept_length:g}"
        if drafter.forced_accept_rates is not None:
            return f"drafter.forced_accept_rates={[float(r) for r in drafter.forced_accept_rates]}"
        return self.forced_by_hand(cfg)

    def forced_by_hand(self, cfg: SpecgateConfig) -> str | None:
        """This engine's own forced-acceptance knob, set in the config by hand (server.env,
        an engine option, extra_args), in words; None: none set (or none exists)."""
        return None

    def forced_unsupported(self, cfg: SpecgateConfig) -> str | None:
        """Why this engine, as configured, cannot force acceptance (None: it can)."""
        return f"engine {self.name} has no forced acceptance; drop drafter.forced_accept_length/_rates"

    def readiness(self) -> HttpWaitStrategy:
        """How a server of this engine is known to be ready (backends set the timeout)."""
        return HttpWaitStrategy(self.health_paths)

    # --- the load ----------------------------------------------------------------------
    def request_extras(self, api: str) -> dict[str, Any]:
        """JSON fields added to every request body of `api`."""
        return {}

    def output_details(self, api: str, top_logprobs: int) -> dict[str, Any]:
        """JSON fields asking for each output token's id and, when ``top_logprobs`` > 0, its
        top logprobs (the lossless gate's evidence). vLLM's and SGLang's OpenAI routes both
        take ``return_token_ids`` and OpenAI's own logprobs fields."""
        fields: dict[str, Any] = {"return_token_ids": True}
        if top_logprobs and api == "chat":
            fields.update(logprobs=True, top_logprobs=top_logprobs)
        elif top_logprobs:
            fields["logprobs"] = top_logprobs
        return fields

    def spec_details(self, event: dict) -> dict | None:
        """Per-request speculative counts in one parsed stream event (None: none here)."""
        return None

    def token_counter(self, cfg: SpecgateConfig) -> "CountTokens | None":
        """The token count of the server's output text, exact, for cross-checking its usage;
        None (the default) where only an approximation exists: re-tokenizing a real
        model's output is not its generated count."""
        return None

    def prompt_tokenizer(self, cfg: SpecgateConfig, base_url: str, model: str) -> "PromptTokenizer | None":
        """What counts a prompt's tokens as this server will: its ``tokenize_route`` by
        default; None where neither that nor an exact local count exists."""
        if self.tokenize_route is None:
            return None
        from harness.load.sizing import server_tokenizer

        return server_tokenizer(base_url, self.tokenize_route, model)

    # --- the prefix cache ----------------------------------------------------------------
    def prefix_cache_reset_unavailable(self, cfg: SpecgateConfig) -> str | None:
        """Why this engine's server, as configured, has no route that empties its prefix
        cache (None: it has one)."""
        if self.prefix_cache_reset_route is None:
            return f"engine {self.name} has no route that resets its prefix cache"
        return None

    def reset_prefix_cache(self, client: "ServerClient", cfg: SpecgateConfig) -> CacheReset:
        """Empty the server's prefix cache (with nothing in flight): POST its route and read
        the answer (``prefix_cache_reset_done``)."""
        from harness.http_client import ClientError

        missing = self.prefix_cache_reset_unavailable(cfg)
        if missing is not None:
            return CacheReset(False, None, missing)
        route = f"POST {self.prefix_cache_reset_route}"
        try:
            response = client.post_json(self.prefix_cache_reset_route, {}, check=False)
        except ClientError as exc:
            return CacheReset(False, route, f"{route} failed: {exc}")
        failure = self.prefix_cache_reset_failure(response.status_code, response.text)
        return CacheReset(failure is None, route, failure)

    def prefix_cache_reset_failure(self, status: int, body: str) -> str | None:
        """Why the reset route's answer says it did not reset (None: it did): a 2xx is done."""
        return None if 200 <= status < 300 else f"HTTP {status}: {body.strip()[:160]}"

    # --- the server's own counters -----------------------------------------------------
    def window_spec_stats(self, counters: CounterWindow) -> dict[str, Any]:
        """The window's accept length by this engine's own counters, with its definition in
        words (``accept_length_definition``: engines count differently) and the counts it
        came from; {} where its counters give none (none here, or a plain arm's window)."""
        return {}

    # --- info routes -------------------------------------------------------------------
    def server_version(self, client: "ServerClient") -> str | None:
        from harness.http_client import ClientError

        for path in self.version_routes:
            try:
                version = client.get_json(path).get("version")
            except (ClientError, AttributeError):
                continue
            if version:
                return str(version)
        return None

    def server_accept_length(self, client: "ServerClient") -> float | None:
        """The server's cumulative accept length (a labelled fallback; None: it has none)."""
        return None

    # --- errors ------------------------------------------------------------------------
    def bad_request_message(self, body: Any) -> str:
        """The message of this engine's 400 body; AssertionError when the shape is not its own."""
        raise NotImplementedError

    # --- deploying a schedule (specgate schedule) ----------------------------------------
    def schedule_form(self, drafter: DrafterConfig, ranges: list[tuple[int, int, int]]) -> dict[str, Any] | None:
        """How this engine takes a k per batch-size range (first, last, k; k 0 = plain
        decoding) for `drafter`: {engine, args, note, ...; files: {name: JSON} to write beside
        the schedule}; None when it is no engine to deploy (the simulator)."""
        return None

    def served_k(self, cfg: dict[str, Any], concurrency: int, scheduled_k: int | None) -> tuple[int, str]:
        """The k an arm drafts at ``concurrency`` (its recorded config as a dict), and how it is
        set: its drafter's num_steps, "static" (an engine that takes a schedule overrides this;
        ``scheduled_k`` is the schedule's choice there, for an engine that picks k itself)."""
        return int((cfg.get("drafter") or {}).get("num_steps") or 0), "static"


def check_forced_rates(rates: list[float], steps: int, drafter: str) -> None:
    """vLLM's synthetic_acceptance_rates rules, which every engine keeps: one unconditional
    rate per draft step (the share of cycles accepting that position and all before it), so
    they never increase."""
    if len(rates) != steps:
        raise EngineConfigError(f"drafter.forced_accept_rates has {len(rates)} rate(s); drafter '{drafter}' drafts "
                                f"{steps} token(s) a cycle, so give one per draft position")
    if any(later > earlier for earlier, later in zip(rates, rates[1:])):
        raise EngineConfigError(f"drafter.forced_accept_rates={rates} increases; each is the share of cycles that "
                                f"accept that position and every one before it, so they never increase")


class PythonEngine(Engine):
    """An engine started as `python -m <module> <args>`: the interpreter is build.python
    (or the harness's own) on this host, build.image_python in a container."""

    module: ClassVar[str]

    def launch(self, cfg: SpecgateConfig, port: int, host: str, in_container: bool) -> Launch:
        python = (cfg.build.image_python if in_container else cfg.build.python) or (
            DEFAULT_IMAGE_PYTHON if in_container else sys.executable)
        return Launch([python, "-m", cfg.build.module or self.module], self.args(cfg, port, host))

    def args(self, cfg: SpecgateConfig, port: int, host: str) -> list[str]:
        raise NotImplementedError

    def environment(self, cfg: SpecgateConfig) -> dict[str, str]:
        env = super().environment(cfg)
        env["PYTHONUNBUFFERED"] = "1"  # the log shows what the server printed up to a crash
        # Python engines rename their workers with setproctitle, which by default
        # overwrites the environ area: /proc/<pid>/environ would read blank and the
        # environment check could not see what a worker has. SPT_NOENV=1 keeps it.
        env["SPT_NOENV"] = "1"
        return env
