"""The physical limits of one load, in one place: the schema's bounds (harness/config/schema.py)
and the checks made before any server starts (a trace's requests and its replay's length, the
figures over time) read them, so a number past one is one sentence before anything starts,
never a run that exhausts the machine's memory or waits for ever.

Each is far beyond any real load, and small enough that what specgate builds for a load of
that size (prompts, request records, slices, Parquet columns) fits in a shared machine's memory.
Imports nothing of the project, so the config's schema, the load and the figures read one copy.
"""

from __future__ import annotations

MAX_PROMPT_TOKENS = 1_048_576  # one prompt: 1 Mi tokens (the longest contexts served today); sizing builds it here
MAX_OUTPUT_TOKENS = 10_000_000  # max_tokens of one request (a Parquet int64 column holds it; no model gets near)
MAX_REQUESTS = 10_000_000  # measured (or warm-up) requests of one load: each leaves a record in memory
MAX_IN_FLIGHT = 100_000  # requests in flight at once (closed-loop concurrency, an open loop's cap)
MAX_CLIENT_PROCESSES = 1024  # load processes, each its own event loop
MAX_LOAD_S = 86_400.0  # one load, a trace replay's schedule, a request's timeout: 24 h at most
MAX_TIMESLICES = 100_000  # slices of one load's figures over time (record.timeslice_s)
MIN_TIMESLICE_S = 0.001  # a slice of 1 ms holds a token or two at most: narrower ones are noise
MAX_TOP_LOGPROBS = 20  # top logprobs per output token: OpenAI's limit, and vLLM's default --max-logprobs
MAX_REPEATS = 1000  # loads of one arm on one server (gate.repeats), a capacity probe's rounds
MAX_ROUNDS = 100  # rounds of an A/B, runs of a calibration: each starts servers, and its record is made up front
