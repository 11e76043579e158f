"""The web UI in a real browser: Debian's chromium (headless, driven by Playwright for
Python) against a real trainyard-controller (--web-listen on loopback, a token file) and
a real worker training a job.

  1. Without a token the job page shows the token prompt (the API said 401); an
     unknown token brings it back, saying it was refused.
  2. With a viewer token the loss chart gets points, then more points (it grows while
     the job trains), its validation series gets points ([validation] on, every 5
     steps), the tokens/s chart has points, the compile table has rows, and the
     canvas really has both curves drawn on it.
  3. The fleet page lists the worker, the jobs list the job (the token kept). A second
     real worker on the fake NVML's two GPUs joins: `trainyard workers` and the fleet
     page show its GPUs and their samples as the controller has them. With
     /api/fleet answered as the controller does plus a GPU worker (gpu_worker.json,
     the JSON web_api_test.cc pins WorkerJson to), the page shows its models, free
     and unhealthy GPUs, capabilities, and each GPU's utilisation, memory,
     temperature, power, errors and state; saves web-fleet-gpus.png beside --screenshot.
     g1 is cordoned: its row says so with the reason. The job's JSON given a
     preemption and its owner's share, the attempt, quota and fair share cards show them.
  4. A screenshot of the job page is saved (--screenshot), kept by CI as an artifact.
  Actions (before 5): a viewer's job and fleet pages have no action buttons; as the
     admin it clicks Checkpoint now (refused without checkpoint.dir; `trainyard audit`
     has the web row), resubmit with a bad --set key (the form names it) and with
     training.steps=20 (`trainyard get` of the new job has the edits), Cancel
     (`trainyard get` names root (admin) via web), and cordon, uncordon and drain of w1
     on the fleet page, each checked with `trainyard workers` and `trainyard audit`.
  5. The job cancelled (by the Cancel button), its events are the proto3 JSON of trainyard.v1.Event (every
     field by its .proto name, 64-bit integers as strings), and the job page's charts
     hold exactly the steps (and validation runs) the API served, the step card the
     last one; the time card says how long it ran, not "running for".
  6. A job whose dataset file is missing fails at once (the worker checks it before
     starting a rank): its page's empty charts say it ended before reporting a step.
Every page it visits must show no literal null, undefined or NaN (text, titles), its
dates are ISO 8601 (2026-12-06T10:47:17Z), and at 1400 px the job page's card
subtitles are not cut and its compile table fits the page's width.

Run by ctest (tests/server/web/CMakeLists.txt, label `web`) with the tree's Python
(TRAINYARD_PYTHON, the venv of deploy/python-requirements.txt):
  python3 job_page_test.py --controller BIN --worker BIN --cli BIN --job-file TOML
       --screenshot PNG --fake-nvml LIBNVIDIA-ML.SO.1 [--chromium /usr/bin/chromium]
Playwright (PyPI's `playwright`, its sync API) drives the system chromium through
executable_path: no browser is downloaded (`playwright install` is never needed).
"""

import hashlib
import json
import os
import random
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.error
import urllib.parse
import urllib.request

DEADLINE_S = 130  # the whole test; ctest's TIMEOUT (150) is above it
started = time.monotonic()

# ctest reads stdout and stderr through pipes: every line as it is written (the watchdog
# ends the process with os._exit), in UTF-8 whatever the locale (the page shows "2×").
for _stream in (sys.stdout, sys.stderr):
    _stream.reconfigure(encoding="utf-8", errors="backslashreplace", line_buffering=True)


def arg(name, fallback=None):
    argv = sys.argv
    flag = f"--{name}"
    if flag in argv:
        i = argv.index(flag)
        if i + 1 < len(argv):
            return argv[i + 1]
    if fallback is not None:
        return fallback
    fail(f"missing --{name}")


def log(msg):
    print(f"[web {time.monotonic() - started:.1f}s] {msg}")


def js(value):
    """A value as JSON.stringify writes it (the messages quote strings so)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def squash(text):
    return re.sub(r"\s+", " ", text)


def expect_text(locator, what, want):
    """The text of `locator` (waited for) must hold every string of `want`."""
    locator.first.wait_for(timeout=10_000)
    text = squash(locator.first.text_content() or "")
    for w in want:
        if w not in text:
            fail(f"{what}: no {js(w)} in {js(text)}")


# What a value the page failed to format looks like once it reaches the DOM.
LITERALS = re.compile(r"\b(null|undefined|NaN)\b")
ISO_TIME = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"


def check_no_literals(page, where):
    """No literal null, undefined or NaN in the page's text or in a title, label or
    placeholder (what a tooltip shows)."""
    texts = page.evaluate("""() => {
      const out = [document.body.innerText];
      for (const el of document.querySelectorAll('[title],[aria-label],[placeholder]')) {
        for (const a of ['title', 'aria-label', 'placeholder']) if (el.hasAttribute(a)) out.push(el.getAttribute(a));
      }
      return out;
    }""")
    for text in texts:
        m = LITERALS.search(text or "")
        if m:
            around = squash(text[max(0, m.start() - 80):m.end() + 80])
            fail(f"{where}: the page shows a literal {m.group(1)}: ...{around}...")


def check_layout_at_1400(page):
    """The job page at the test's 1400 px: every card subtitle whole (wrapped, not cut),
    the compile table inside its section, nothing wider than the window."""
    cut = page.evaluate("""() => [...document.querySelectorAll('.card-sub')]
        .filter((e) => e.scrollWidth > e.clientWidth + 1 || e.scrollHeight > e.clientHeight + 1)
        .map((e) => e.textContent)""")
    if cut:
        fail(f"card subtitles cut at 1400 px: {js(cut)}")
    widths = page.evaluate("""() => {
      const t = document.querySelector('#compile-table');
      return {table: t.getBoundingClientRect().width, section: t.parentElement.getBoundingClientRect().width,
              page: document.documentElement.scrollWidth, window: window.innerWidth};
    }""")
    if widths["table"] > widths["section"] + 1 or widths["page"] > widths["window"]:
        fail(f"the compile table overflows sideways at 1400 px: {js(widths)}")


def worker_row(page, name):
    """The fleet page's row of worker `name` (its first cell is the name)."""
    return page.locator("#workers-table tbody tr").filter(
        has=page.locator("td:first-child", has_text=re.compile(f"^{name}$")))


def is_decimal_string(value):
    """A 64-bit integer as proto3 JSON writes it: a string of decimal digits."""
    return isinstance(value, str) and re.fullmatch(r"[0-9]+", value) is not None


def is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_real_gpu_worker(page):
    """3a. A real GPU worker: trainyard-worker on two H200s of the fake NVML (--fake-nvml),
    registered with the controller and heartbeating samples; `trainyard workers` and
    the fleet page show what the controller made of them."""
    config = os.path.join(work_dir, "fake_nvml.conf")
    with open(config, "w") as f:
        f.write("count 2\nname NVIDIA H200\nmemory_mib 143771\ndriver 580.159.04\ncuda 13000\n"
                "nvlink all\nutil 0 0.5\nutil 1 0.25\ntemp 0 61\npower_mw 0 350000\nmem_used_mib 0 40960\n")
    ports = rendezvous + 10
    start("gpu-worker", [bins["worker"], "--controller", f"127.0.0.1:{grpc_port}", "--name", "gw",
                         "--rendezvous-ports", f"{ports}-{ports + 9}", "--work-dir", os.path.join(work_dir, "gw"),
                         "--nvml-library", fake_nvml, "--gpu-sample-interval", "0.2"],
          {"FAKE_NVML_CONFIG": config})

    def gw_connected():
        r = cli(["workers", "--output", "json"])
        return r.status == 0 and any(
            w.get("name") == "gw" and w.get("connected") and len(w.get("gpu_samples") or []) == 2
            for w in json_lines(r.stdout))
    wait_for("worker gw to connect with its GPU samples", gw_connected, 30_000)
    table = cli(["workers"])
    line = next((l for l in table.stdout.split("\n") if l.startswith("gw ")), None)
    if not line:
        fail(f"trainyard workers lists no gw:\n{table.stdout}")
    for want in ["cuda", "2× NVIDIA H200 140 GiB", "2 (0,1)"]:
        if want not in line:
            fail(f"trainyard workers' gw line lacks {js(want)}: {line}")
    row = worker_row(page, "gw")
    expect_text(row, "gw's row", ["cuda", "2× NVIDIA H200 140 GiB", "2 free", "driver 580.159.04"])

    def gpu(i):
        return page.locator(f'#gpus-table tbody tr[data-worker="gw"][data-gpu="{i}"]')
    expect_text(gpu(0), "gw GPU 0", ["NVIDIA H200", "GPU-00000000-0000-0000-0000-000000000000", "50%",
                                     "40.0 GiB / 140.4 GiB", "61 °C", "350 W", "free"])
    expect_text(gpu(1), "gw GPU 1", ["25%", "free"])
    log(f'a real GPU worker: trainyard workers says "{squash(line)}"; the fleet page shows its GPUs\' samples')


def check_gpu_fleet(page):
    """3b. The fleet page with a GPU worker (see the header)."""
    check_real_gpu_worker(page)
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu_worker.json"), encoding="utf-8") as f:
        gpu_worker = json.load(f)

    def fleet_with_a_gpu_worker(route):
        response = route.fetch()
        body = response.json()
        body["workers"].append({**gpu_worker, "jobs": []})
        body["connected_workers"] += 1
        body["slots"] += gpu_worker["slots"]
        body["free_slots"] += gpu_worker["free_slots"]
        body["gpus"] += 3
        body["free_gpus"] += 1
        body["unhealthy_gpus"] += 2
        route.fulfill(response=response, json=body)
    page.route("**/api/fleet", fleet_with_a_gpu_worker)
    row = worker_row(page, "g1")
    row.wait_for(timeout=10_000)  # the page polls every 3 s
    expect_text(row, "the GPU worker's row",
                ["3× NVIDIA H200 140 GiB", "1 free", "2 unhealthy", "cuda 12.4", "nccl", "bf16",
                 "driver 550.54.15 · CUDA 12.4"])
    if "cudagraph" in (row.text_content() or ""):
        fail("g1 shows cudagraph, which its rank binary lacks")
    # g1 is cordoned (gpu_worker.json): marked, with the reason; w1 is not.
    expect_text(row.locator("td.link"), "the cordoned worker's link cell", ["connected", "cordoned", "ECC errors: RMA pending"])
    if "cordoned" in (worker_row(page, "w1").text_content() or ""):
        fail("w1 is marked cordoned")
    expect_text(worker_row(page, "w1").locator("td.gpus"), "w1's GPUs", ["–"])

    def gpu(i):
        return page.locator(f'#gpus-table tbody tr[data-worker="g1"][data-gpu="{i}"]')
    expect_text(gpu(0), "GPU 0", ["NVIDIA H200", "GPU-0", "25%", "40.0 GiB / 140.4 GiB", "55 °C", "312 W",
                                  "ECC 0 · XID 0", "free"])
    expect_text(gpu(1), "GPU 1", ["unhealthy", "taken out of service by the controller"])
    expect_text(gpu(2), "GPU 2", ["ECC 4 · XID 2 (last 48)", "unhealthy", "uncorrectable ECC error"])
    expect_text(gpu(2).locator("td.gpu-temp"), "GPU 2's temperature (NVML gave none)", ["–"])
    # gw's two free GPUs and g1's one free of three.
    expect_text(page.locator(".card", has_text="GPUs free"), "the GPUs card", ["3 / 5", "2 unhealthy"])
    page.screenshot(path=os.path.join(os.path.dirname(screenshot), "web-fleet-gpus.png"), full_page=True)
    check_no_literals(page, "the fleet page with GPU workers")
    page.unroute("**/api/fleet")
    log("fleet page shows the GPU worker g1: models, free/unhealthy GPUs, capabilities, per-GPU samples")


children = []
work_dir = None
keep_dir = False
_failing = threading.Lock()


def cleanup():
    for c in children:
        try:
            os.killpg(c.pid, signal.SIGKILL)
        except OSError:
            pass  # already gone
    if work_dir and not keep_dir:
        shutil.rmtree(work_dir, ignore_errors=True)


def report_failure(message):
    """Prints the failure and the logs' tails, and ends the children."""
    global keep_dir
    print(f"FAIL: {message}", file=sys.stderr)
    if work_dir:
        keep_dir = True
        for name in ["controller.log", "worker.log", "gpu-worker.log"]:
            p = os.path.join(work_dir, name)
            if os.path.exists(p):
                with open(p, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                print(f"---- {name} (last 3000 bytes; all of it in {p}) ----\n{text[-3000:]}", file=sys.stderr)
    cleanup()


def fail(message):
    """Fails the test (exit status 1); the browser closes as the stack unwinds."""
    if _failing.acquire(blocking=False):
        report_failure(message)
    sys.exit(1)


def deadline_passed():
    # From the watchdog's thread: the main one may be blocked inside Playwright, so this
    # ends the process itself; the Playwright driver, its stdin closed, closes chromium.
    if _failing.acquire(blocking=False):
        report_failure(f"the test ran past {DEADLINE_S} s")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


def uncaught(kind, value, tb):
    # An exception outside the browser part's try (chromium failing to start, say): the
    # same report, and the children ended; the exit status is 1.
    if _failing.acquire(blocking=False):
        report_failure("".join(traceback.format_exception(kind, value, tb)).rstrip())


sys.excepthook = uncaught

# ---- what the test needs, each missing piece named with its fix ----
try:
    from playwright.sync_api import sync_playwright
except ImportError as e:
    fail(f"Playwright for Python is not installed in {sys.executable}: run `bash deploy/install-deps.sh` "
         "(it makes /opt/trainyard/venv from deploy/python-requirements.txt), or "
         f"`{sys.executable} -m pip install -r deploy/python-requirements.txt`, then re-run cmake "
         f"so that TRAINYARD_PYTHON names that Python ({e})")
chromium_path = arg("chromium", "/usr/bin/chromium")
if not os.path.exists(chromium_path):
    fail(f"no chromium at {chromium_path}: apt-get install chromium (deploy/install-deps.sh does)")
bins = {"controller": arg("controller"), "worker": arg("worker"), "cli": arg("cli")}
for k, v in bins.items():
    if not os.path.exists(v):
        fail(f"the {k} binary {v} is not built")
job_file = arg("job-file")
screenshot = arg("screenshot")
fake_nvml = arg("fake-nvml")
if not os.path.exists(fake_nvml):
    fail(f"the fake NVML {fake_nvml} is not built (target fake_nvml)")

work_dir = tempfile.mkdtemp(prefix="ty-web-")
watchdog = threading.Timer(DEADLINE_S, deadline_passed)
watchdog.daemon = True
watchdog.start()

# ---- tokens: the controller stores only their sha256 ----
admin_token = secrets.token_hex(16)
viewer_token = secrets.token_hex(16)


def sha(t):
    return hashlib.sha256(t.encode()).hexdigest()


token_file = os.path.join(work_dir, "tokens")
with open(os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
    f.write(f"{sha(admin_token)} admin root\n{sha(viewer_token)} viewer dashboard\n")


# ---- a controller and a worker ----
def start(name, argv, env=None):
    with open(os.path.join(work_dir, f"{name}.log"), "a") as out:
        # Its own session and process group, so cleanup ends it and whatever it started.
        child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                 start_new_session=True, env={**os.environ, **(env or {})})
    children.append(child)
    return child


def exited(child):
    """None while it runs, else how it ended ({code, signal}, as node reports it)."""
    rc = child.poll()
    if rc is None:
        return None
    if rc < 0:
        return {"code": None, "signal": signal.Signals(-rc).name}
    return {"code": rc, "signal": None}


# How the test waits between polls: time.sleep until there is a page, then the page's
# wait_for_timeout, which lets Playwright's sync API serve the routes and events that
# came meanwhile (a plain sleep holds them until the next Playwright call).
sleep = time.sleep


def wait_for(what, fn, timeout_ms):
    until = time.monotonic() + timeout_ms / 1000
    while time.monotonic() < until:
        v = fn()
        if v:
            return v
        sleep(0.1)
    fail(f"timed out after {timeout_ms / 1000:g} s waiting for {what}")


def read_text(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


port_file = os.path.join(work_dir, "port")
controller = start("controller", [
    bins["controller"], "--listen", "127.0.0.1:0", "--data-dir", os.path.join(work_dir, "data"), "--port-file", port_file,
    "--web-listen", "127.0.0.1:0", "--token-file", token_file])


def controller_port():
    ended = exited(controller)
    if ended:
        fail(f"the controller exited ({js(ended)})")
    return os.path.exists(port_file) and read_text(port_file).strip()


grpc_port = wait_for("the controller's port file", controller_port, 20_000)


# --web-listen port 0: the controller logs the port it bound.
def logged_web_port():
    m = re.search(r"web UI on http://127\.0\.0\.1:(\d+)/", read_text(os.path.join(work_dir, "controller.log")))
    return m and m.group(1)


web_port = wait_for("the controller's \"web UI on\" log line", logged_web_port, 10_000)
base = f"http://127.0.0.1:{web_port}"
log(f"controller on 127.0.0.1:{grpc_port}, web UI on {base}")

# Below the kernel's ephemeral ports (32768 and up), which outgoing connections and Gloo
# take: a rank's store cannot bind a port one of them holds.
rendezvous = 10000 + random.randrange(2000) * 10
start("worker", [bins["worker"], "--controller", f"127.0.0.1:{grpc_port}", "--name", "w1", "--slots", "1",
                 "--rendezvous-ports", f"{rendezvous}-{rendezvous + 9}", "--work-dir", os.path.join(work_dir, "w1")])


class CliResult:
    def __init__(self, status, stdout, stderr):
        self.status, self.stdout, self.stderr = status, stdout, stderr


def cli(args):
    try:
        r = subprocess.run([bins["cli"], *args, "--controller", f"127.0.0.1:{grpc_port}"],
                           env={**os.environ, "TRAINYARD_TOKEN": admin_token}, stdin=subprocess.DEVNULL,
                           capture_output=True, encoding="utf-8", errors="replace", timeout=30)
    except subprocess.TimeoutExpired as e:
        def text(b):
            return b.decode("utf-8", "replace") if isinstance(b, bytes) else (b or "")
        return CliResult(None, text(e.stdout), text(e.stderr))
    return CliResult(r.returncode, r.stdout, r.stderr)


def json_lines(text):
    """The JSON objects among the lines of `text` (other lines are skipped)."""
    out = []
    for line in text.split("\n"):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            out.append(value)
    return out


def w1_connected():
    r = cli(["workers", "--output", "json"])
    return r.status == 0 and any(w.get("name") == "w1" and w.get("connected") for w in json_lines(r.stdout))


wait_for("worker w1 to connect", w1_connected, 20_000)

# A job that outlasts the test however fast the machine (it is cancelled at the end):
# the tiny preset, every step reported, compile summaries often enough to fill the
# table's hit counts, and a one-batch validation every 5 steps for the loss chart's
# second series.
submit = cli(["submit", job_file, "--set", "model.preset=tiny", "--set", "training.steps=50000",
              "--set", "training.log_freq=1", "--set", "compile.summary_every=5",
              "--set", "validation.dataset=synthetic", "--set", "validation.freq=5", "--set", "validation.steps=1",
              "--output", "json"])
if submit.status != 0:
    fail(f"trainyard submit failed: {submit.stderr}")
submitted = next((l for l in submit.stdout.split("\n") if l.startswith("{")), None)
if submitted is None:
    fail(f"trainyard submit printed no job: {submit.stdout}")
job_id = json.loads(submitted)["id"]
log(f"submitted {job_id}")

# StepMetrics' fields by their .proto names (proto/trainyard/v1/event.proto), sorted.
STEP_METRICS_FIELDS = ",".join(sorted(["step", "loss", "grad_norm", "lr", "tokens_per_s", "model_tflops", "mfu",
                                       "step_ms", "data_ms", "peak_rss_mb", "expert_load", "imbalance", "tokens",
                                       "epoch", "peak_tensor_bytes", "dropped_tokens"]))
VALIDATION_FIELDS = ",".join(sorted(["step", "loss", "tokens", "ms"]))
# The API on loopback, never through a proxy from the environment (as node's fetch).
_http = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def encode_uri_component(s):
    return urllib.parse.quote(s, safe="!~*'()")


def job_events(base, id, token, kinds):
    """Every event of the job of `kinds`, page by page, as the API serves them."""
    out = []
    after = 0
    for _ in range(200):
        request = urllib.request.Request(
            f"{base}/api/jobs/{encode_uri_component(id)}/events?kinds={kinds}&limit=2000&after_seq={after}",
            headers={"Authorization": f"Bearer {token}"})
        try:
            with _http.open(request, timeout=30) as res:
                body = json.loads(res.read().decode("utf-8"))
        except urllib.error.HTTPError as e:
            fail(f"events: HTTP {e.code}")
        out.extend(body["events"])
        after = body["next_after_seq"]
        if not body["more"]:
            return out
    fail("events: more than 200 pages")


# ---- the browser ----
with sync_playwright() as playwright:
    browser = playwright.chromium.launch(
        executable_path=chromium_path, headless=True,
        # --no-sandbox: CI runs as root, where chromium's sandbox refuses to start.
        args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
    try:
        context = browser.new_context(viewport={"width": 1400, "height": 1000}, device_scale_factor=1)
        page = context.new_page()

        def sleep(seconds):
            page.wait_for_timeout(seconds * 1000)

        console_errors = []
        page.on("console", lambda m: console_errors.append(m.text)
                if m.type == "error" and not re.search("401", m.text) else None)
        page.on("pageerror", lambda e: console_errors.append(str(e)))
        job_url = f"{base}/#/jobs/{encode_uri_component(job_id)}"

        # 1. No token: the API answers 401 and the page asks for one.
        page.goto(job_url)
        page.locator("#token-prompt").wait_for(state="visible", timeout=15_000)
        message = page.locator("#token-message").text_content()
        if not re.search("requires a token", message or ""):
            fail(f"the token prompt says {js(message)}")
        log("without a token the page shows the token prompt")

        # A token the controller does not know: asked again, saying why.
        page.fill("#token-input", "not-a-known-token")
        page.click("#token-form button[type=submit]")
        wait_for("the prompt to say the token was refused", lambda: (
            re.search(r"refused \(unknown token\)", page.locator("#token-message").text_content() or "")
            and page.locator("#token-prompt").is_visible()), 10_000)
        log("an unknown token is refused and the prompt asks again")

        # 2. The viewer token; the charts grow as the job trains.
        page.fill("#token-input", viewer_token)
        page.click("#token-form button[type=submit]")
        page.locator("#token-prompt").wait_for(state="hidden", timeout=5_000)

        def points(selector):
            return page.evaluate("(sel) => Number(document.querySelector(sel)?.dataset.points || 0)", selector)

        # The loss chart's second series: a count the page sets once it has the series at all.
        def val_points():
            return page.evaluate("""() => {
              const v = document.querySelector('#loss-chart')?.dataset.validationPoints;
              return v === undefined ? -1 : Number(v);
            }""")

        def at_least(n_min, count):
            def check():
                n = count()
                return n if n >= n_min else 0
            return check

        first = wait_for("the loss chart to have 3 points", at_least(3, lambda: points("#loss-chart")), 45_000)
        log(f"loss chart has {first} points")
        later = wait_for(f"the loss chart to grow past {first + 4} points",
                         at_least(first + 5, lambda: points("#loss-chart")), 30_000)
        log(f"loss chart grew to {later} points")
        if points("#tps-chart") < 1:
            fail("the tokens/s chart has no points")
        if val_points() < 0:
            fail("the loss chart has no validation series (data-validation-points)")
        first_val = wait_for("the loss chart's validation series to have 2 points", at_least(2, val_points), 30_000)
        log(f"validation series has {first_val} points")
        compile_rows = wait_for("rows in the compile table",
                                lambda: page.locator("#compile-table tbody tr").count(), 20_000)
        log(f"compile table has {compile_rows} row(s)")
        # Something is drawn: the loss curve's colour is on the canvas.
        drawn = page.evaluate("""() => {
          const c = document.querySelector('#loss-chart');
          const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
          let blue = 0;
          let orange = 0;  // the validation markers, #d97706
          for (let i = 0; i < d.length; i += 4) {
            if (d[i + 3] < 200) continue;
            if (d[i + 2] > 200 && d[i] < 80) ++blue;
            if (d[i] > 190 && d[i + 1] > 90 && d[i + 1] < 150 && d[i + 2] < 60) ++orange;
          }
          return {blue, orange};
        }""")
        if drawn["blue"] < 50:
            fail(f"the loss canvas has {drawn['blue']} pixels of the curve's colour")
        if drawn["orange"] < 20:
            fail(f"the loss canvas has {drawn['orange']} pixels of the validation markers' colour")
        state = page.locator(".page-head .badge").first.text_content()
        log(f"job state on the page: {state}; {drawn['blue']} curve and {drawn['orange']} validation pixels")

        # The ranks card: this CPU job's worker, no GPU; then the same job as a CUDA job
        # would come (its rank 0 on GPU 0 of w1, w1's NCCL settings), through the API's JSON.
        def job_card(label):
            return page.locator("#job-cards .card").filter(
                has=page.locator(".card-label", has_text=re.compile(f"^{label}$")))
        ranks_card = job_card("ranks")
        expect_text(ranks_card, "the ranks card", ["w1"])
        if "gpu" in (ranks_card.text_content() or ""):
            fail("a CPU job's ranks card names a GPU")

        def is_job(url):
            return urllib.parse.urlsplit(url).path == f"/api/jobs/{job_id}"

        def job_on_a_gpu(route):
            response = route.fetch()
            job = response.json()
            job["placement"] = [{**p, "gpu": 0, "gpu_uuid": "GPU-5f0c6a4e-test"} for p in job["placement"]]
            job["worker_env"] = [{"worker": "w1", "nccl_env": ["NCCL_SOCKET_IFNAME=lo"]}]
            # And as a job preempted once whose owner has a quota and a place in the queue.
            job["preemptions"] = 1
            job["share"] = {"owner": "viewer-test", "group": "research", "owner_slots_in_use": 6,
                            "owner_slot_limit": 8, "owner_gpus_in_use": 0, "owner_gpu_limit": 0,
                            "group_slots_in_use": 10, "group_slot_limit": 16, "group_gpus_in_use": 4,
                            "group_gpu_limit": 8, "weight": 2, "usage_slot_seconds": 45000,
                            "fair_share": 22500, "queue_position": 3, "queue_length": 5}
            route.fulfill(response=response, json=job)
        page.route(is_job, job_on_a_gpu)
        wait_for("the ranks card to show the rank's GPU",
                 lambda: 1 if "w1 gpu 0" in (ranks_card.text_content() or "") else 0, 10_000)
        expect_text(job_card("attempt"), "the attempt card", ["preempted 1×"])
        expect_text(job_card("quota"), "the quota card", ["6 / 8 slots", "owner viewer-test", "0 GPUs (no limit)",
                                                          "group research: 10 / 16 slots, 4 / 8 GPUs"])
        expect_text(job_card("fair share"), "the fair share card", ["3rd of 5 pending", "12.50 slot-hours used (decayed)",
                                                                    "weight 2", "share 6.25"])
        title = ranks_card.locator(".placement").get_attribute("title")
        for want in ["rank 0: w1 gpu 0 GPU-5f0c6a4e-test", "w1 NCCL: NCCL_SOCKET_IFNAME=lo"]:
            if want not in (title or ""):
                fail(f"the ranks card's title {js(title)} lacks {js(want)}")
        check_no_literals(page, "the running job's page")
        check_layout_at_1400(page)
        time_sub = job_card("running for").locator(".card-sub").text_content() or ""
        if not re.fullmatch(f"started {ISO_TIME}", time_sub):
            fail(f"the running job's time card says {js(time_sub)}, not 'started' and an ISO 8601 time")
        page.unroute(is_job)
        log("the ranks card shows the worker, and a rank's GPU and the NCCL settings when the job has them; "
            "the attempt card the preemptions, the quota and fair share cards the owner's share")

        # 4. The screenshot CI keeps.
        os.makedirs(os.path.dirname(screenshot), exist_ok=True)
        page.screenshot(path=screenshot, full_page=True)
        log(f"screenshot: {screenshot}")

        # 3. The fleet page, with the token kept for the tab.
        page.goto(f"{base}/#/fleet")
        page.locator("#workers-table tbody tr", has_text="w1").wait_for(timeout=10_000)
        if page.locator("#token-prompt").is_visible():
            fail("the token was not kept for the tab")
        log("fleet page lists w1")
        # A CPU fleet: no GPU section, and nothing where it would be.
        check_no_literals(page, "the fleet page of a CPU fleet")
        check_gpu_fleet(page)
        page.goto(f"{base}/#/jobs")
        page.locator("#jobs-table tbody tr a", has_text=job_id).wait_for(timeout=10_000)
        created = page.locator("#jobs-table tbody tr", has_text=job_id).locator("td").nth(8).text_content() or ""
        if not re.fullmatch(ISO_TIME, created):
            fail(f"the jobs list's created time is {js(created)}, not ISO 8601 (2026-12-06T10:47:17Z)")
        check_no_literals(page, "the jobs list")
        log(f"jobs list shows {job_id}, created {created}")

        # Actions. A viewer's pages have none; the admin's buttons act, and each result
        #    is checked through the CLI (gRPC), the audit log included.
        page.goto(job_url)
        page.locator(".page-head .badge").wait_for(timeout=15_000)
        page.wait_for_timeout(500)
        if page.locator("#job-actions").count() or page.locator("#action-cancel").count():
            fail("a viewer's job page shows action buttons")
        page.goto(f"{base}/#/fleet")
        worker_row(page, "w1").wait_for(timeout=10_000)
        if page.locator(".worker-actions button").count():
            fail("a viewer's fleet page shows worker actions")
        log("a viewer's job and fleet pages have no action buttons")
        page.evaluate("(t) => sessionStorage.setItem('trainyard.token', t)", admin_token)
        page.goto(job_url)
        page.reload()
        page.locator("#action-checkpoint").wait_for(timeout=15_000)

        def status_text():
            return page.locator("#action-status").text_content() or ""

        page.click("#action-checkpoint")
        # examples/debug.toml sets no checkpoint.dir: the controller refuses, as for the CLI.
        wait_for("the checkpoint's answer", lambda: re.search(r"checkpoint (saved|refused)", status_text()), 60_000)

        def audit_rows(job):
            r = cli(["audit", "--job", job, "--output", "json"])
            if r.status != 0:
                fail(f"trainyard audit failed: {r.stderr}")
            return json_lines(r.stdout)

        if not any(r.get("action") == "checkpoint" and r.get("via") == "web" and r.get("identity") == "root"
                   and r.get("role") == "admin" for r in audit_rows(job_id)):
            fail(f"no audit row of the web checkpoint: {audit_rows(job_id)}")
        log(f"checkpoint now: {js(status_text())}, and its audit row")

        page.fill("#resubmit-set", "training.stepz=20")
        page.click("#action-resubmit")
        wait_for("the resubmit form's error naming the key",
                 lambda: "training.stepz" in (page.locator("#resubmit-error").text_content() or ""), 15_000)
        page.fill("#resubmit-set", "training.steps=20\njob.name=resubmitted")
        page.click("#action-resubmit")
        wait_for("the resubmit", lambda: re.search(r"resubmitted as job-\d+", status_text()), 15_000)
        new_id = re.search(r"resubmitted as (job-\d+)", status_text()).group(1)
        got = json_lines(cli(["get", new_id, "--output", "json"]).stdout)
        if not got or str(got[0]["spec"]["training"]["steps"]) != "20" or got[0]["spec"]["job"]["name"] != "resubmitted" \
                or got[0]["owner"] != "root":
            fail(f"the resubmitted job is not the edited spec: {got[:1]}")
        if cli(["cancel", new_id]).status != 0:
            fail(f"cancel of {new_id} failed")
        log(f"resubmit: a bad key is named in the form; {new_id} has the edits")

        page.click("#action-cancel")
        wait_for("the job to be cancelled",
                 lambda: (json_lines(cli(["get", job_id, "--output", "json"]).stdout) or [{}])[0].get("state")
                 == "CANCELLED", 20_000)
        # The audit row's outcome is set just after the cancel commits.
        wait_for("`trainyard get` to name who cancelled the job", lambda: re.search(
            r"cancelled by root \(admin\) at 20\S+ \S+ via web", cli(["get", job_id]).stdout), 15_000)
        log("cancel: the job is CANCELLED and `trainyard get` says by root (admin) via web")

        def w1_cordoned():
            return any(w.get("name") == "w1" and w.get("cordoned")
                       for w in json_lines(cli(["workers", "--output", "json"]).stdout))

        page.goto(f"{base}/#/fleet")
        w1_row = worker_row(page, "w1")
        w1_row.locator("button.action-cordon").wait_for(timeout=10_000)
        w1_row.locator("button.action-cordon").click()
        wait_for("w1 cordoned", w1_cordoned, 15_000)
        w1_row.locator("button.action-uncordon").click()
        wait_for("w1 uncordoned", lambda: not w1_cordoned(), 15_000)
        w1_row.locator("button.action-drain").click()
        wait_for("w1 drained (and so cordoned)", w1_cordoned, 15_000)
        w1_row.locator("button.action-uncordon").click()
        wait_for("w1 uncordoned again", lambda: not w1_cordoned(), 15_000)
        fleet_rows = [r for r in json_lines(cli(["audit", "--output", "json"]).stdout)
                      if r.get("target") == "w1" and r.get("via") == "web" and r.get("outcome") == "OK"]
        if sorted(r["action"] for r in fleet_rows) != ["cordon", "drain", "uncordon", "uncordon"]:
            fail(f"the fleet actions' audit rows: {fleet_rows}")
        check_no_literals(page, "the admin's fleet page")
        log("fleet: cordon, uncordon and drain act on w1, each with its audit row")
        page.evaluate("(t) => sessionStorage.setItem('trainyard.token', t)", viewer_token)
        # The refusals above were asked for (the checkpoint's 409, the bad key's 400): the
        # browser logs each refused request; nothing else may be there.
        expected_refusals = [e for e in console_errors
                             if re.fullmatch(r"Failed to load resource: the server responded with a status of "
                                             r"(409 \(Conflict\)|400 \(Bad Request\))", e)]
        if len(expected_refusals) != 2:
            fail(f"the page logged {expected_refusals} for the two refused actions")
        for e in expected_refusals:
            console_errors.remove(e)

        # 5. The events are the proto3 JSON of trainyard.v1.Event, and the page reads that
        #    dialect: once the job ended, its charts hold exactly the steps the API served.
        # A rank's last steps may commit after the CANCELLED state, and the page stops polling
        # once the job ended and it read up to last_seq: wait for the rank to be gone first.
        wait_for("the rank to be killed", lambda: any(
            e["rank_state"]["state"] in ("KILLED", "EXITED", "FAILED")
            for e in job_events(base, job_id, viewer_token, "rank_state")), 20_000)
        page.goto(job_url)
        page.locator(".page-head .badge", has_text="CANCELLED").wait_for(timeout=20_000)
        served = job_events(base, job_id, viewer_token, "step_metrics")
        loss, tps = set(), set()
        for e in served:
            # Every field of an Event by its .proto name; 64-bit integers as decimal strings.
            keys = ",".join(sorted(k for k in e if k != "time"))
            if keys != "attempt,job_id,rank,seq,source_seq,step_metrics":
                fail(f"an event has the fields {keys}: {js(e)}")
            m = e["step_metrics"]
            fields = ",".join(sorted(m))
            if fields != STEP_METRICS_FIELDS:
                fail(f"step_metrics has the fields {fields}, not {STEP_METRICS_FIELDS}")
            if not is_decimal_string(e["seq"]) or not is_decimal_string(m["step"]) or not is_decimal_string(m["tokens"]):
                fail(f"64-bit integers are not decimal strings: {js(e)}")
            if is_number(m["loss"]):
                loss.add(m["step"])
            if is_number(m["tokens_per_s"]) and m["tokens_per_s"] > 0:
                tps.add(m["step"])
        validations = job_events(base, job_id, viewer_token, "validation")
        val_steps = set()
        for e in validations:
            fields = ",".join(sorted(e["validation"]))
            if fields != VALIDATION_FIELDS:
                fail(f"validation has the fields {fields}, not {VALIDATION_FIELDS}")
            if e["rank"] != 0 or not is_decimal_string(e["validation"]["step"]):
                fail(f"a validation event: {js(e)}")
            if is_number(e["validation"]["loss"]):
                val_steps.add(e["validation"]["step"])
        # A long job's events may take the page a few polls to read (each poll reads at most
        # 50 pages); the charts only grow, up to what the API served.
        shown = {}
        until = time.monotonic() + 15
        while time.monotonic() < until:
            shown = {"loss": points("#loss-chart"), "tps": points("#tps-chart"), "validation": val_points()}
            if shown["loss"] == len(loss) and shown["tps"] == len(tps) and shown["validation"] == len(val_steps):
                break
            sleep(0.25)
        if shown.get("loss") != len(loss) or shown.get("tps") != len(tps) or shown.get("validation") != len(val_steps):
            fail(f"the charts show {js(shown)} points; the API served {len(loss)} loss, {len(tps)} tokens/s "
                 f"and {len(val_steps)} validation steps")
        last_step = served[-1]["step_metrics"]["step"] if served else "0"
        step_card = page.locator("#job-cards .card-value").first.text_content() or ""
        if not step_card.startswith(f"{last_step} / "):
            fail(f"the step card says {js(step_card)}, the last step is {last_step}")
        log(f"{len(served)} step_metrics and {len(validations)} validation events as proto3 JSON; the charts hold "
            f"their {len(loss)} and {len(val_steps)} steps")
        # An ended job ran for a while; it is not "running for" anything.
        expect_text(job_card("ran for"), "the cancelled job's time card", ["ended 20"])
        if page.locator("#job-cards .card-label", has_text="running for").count():
            fail("the cancelled job's page still says running for")
        check_no_literals(page, "the cancelled job's page")
        log("the cancelled job's page says how long it ran")

        # 6. A missing dataset file: the worker refuses before starting a rank, and the
        #    job fails at once (no restart); its page's charts say why they are empty.
        missing = os.path.join(work_dir, "no-such-corpus.txt")
        bad = cli(["submit", job_file, "--set", "model.preset=tiny", "--set", "training.dataset=text",
                   "--set", f"training.dataset_path={missing}", "--set", "restart.max_restarts=2",
                   "--output", "json"])
        if bad.status != 0:
            fail(f"trainyard submit of the job without its dataset failed: {bad.stderr}")
        bad_id = json.loads(next(l for l in bad.stdout.split("\n") if l.startswith("{")))["id"]

        def failed_job():
            r = cli(["get", bad_id, "--output", "json"])
            jobs = json_lines(r.stdout) if r.status == 0 else []
            return jobs[0] if jobs and jobs[0].get("state") == "FAILED" else None
        failed = wait_for(f"{bad_id} to fail", failed_job, 30_000)
        reason = failed.get("failure_reason", "")
        for want in [f"file {missing} does not exist", "permanent"]:
            if want not in reason:
                fail(f"{bad_id} failed with {js(reason)}, which lacks {js(want)}")
        page.goto(f"{base}/#/jobs/{encode_uri_component(bad_id)}")
        page.locator(".page-head .badge", has_text="FAILED").wait_for(timeout=20_000)
        expect_text(page.locator("#loss-chart + .chart-empty"), "the failed job's loss chart",
                    ["no step metrics: the job ended FAILED before it reported a step"])
        if page.locator("#loss-chart + .chart-empty").is_hidden():
            fail("the failed job's empty loss chart says nothing")
        check_no_literals(page, "the failed job's page")
        log(f"{bad_id} without its dataset failed at once ({squash(reason)[:120]}...); its page says why the "
            "charts are empty")
        if console_errors:
            fail(f"errors in the page: {' | '.join(console_errors)}")
    except Exception:  # SystemExit (fail) passes through
        fail(traceback.format_exc())
    finally:
        try:
            browser.close()
        except Exception:
            pass

watchdog.cancel()
cleanup()
log("PASS")
