"""The sweep page in a real browser: Debian's chromium (headless, driven by Playwright for
Python) against web_sweep_page_server (sweep_page_server.cc), the in-process controller
of the web API's tests behind the real web listener. It holds alice's sweep "lr-grid"
(training.lr x model.top_k, six children, max_concurrent 2, submitted through
JobActions) whose children have stored training and validation losses, and alice's job
"solo" outside it. Everything the page shows is compared with what the API serves.

  1. alice's token. The jobs list has a sweeps table linking to the sweep, and marks
     each of the six children with its sweep (the solo job unmarked).
  2. The sweep page: the header (name, owner, children, max concurrent, the axes and
     their values, the children by state as the API counts them); the table of
     children in rank order (ranked ones by validation loss, then the rest by index),
     each row's rank, label, state, step and "val loss @ step" as the API has them;
     the chart: one series per child (data-series), each legend entry's training and
     validation point counts equal to the steps its events hold, and every series
     with a validation drawn on the canvas in its colour.
  3. The server stores two more steps and a better validation for child 0: the chart's
     counts grow and child 0 moves to the top of the table.
  4. A child's job page links back to its sweep.
  5. bob's token: the sweep reads as missing (the API's 404 message). A viewer's page
     has no Cancel button.
  6. alice clicks Cancel: every child is CANCELLED (through the API), the page says so,
     shows the sweep ENDED and offers no Cancel any more.
Every page it visits must show no literal null, undefined or NaN. A screenshot of the
sweep page is saved (--screenshot).

Run by ctest (tests/server/web/CMakeLists.txt, label `web`) with the tree's Python:
  python3 sweep_page_test.py --server WEB_SWEEP_PAGE_SERVER --screenshot PNG [--chromium /usr/bin/chromium]
"""

import hashlib
import json
import os
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

DEADLINE_S = 100  # the whole test; ctest's TIMEOUT (120) is above it
started = time.monotonic()

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
    print(f"[sweep page {time.monotonic() - started:.1f}s] {msg}")


def js(value):
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def squash(text):
    return re.sub(r"\s+", " ", text or "").strip()


server = None
work_dir = None
keep_dir = False
_failing = threading.Lock()


def cleanup():
    if server is not None and server.poll() is None:
        try:
            os.killpg(server.pid, signal.SIGKILL)
        except OSError:
            pass
    if work_dir and not keep_dir:
        shutil.rmtree(work_dir, ignore_errors=True)


def report_failure(message):
    global keep_dir
    print(f"FAIL: {message}", file=sys.stderr)
    if work_dir:
        keep_dir = True
        p = os.path.join(work_dir, "server.log")
        if os.path.exists(p):
            with open(p, encoding="utf-8", errors="replace") as f:
                text = f.read()
            print(f"---- server.log (last 3000 bytes; all of it in {p}) ----\n{text[-3000:]}", file=sys.stderr)
    cleanup()


def fail(message):
    if _failing.acquire(blocking=False):
        report_failure(message)
    sys.exit(1)


def deadline_passed():
    if _failing.acquire(blocking=False):
        report_failure(f"the test ran past {DEADLINE_S} s")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


def uncaught(kind, value, tb):
    if _failing.acquire(blocking=False):
        report_failure("".join(traceback.format_exception(kind, value, tb)).rstrip())


sys.excepthook = uncaught

try:
    from playwright.sync_api import sync_playwright
except ImportError as e:
    fail(f"Playwright for Python is not installed in {sys.executable}: run `bash deploy/install-deps.sh` "
         f"or `{sys.executable} -m pip install -r deploy/python-requirements.txt`, then re-run cmake ({e})")
chromium_path = arg("chromium", "/usr/bin/chromium")
if not os.path.exists(chromium_path):
    fail(f"no chromium at {chromium_path}: apt-get install chromium (deploy/install-deps.sh does)")
server_bin = arg("server")
if not os.path.exists(server_bin):
    fail(f"the server {server_bin} is not built (target web_sweep_page_server)")
screenshot = arg("screenshot")

work_dir = tempfile.mkdtemp(prefix="ty-sweep-page-")
watchdog = threading.Timer(DEADLINE_S, deadline_passed)
watchdog.daemon = True
watchdog.start()

tokens = {name: secrets.token_hex(16) for name in ["admin", "viewer", "alice", "bob"]}
token_file = os.path.join(work_dir, "tokens")
with open(os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
    for name, (role, owner) in {"admin": ("admin", "root"), "viewer": ("viewer", "dashboard"),
                                "alice": ("submitter", "alice"), "bob": ("submitter", "bob")}.items():
        f.write(f"{hashlib.sha256(tokens[name].encode()).hexdigest()} {role} {owner}\n")

os.makedirs(os.path.join(work_dir, "data"))
with open(os.path.join(work_dir, "server.log"), "a") as err:
    server = subprocess.Popen([server_bin, "--data-dir", os.path.join(work_dir, "data"), "--token-file", token_file],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
                              start_new_session=True)
first = server.stdout.readline()
if not first:
    server.wait()
    fail(f"web_sweep_page_server exited ({server.returncode}) before it listened")
setup = json.loads(first)
base = f"http://127.0.0.1:{setup['port']}"
sweep_id, children, solo_id = setup["sweep"], setup["children"], setup["job"]
log(f"serving {sweep_id} ({len(children)} children) and {solo_id} on {base}")


def command(line):
    server.stdin.write(line + "\n")
    server.stdin.flush()
    answer = server.stdout.readline().strip()
    if answer != "grown":
        fail(f"the server answered {js(answer)} to {js(line)}")


_http = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def api(path, token):
    request = urllib.request.Request(f"{base}{path}", headers={"Authorization": f"Bearer {token}"})
    try:
        with _http.open(request, timeout=30) as res:
            return json.loads(res.read().decode("utf-8"))
    except urllib.error.HTTPError as e:
        fail(f"GET {path}: HTTP {e.code}: {e.read()[:300]}")


def quote(s):
    return urllib.parse.quote(s, safe="!~*'()")


def loss_steps(job, kind):
    """The steps with a finite loss among the job's events of `kind`, as the API serves them."""
    steps, after = set(), 0
    for _ in range(100):
        page = api(f"/api/jobs/{quote(job)}/events?kinds={kind}&limit=2000&after_seq={after}", tokens["alice"])
        for e in page["events"]:
            if isinstance(e[kind]["loss"], (int, float)):
                steps.add(e[kind]["step"])
        after = page["next_after_seq"]
        if not page["more"]:
            return steps
    fail("events: more than 100 pages")


def ranked(view):
    """The children in the page's order: ranked by validation loss, then the rest by index."""
    return sorted(view["children"], key=lambda c: (c["rank"] if c["rank"] > 0 else float("inf"), c["index"]))


def val_text(c):
    v = c.get("last_validation")
    if not v:
        return "–"
    return f"{v['loss']:.4f} @ {int(v['step'])}"


LITERALS = re.compile(r"\b(null|undefined|NaN)\b")


def check_no_literals(page, where):
    texts = page.evaluate("""() => {
      const out = [document.body.innerText];
      for (const el of document.querySelectorAll('[title],[aria-label],[placeholder]')) {
        for (const a of ['title', 'aria-label', 'placeholder']) if (el.hasAttribute(a)) out.push(el.getAttribute(a));
      }
      for (const el of document.querySelectorAll('*')) for (const a of el.getAttributeNames())
        if (a.startsWith('data-')) out.push(el.getAttribute(a));
      return out;
    }""")
    for text in texts:
        m = LITERALS.search(text or "")
        if m:
            around = squash(text[max(0, m.start() - 80):m.end() + 80])
            fail(f"{where}: the page shows a literal {m.group(1)}: ...{around}...")


sleep = time.sleep


def wait_for(what, fn, timeout_ms):
    until = time.monotonic() + timeout_ms / 1000
    last = None
    while time.monotonic() < until:
        last = fn()
        if last:
            return last
        sleep(0.1)
    fail(f"timed out after {timeout_ms / 1000:g} s waiting for {what}")


with sync_playwright() as playwright:
    browser = playwright.chromium.launch(executable_path=chromium_path, headless=True,
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

        def use_token(name):
            page.evaluate("(t) => sessionStorage.setItem('trainyard.token', t)", tokens[name])

        # 1. The jobs list: the sweeps table and the marked children.
        page.goto(f"{base}/#/jobs")
        page.locator("#token-prompt").wait_for(state="visible", timeout=15_000)
        page.fill("#token-input", tokens["alice"])
        page.click("#token-form button[type=submit]")
        link = page.locator(f'#sweeps-table tbody tr[data-sweep="{sweep_id}"] a[href="#/sweeps/{sweep_id}"]')
        link.wait_for(timeout=10_000)
        row_text = squash(page.locator(f'#sweeps-table tbody tr[data-sweep="{sweep_id}"]').text_content())
        for want in ["lr-grid", "alice", "training.lr ×3 · model.top_k ×2"]:
            if want not in row_text:
                fail(f"the sweeps table's row {js(row_text)} lacks {js(want)}")
        page.locator("#jobs-table tbody tr").nth(len(children)).wait_for(timeout=10_000)
        marked = page.evaluate("""(sweep) => [...document.querySelectorAll('#jobs-table tbody tr.sweep-child')]
            .filter((r) => r.dataset.sweep === sweep && r.querySelector(`a.sweep-chip[href="#/sweeps/${sweep}"]`))
            .map((r) => r.querySelector('td a').textContent)""", sweep_id)
        if sorted(marked) != sorted(children):
            fail(f"the jobs list marks {js(marked)} with {sweep_id}; its children are {js(children)}")
        solo_row = page.locator("#jobs-table tbody tr", has=page.locator(f'a[href="#/jobs/{solo_id}"]'))
        if "sweep-child" in (solo_row.get_attribute("class") or "") or solo_row.locator(".sweep-chip").count():
            fail(f"the jobs list marks {solo_id}, which is in no sweep")
        check_no_literals(page, "the jobs list with a sweep")
        log(f"jobs list: the sweeps table links {sweep_id}; its {len(children)} children are marked")

        # 2. The sweep page, compared with the API.
        link.click()
        page.wait_for_url(re.compile(f"#/sweeps/{sweep_id}$"), timeout=5_000)
        page.locator("#sweep-table tbody tr").nth(len(children) - 1).wait_for(timeout=10_000)
        view = api(f"/api/sweeps/{sweep_id}", tokens["alice"])
        head = squash(page.locator(".page-head").text_content())
        for want in [f"{sweep_id} {view['sweep']['name']}", "lr-grid", "owner alice", f"{len(children)} children",
                     "max concurrent 2"]:
            if want not in head:
                fail(f"the sweep's header {js(head)} lacks {js(want)}")
        axes = page.evaluate("""() => [...document.querySelectorAll('#sweep-axes li')].map((li) =>
            [li.dataset.key, [...li.querySelectorAll('.chip')].map((c) => c.textContent)])""")
        # The values as the controller typed them (1e-4 reads back as 0.0001).
        want_axes = [[a["key"], a["values"]] for a in view["sweep"]["axes"]]
        if axes != want_axes or [len(v) for _, v in axes] != [3, 2]:
            fail(f"the page shows the axes {js(axes)}; the API has {js(want_axes)}")
        shown_states = page.evaluate("""() => Object.fromEntries([...document.querySelectorAll('#sweep-states .state-count')]
            .map((e) => [e.dataset.state, Number(e.textContent.trim().split(/\\s+/).pop())]))""")
        want_states = {k: v for k, v in view["states"].items() if v > 0}
        if shown_states != want_states or sum(want_states.values()) != len(children):
            fail(f"the page counts {js(shown_states)} children by state; the API {js(view['states'])}")

        def table_rows():
            return page.evaluate("""() => [...document.querySelectorAll('#sweep-table tbody tr')].map((r) =>
                ({job: r.dataset.job, cells: [...r.children].map((c) => c.innerText.replace(/\\s+/g, ' ').trim())}))""")

        def expected_rows(v):
            out = []
            for c in ranked(v):
                step = int(c["last_step"])
                state = c["state"] + (f" {c['reason']}" if c.get("reason") else "")
                out.append({"job": c["job_id"], "cells": [str(c["rank"]) if c["rank"] > 0 else "–", c["job_id"],
                                                           c["label"], squash(state), str(step) if step > 0 else "–",
                                                           val_text(c)]})
            return out

        want_rows = expected_rows(view)
        got_rows = wait_for("the table to match the API " + js(want_rows),
                            lambda: (lambda rows: rows if rows == want_rows else None)(table_rows()), 10_000)
        # The stored losses rank children 2, 1, 0, 3; 4 and 5 have no validation.
        order = [r["job"] for r in got_rows]
        if order != [children[i] for i in [2, 1, 0, 3, 4, 5]]:
            fail(f"the table's order is {js(order)}")
        if got_rows[4]["cells"][5] != "–" or got_rows[4]["cells"][0] != "–":
            fail(f"a child without a validation shows {js(got_rows[4])}")

        def chart():
            return page.evaluate("""() => {
              const c = document.querySelector('#sweep-chart');
              const items = [...document.querySelectorAll('.multi-legend li.legend-item')];
              return {series: Number(c.dataset.series), points: Number(c.dataset.points),
                      validation: Number(c.dataset.validationPoints),
                      items: Object.fromEntries(items.map((li) => [li.dataset.key,
                          [Number(li.dataset.points), Number(li.dataset.validationPoints), li.textContent]]))};
            }""")

        def expected_chart(v):
            items = {c["job_id"]: [len(loss_steps(c["job_id"], "step_metrics")), len(loss_steps(c["job_id"], "validation")),
                                   c["label"]] for c in v["children"]}
            return {"series": len(items), "points": sum(i[0] for i in items.values()),
                    "validation": sum(i[1] for i in items.values()), "items": items}

        want_chart = expected_chart(view)
        if want_chart["points"] == 0 or want_chart["validation"] == 0:
            fail(f"the API serves no losses for the sweep's children: {js(want_chart)}")
        shown_chart = wait_for("the chart to hold every child's losses",
                               lambda: (lambda c: c if c == want_chart else None)(chart()), 10_000)
        # Drawn, not only counted: a series with a validation has diamonds in its colour.
        drawn = page.evaluate("""() => {
          const c = document.querySelector('#sweep-chart');
          const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
          const seen = new Set();
          for (let i = 0; i < d.length; i += 4) if (d[i + 3] === 255) seen.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
          return [...document.querySelectorAll('.multi-legend li.legend-item')].filter((li) => li.dataset.validationPoints > 0)
            .map((li) => {
              const rgb = getComputedStyle(li.querySelector('.swatch')).backgroundColor.match(/\\d+/g).map(Number);
              return [li.dataset.key, seen.has((rgb[0] << 16) | (rgb[1] << 8) | rgb[2])];
            });
        }""")
        if len(drawn) != 4 or not all(ok for _, ok in drawn):
            fail(f"the series with validations drawn in their colour: {js(drawn)}")
        check_no_literals(page, "the sweep page")
        os.makedirs(os.path.dirname(screenshot), exist_ok=True)
        page.screenshot(path=screenshot, full_page=True)
        log(f"sweep page: header, axes, states and the {len(got_rows)} ranked rows as the API has them; the chart's "
            f"{shown_chart['series']} series hold {shown_chart['points']} training and {shown_chart['validation']} "
            f"validation points; screenshot {screenshot}")

        # 3. More losses for child 0: the chart grows, child 0 ranks first.
        before = shown_chart["items"][children[0]]
        command("grow")
        wait_for("child 0's curve to grow by 2 steps and 1 validation", lambda:
                 chart()["items"].get(children[0], [0, 0])[:2] == [before[0] + 2, before[1] + 1], 15_000)
        wait_for("child 0 to rank first", lambda: (table_rows() or [{}])[0].get("job") == children[0], 15_000)
        view = api(f"/api/sweeps/{sweep_id}", tokens["alice"])
        if table_rows() != expected_rows(view):
            fail(f"after growing, the table shows {js(table_rows())}; the API {js(expected_rows(view))}")
        log("more losses for child 0: its curve grew and it ranks first")

        # 4. A child's job page links back to its sweep.
        page.goto(f"{base}/#/jobs/{quote(children[3])}")
        page.locator("#job-sweep").wait_for(timeout=10_000)
        if page.locator("#job-sweep").get_attribute("href") != f"#/sweeps/{sweep_id}":
            fail(f"the job page's sweep link is {page.locator('#job-sweep').get_attribute('href')}")
        expect = f"sweep {sweep_id} #3"
        if expect not in squash(page.locator(".crumbs").text_content()):
            fail(f"the job page's crumbs say {js(page.locator('.crumbs').text_content())}, not {js(expect)}")
        check_no_literals(page, "a sweep child's job page")
        log("a child's job page links back to its sweep")

        # 5. Another owner's sweep reads as missing; a viewer has no Cancel.
        use_token("bob")
        page.goto(f"{base}/#/sweeps/{quote(sweep_id)}")
        page.reload()
        error = page.locator("#page-error")
        error.wait_for(timeout=10_000)
        if "not found" not in (error.text_content() or "") or page.locator("#sweep-table").count():
            fail(f"bob's page of alice's sweep shows {js(squash(page.locator('main').text_content()))}")
        console_errors = [e for e in console_errors if "404 (Not Found)" not in e]
        use_token("viewer")
        page.reload()
        page.locator("#sweep-table tbody tr").first.wait_for(timeout=10_000)
        page.wait_for_timeout(500)
        if page.locator("#sweep-cancel").count():
            fail("a viewer's sweep page shows Cancel")
        log("bob's page says the sweep is not found; a viewer's has no Cancel")

        # 6. alice cancels the sweep.
        use_token("alice")
        page.reload()
        page.locator("#sweep-cancel").wait_for(timeout=10_000)
        page.click("#sweep-cancel")
        status = page.locator("#sweep-action-status")
        wait_for("the cancel's answer", lambda: re.search(r"cancelled: \d+ of \d+ children CANCELLED|refused",
                                                          status.text_content() or ""), 15_000)
        said = squash(status.text_content())
        if said != f"cancelled: {len(children)} of {len(children)} children CANCELLED":
            fail(f"the cancel says {js(said)}")
        view = api(f"/api/sweeps/{sweep_id}", tokens["viewer"])
        if not view["ended"] or any(c["state"] != "CANCELLED" for c in view["children"]):
            fail(f"after Cancel the API has {js(view['states'])}, ended {view['ended']}")
        page.locator(".page-head .badge", has_text="ENDED").wait_for(timeout=10_000)
        wait_for("the Cancel button to go", lambda: page.locator("#sweep-cancel").count() == 0, 10_000)
        shown = page.evaluate("""() => [...document.querySelectorAll('#sweep-table tbody tr td:nth-child(4) .badge')]
            .map((b) => b.textContent)""")
        if shown != ["CANCELLED"] * len(children):
            wait_for("every row CANCELLED", lambda: page.evaluate(
                "() => [...document.querySelectorAll('#sweep-table tbody tr td:nth-child(4) .badge')].map((b) => b.textContent)")
                == ["CANCELLED"] * len(children), 10_000)
        check_no_literals(page, "the cancelled sweep's page")
        log(f"Cancel: {said}; the page shows the sweep ENDED")
        if console_errors:
            fail(f"errors in the page: {' | '.join(console_errors)}")
    except Exception:  # SystemExit (fail) passes through
        fail(traceback.format_exc())
    finally:
        try:
            browser.close()
        except Exception:
            pass

server.stdin.close()
try:
    server.wait(timeout=10)
except subprocess.TimeoutExpired:
    fail("web_sweep_page_server did not stop at the end of its input")
if server.returncode != 0:
    fail(f"web_sweep_page_server exited {server.returncode}")
watchdog.cancel()
cleanup()
log("PASS")
