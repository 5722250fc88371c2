"""`specgate report`: one self-contained HTML page from a hand-written record, checked as
text (no external reference, every verdict, a failed arm) and in a real headless Chromium.

The browser check drives Chromium through the DevTools protocol (aiohttp's websocket
client, already a dependency) rather than `--screenshot` + scanning `--enable-logging`
stderr: the protocol reports console errors, uncaught exceptions, failed loads and every
network request as structured events of this page only (stderr mixes in dbus/GPU noise
and its format changes between versions), tells when the page has loaded, lets us ask
the page whether each image decoded, and returns the screenshot.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from harness.record.store import RecordError
from harness.report.html import write_report

ROOT = Path(__file__).resolve().parents[2]
WIDTH, HEIGHT = 1280, 2000


# --- a fake record ------------------------------------------------------------------------

def measured_arm(tok_s: float, accept: float | None = None, **extra) -> dict:
    return {"status": "measured", "backend": "docker", "output_tok_s": tok_s, "request_per_s": tok_s / 200,
            "ttft_ms": {"mean": 6.0, "p50": 5.5, "p90": 7.0, "p99": 8.0},
            "itl_ms": {"mean": 4.2, "p50": 4.0, "p90": 5.0, "p99": 11.0},
            "tpot_ms": {"p50": 4.0}, "e2e_ms": {"p50": 800.0}, "accept_length": accept,
            "verify_cycle_ms": 7.4 if accept else None, "requests": {"ok": 6, "failed": 0}, "errors": {},
            "server": {"base_url": "http://127.0.0.1:30000", "image": {"tag": "specgate/sim:abc", "id": "sha256:1"}},
            **extra}


def request_lines(arm: str, step_ms: float, n: int, rng: np.random.Generator) -> list[dict]:
    lines = []
    for i in range(n):
        ttft = float(rng.uniform(4, 9))
        chunks = list(np.round(ttft + np.cumsum(rng.exponential(step_ms, 40)), 3))
        lines.append({"arm": arm, "index": i, "warmup": i == 0, "ok": True, "status": 200, "error": None,
                      "send_ms": 0.0, "ttft_ms": round(ttft, 3), "chunk_ms": [round(ttft, 3), *chunks],
                      "chunk_tokens": [1] * 41, "completion_tokens": 41})
    lines.append({"arm": arm, "index": n, "warmup": False, "ok": False, "status": 500,
                  "error": "boom", "ttft_ms": None, "chunk_ms": []})
    return lines


def telemetry_png(path: Path) -> None:
    from matplotlib.figure import Figure
    fig = Figure(figsize=(6, 2.5))
    ax = fig.subplots()
    ax.plot([0, 1, 2, 3], [2300, 2500, 2560, 2400])
    ax.set_title("GPU telemetry (fake)")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")


@pytest.fixture
def record(tmp_path) -> Path:
    run = tmp_path / "20261202T150000Z_sim_smoke"
    run.mkdir()
    results = {
        "experiment": "sim_smoke", "description": "Baseline vs EAGLE-3 <on the simulator>",
        "host": "ci-box", "command": [".venv/bin/pytest", "suites/", "+exp=sim_smoke"],
        "started_utc": "2026-12-02T15:00:00+00:00", "finished_utc": "2026-12-02T15:00:20+00:00",
        "interrupted": False, "plain_arm": "baseline", "harness_version": "0.1.0",
        "harness": {"version": "0.1.0", "git_commit": "0123456789abcdef", "git_dirty": True},
        "baseline": "runs/main/results.json", "notes": ["conf/ changed since the replayed run"],
        "unknown_future_key": {"nested": [1, 2]},
        "arms": {
            "baseline": measured_arm(250.0, gpu={"gpus": {"GPU-0": {"index": 0, "name": "H200",
                                                                     "load": {"sm_clock_mhz": {"median": 2562.0}},
                                                                     "sm_clock_ratio_under_load": 0.98}}}),
            "eagle3": measured_arm(310.0, accept=2.34, speedup_vs_baseline=1.24,
                                   break_even_accept_length_vs_baseline=1.87, repeats=3,
                                   noise={"output_tok_s": {"median": 310.0, "min": 300.0, "max": 318.0, "cv": 0.03}}),
            "eagle5": {"status": "server_failed",
                       "error": "server exited with code 1 while starting\nTraceback: <CUDA out of memory>"},
        },
        "gates": [
            {"name": "min_output_tok_s", "arm": "baseline", "passed": True, "value": 250.0, "threshold": 150,
             "detail": "baseline: output throughput 250.00 tok/s meets the floor 150 tok/s"},
            {"name": "min_speedup", "arm": "eagle3", "passed": False, "value": 1.24, "threshold": 1.5,
             "baseline": 1.3, "detail": "eagle3 is 1.24x of baseline (gate: ≥ 1.50x)"},
            {"name": "min_accept_length", "arm": "baseline", "passed": None, "value": None, "threshold": None,
             "detail": "no threshold configured for arm 'baseline' (gate.min_accept_length)"},
        ],
    }
    (run / "results.json").write_text(json.dumps(results))
    rng = np.random.default_rng(0)
    lines = request_lines("baseline", 4.0, 7, rng) + request_lines("eagle3", 7.5, 7, rng)
    (run / "requests.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines) + '{"torn": ')
    telemetry_png(run / "arms" / "baseline" / "telemetry.png")
    return run


# --- the page as text -----------------------------------------------------------------------

class References(HTMLParser):
    """Every attribute that could load something, and inline style/script text."""

    def __init__(self):
        super().__init__()
        self.refs: list[tuple[str, str, str]] = []
        self.tags: list[str] = []
        self.style = ""
        self._in_style = False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self._in_style = tag == "style"
        self.refs += [(tag, k, v or "") for k, v in attrs if k in ("src", "href", "srcset", "action", "poster", "data")]

    def handle_data(self, data):
        if self._in_style:
            self.style += data

    def handle_endtag(self, tag):
        self._in_style = False


def test_report_is_one_self_contained_page(record):
    out = write_report(record)
    assert out == record / "report.html"
    page = References()
    page.feed(out.read_text())
    assert page.refs, "the page has images"
    for tag, attr, value in page.refs:
        assert tag == "img" and attr == "src" and value.startswith("data:image/png;base64,"), (tag, attr, value[:60])
        assert base64.b64decode(value.split(",", 1)[1]).startswith(b"\x89PNG")
    assert "script" not in page.tags and "link" not in page.tags and "iframe" not in page.tags
    assert "url(" not in page.style and "@import" not in page.style
    # 2 charts (latency, throughput) + the one telemetry plot
    assert len(page.refs) == 3


def test_report_shows_the_run_verdicts_and_the_failed_arm(record):
    text = write_report(record, record / "out" / "r.html").read_text()
    assert "sim_smoke" in text and "ci-box" in text and ".venv/bin/pytest suites/ +exp=sim_smoke" in text
    assert "&lt;on the simulator&gt;" in text  # autoescaped
    assert "&lt;CUDA out of memory&gt;" in text and "server_failed" in text
    assert "FAILED: 1 gate(s) failed; arm eagle5 not measured" in text
    for status in ("passed", "failed", "skipped"):
        assert f'<span class="badge {status}">{status}</span>' in text
    assert "eagle3 is 1.24x of baseline" in text and "1.24x" in text and "±3.0%" in text
    assert "SM clock under load 2562 MHz (0.98 of max)" in text
    assert "0.1.0 (git 0123456789, dirty)" in text and "runs/main/results.json" in text
    assert "conf/ changed since the replayed run" in text


def test_an_unreliable_verdict_is_shown_as_unreliable_not_skipped(record):
    results = json.loads((record / "results.json").read_text())
    results["gates"].append({"name": "min_output_tok_s", "arm": "eagle3", "passed": None, "value": None,
                             "threshold": None, "baseline": None, "unreliable": True, "status": "unreliable",
                             "detail": "unreliable (output_tok_s CV 8.0% over 3 repeats > max_cv 5.0%): eagle3: ok"})
    (record / "results.json").write_text(json.dumps(results))
    text = write_report(record).read_text()
    assert '<span class="badge unreliable">unreliable</span>' in text  # the verdict's own row
    assert '<span class="badge unreliable">1 unreliable</span>' in text  # its own count
    assert '<span class="badge skipped">1 skipped</span>' in text  # and not counted as skipped
    assert ".unreliable {" in text  # its own style


def test_a_record_without_requests_or_metrics_still_renders(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.json").write_text(json.dumps({"arms": {"eagle3": {"status": "server_died"}}, "interrupted": True}))
    text = write_report(run).read_text()
    assert "INTERRUPTED" in text and "server_died" in text
    assert "No measured request" in text and "No arm measured its throughput" in text and "No gate was evaluated" in text


def test_a_record_that_still_says_running_is_shown_as_incomplete(record):
    results = json.loads((record / "results.json").read_text())
    results.update(status="running", finished_utc=None)
    (record / "results.json").write_text(json.dumps(results))
    text = write_report(record).read_text()
    assert '<span class="badge big failed">INCOMPLETE: the run died before it finished</span>' in text
    assert "<dt>status</dt><dd>incomplete: it still says running" in text


def test_a_finished_record_says_so(record):
    text = write_report(record).read_text()
    assert "<dt>status</dt><dd>finished</dd>" in text and "INCOMPLETE" not in text


def test_not_a_record_is_one_sentence(tmp_path):
    with pytest.raises(RecordError) as info:
        write_report(tmp_path / "missing")
    assert "\n" not in str(info.value) and "not a run record" in str(info.value)


# --- the page in a real browser ---------------------------------------------------------------

def find_chromium() -> str | None:
    for name in (os.environ.get("SPECGATE_CHROMIUM"), "chromium", "chromium-browser", "google-chrome",
                 "google-chrome-stable"):
        if name and (path := shutil.which(name)):
            return path
    return None


@pytest.fixture(scope="module")
def chromium() -> str:
    """The browser; installed by scripts/ensure_chromium.sh when missing (it needs root and
    apt-get). Skipped only when it cannot be installed; on CI (CI set) that is a failure."""
    path = find_chromium()
    if path is None:
        done = subprocess.run(["bash", str(ROOT / "scripts" / "ensure_chromium.sh")],
                              capture_output=True, text=True, timeout=900)
        path = find_chromium()
        if path is None:
            reason = f"no Chromium and it could not be installed: {done.stderr.strip().splitlines()[-1:]}"
            if os.environ.get("CI"):
                pytest.fail(reason)
            pytest.skip(reason)
    return path


class DevTools:
    """A minimal DevTools-protocol client over aiohttp's websocket: commands by id, events kept."""

    def __init__(self, ws):
        self.ws, self.next_id, self.events = ws, 0, []

    async def call(self, method: str, **params) -> dict:
        self.next_id += 1
        await self.ws.send_json({"id": self.next_id, "method": method, "params": params})
        while True:
            message = await self.ws.receive_json()
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                return message.get("result", {})
            self.events.append(message)

    async def wait_for(self, method: str) -> dict:
        for event in self.events:
            if event.get("method") == method:
                return event
        while True:
            message = await self.ws.receive_json()
            self.events.append(message)
            if message.get("method") == method:
                return message


def devtools_port(profile: Path, proc: subprocess.Popen, timeout_s: float = 30.0) -> int:
    """Chromium writes the port it chose (--remote-debugging-port=0) into DevToolsActivePort."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"chromium exited with code {proc.returncode} before listening")
        try:
            return int((profile / "DevToolsActivePort").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            time.sleep(0.1)
    raise AssertionError(f"chromium did not open its DevTools port within {timeout_s:.0f}s")


PROBE = """JSON.stringify({
                images: [...document.images].map(i => ({ok: i.complete && i.naturalWidth > 0, w: i.naturalWidth})),
                h1: (document.querySelector('h1') || {}).textContent,
                height: document.documentElement.scrollHeight})"""


async def render(port: int, url: str, probe: str = PROBE) -> tuple[bytes, dict, list[dict]]:
    import aiohttp

    async with aiohttp.ClientSession() as session:
        async with session.get(f"http://127.0.0.1:{port}/json/list") as response:
            targets = await response.json()
        page = next(t for t in targets if t.get("type") == "page")
        async with session.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0) as ws:
            cdp = DevTools(ws)
            for domain in ("Runtime", "Log", "Page", "Network"):
                await cdp.call(f"{domain}.enable")
            await cdp.call("Emulation.setDeviceMetricsOverride", width=WIDTH, height=HEIGHT,
                           deviceScaleFactor=1, mobile=False)
            await cdp.call("Page.navigate", url=url)
            await cdp.wait_for("Page.loadEventFired")
            found = await cdp.call("Runtime.evaluate", returnByValue=True, expression=probe)
            shot = await cdp.call("Page.captureScreenshot", format="png")
            return base64.b64decode(shot["data"]), json.loads(found["result"]["value"]), cdp.events


def page_problems(events: list[dict]) -> list[str]:
    """Console errors, uncaught exceptions, error log entries, and any load that is not
    the page itself or a data: URI."""
    problems = []
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            problems.append(f"console.{params['type']}: {params.get('args')}")
        elif method == "Runtime.exceptionThrown":
            problems.append(f"exception: {params.get('exceptionDetails', {}).get('text')}")
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            problems.append(f"log: {params['entry'].get('text')} {params['entry'].get('url', '')}")
        elif method == "Network.requestWillBeSent":
            url = params.get("request", {}).get("url", "")
            if not url.startswith(("file:", "data:")):
                problems.append(f"network request: {url}")
    return problems


def png_pixels(png: bytes) -> np.ndarray:
    import io

    import matplotlib.image

    return matplotlib.image.imread(io.BytesIO(png), format="png")


def browse(chromium: str, page: Path, tmp_path: Path, probe: str = PROBE) -> tuple[bytes, dict, list[dict]]:
    """Open `page` in a fresh headless Chromium; its screenshot, a probe of the DOM (`probe`: a
    JavaScript expression that returns JSON text), and every event."""
    profile = tmp_path / "chromium-profile"
    log = (tmp_path / "chromium.log").open("wb")
    # its singleton folder (left by the SIGKILL below) in a temp folder of its own, short: a
    # Unix socket's path has at most 107 bytes, which tmp_path under xdist exceeds
    own_tmp = Path(tempfile.mkdtemp(prefix="chromium-"))
    proc = subprocess.Popen(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", f"--user-data-dir={profile}",
         "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0", f"--window-size={WIDTH},{HEIGHT}",
         "about:blank"], stdout=log, stderr=log, start_new_session=True,
        env={**os.environ, "TMPDIR": str(own_tmp)})
    try:
        port = devtools_port(profile, proc)
        return asyncio.run(asyncio.wait_for(render(port, page.as_uri(), probe), timeout=60))
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # its own session: the browser and its helpers
        proc.wait(timeout=10)
        log.close()
        shutil.rmtree(own_tmp, ignore_errors=True)


def test_the_browser_check_sees_console_errors_and_external_loads(chromium, tmp_path):
    page = tmp_path / "bad.html"
    page.write_text('<!DOCTYPE html><html><body><h1>x</h1><script>console.error("boom")</script>'
                    '<img src="http://127.0.0.1:9/nothing.png"></body></html>')
    _, _, events = browse(chromium, page, tmp_path)
    problems = "\n".join(page_problems(events))
    assert "boom" in problems and "network request: http://127.0.0.1:9/nothing.png" in problems


def test_report_renders_in_headless_chromium(record, chromium, tmp_path):
    png, probe, events = browse(chromium, write_report(record), tmp_path)
    shot = tmp_path / "report.png"
    shot.write_bytes(png)
    keep = os.environ.get("SPECGATE_KEEP_SCREENSHOT")  # to look at it: a path to copy it to
    if keep:
        shutil.copy(shot, keep)

    assert page_problems(events) == []
    assert probe["h1"] == "sim_smoke"
    assert probe["images"] and all(i["ok"] for i in probe["images"]), probe["images"]  # every data URI decoded
    assert probe["height"] > HEIGHT / 2
    pixels = png_pixels(png)
    assert pixels.shape[:2] == (HEIGHT, WIDTH)
    rgb = np.rint(pixels[..., :3] * 255).astype(np.int32)
    colours = np.unique((rgb[..., 0] << 16) | (rgb[..., 1] << 8) | rgb[..., 2])
    assert len(colours) > 100, f"the screenshot looks blank ({len(colours)} distinct colours)"
    # the verdict badge's red and the passed badges' green are on screen
    assert np.any(np.all(np.abs(rgb - (0xb4, 0x23, 0x18)) < 12, axis=-1)), "no failed-red on the page"
    assert np.any(np.all(np.abs(rgb - (0x17, 0x80, 0x3d)) < 12, axis=-1)), "no passed-green on the page"


def test_the_report_draws_the_per_request_accept_length_histogram(record):
    results = json.loads((record / "results.json").read_text())
    results["arms"]["eagle3"]["accept_length_per_request"] = {
        "n": 6, "p10": 1.5, "p50": 2.25, "p90": 3.0, "min": 1.25, "max": 3.25, "bin_width": 0.25,
        "histogram": [[1.25, 1], [1.5, 1], [2.25, 2], [3.0, 1], [3.25, 1]]}
    results["arms"]["eagle3"]["acceptance_per_position"] = [0.71, 0.42]
    (record / "results.json").write_text(json.dumps(results))
    page = References()
    text = write_report(record).read_text()
    page.feed(text)
    assert len(page.refs) == 4  # latency, throughput, the accept length histogram, the telemetry plot
    assert 'alt="histogram of the accept length per request, per arm"' in text
    assert "<h2>Acceptance</h2>" in text and "0.71 · 0.42" in text
    # a record without the distribution has no such chart (the fixture's own page)
    results["arms"]["eagle3"].pop("accept_length_per_request")
    (record / "results.json").write_text(json.dumps(results))
    assert "histogram of the accept length" not in write_report(record).read_text()


# --- the timeline: each arm's figures over time, its steady window shaded -------------------

def timeslices(tok_s: list[float], clock: list[float | None]) -> dict:
    slices = [{"start_ms": 1000.0 * k, "end_ms": 1000.0 * (k + 1), "output_tok_s": v, "requests_sent": 2,
               "ttft_ms": {"p50": 6.0 + k, "p99": 9.0, "n": 2}, "itl_ms": {"p50": 4.0, "p99": 11.0, "n": 80},
               "accept_length": 2.3, "sm_clock_mhz": c, "power_w": None if c is None else 300.0 + k}
              for k, (v, c) in enumerate(zip(tok_s, clock))]
    return {"slice_s": 1.0, "repeats": [{"repeat": 0, "slices": slices}]}


@pytest.fixture
def timed_record(record) -> Path:
    results = json.loads((record / "results.json").read_text())
    results["arms"]["eagle3"]["timeslices"] = timeslices([120.0, 300.0, 310.0, 305.0, 90.0], [1400.0, 1980.0, 1980.0, None, 1700.0])
    results["arms"]["eagle3"]["steady"] = {"rule": "closed_loop", "start_ms": 900.0, "end_ms": 4100.0, "window_s": 3.2,
                                           "share_of_load": 0.64, "inconclusive": None, "output_tok_s": 305.0}
    results["arms"]["baseline"]["timeslices"] = timeslices([250.0, 250.0], [None, None])
    results["arms"]["baseline"]["steady"] = {"rule": "closed_loop", "inconclusive": "never were all 4 slots busy at once"}
    (record / "results.json").write_text(json.dumps(results))
    return record


def test_the_report_draws_each_arms_timeline_with_its_steady_window(timed_record):
    page = write_report(timed_record).read_text()
    assert "<h2>Over time</h2>" in page and page.count('<svg xmlns="http://www.w3.org/2000/svg" class="timeline"') == 2
    assert page.count('class="steady"') == 6  # eagle3's 6 panels shaded; baseline's window inconclusive, none
    assert "Steady window (all slots busy): 0.90 s to 4.10 s of the run, 3.20 s, 64 % of the load; 305.0 tok/s over it." in page
    assert "Steady window inconclusive: never were all 4 slots busy at once." in page
    assert "GPU SM clock (MHz)" in page and page.count("GPU power (W)") == 1  # the baseline had no samples
    # a record without timeslices has no such section (the fixture's own page)
    results = json.loads((timed_record / "results.json").read_text())
    for arm in ("eagle3", "baseline"):
        results["arms"][arm].pop("timeslices")
    (timed_record / "results.json").write_text(json.dumps(results))
    assert "Over time" not in write_report(timed_record).read_text()


TIMELINE_PROBE = """(() => {
    const box = e => { const r = e.getBoundingClientRect(); return {w: r.width, h: r.height}; };
    const first = document.querySelector('svg.timeline');
    if (first) first.scrollIntoView();
    return JSON.stringify({
        timelines: [...document.querySelectorAll('svg.timeline')].map(box),
        steady: [...document.querySelectorAll('svg.timeline rect.steady')].map(box),
        lines: document.querySelectorAll('svg.timeline polyline').length});
})()"""


def test_the_timeline_renders_in_headless_chromium(timed_record, chromium, tmp_path):
    png, boxes, events = browse(chromium, write_report(timed_record), tmp_path, TIMELINE_PROBE)
    keep = os.environ.get("SPECGATE_KEEP_TIMELINE_SCREENSHOT")  # to look at it: a path to copy it to
    if keep:
        Path(keep).write_bytes(png)
    assert page_problems(events) == []
    assert len(boxes["timelines"]) == 2 and all(b["w"] > 800 and b["h"] > 100 for b in boxes["timelines"]), boxes
    steady = boxes["steady"]  # eagle3's shading spans 0.9 to 4.1 s of 0 to 5 s, in every panel
    assert len(steady) == 6 and all(0.55 < s["w"] / boxes["timelines"][0]["w"] < 0.65 for s in steady), steady
    assert boxes["lines"] >= 7  # eagle3: the clock's gap splits its line in two
