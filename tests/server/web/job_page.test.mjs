// The web UI in a real browser: Debian's chromium (headless, driven by playwright-core)
// against a real trainyard-controller (--web-listen on loopback, a token file) and a
// real worker training a job.
//
//   1. Without a token the job page shows the token prompt (the API said 401); an
//      unknown token brings it back, saying it was refused.
//   2. With a viewer token the loss chart gets points, then more points (it grows while
//      the job trains), its validation series gets points ([validation] on, every 5
//      steps), the tokens/s chart has points, the compile table has rows, and the
//      canvas really has both curves drawn on it.
//   3. The fleet page lists the worker, the jobs list the job (the token kept). A second
//      real worker on the fake NVML's two GPUs joins: `trainyard workers` and the fleet
//      page show its GPUs and their samples as the controller has them. With
//      /api/fleet answered as the controller does plus a GPU worker (gpu_worker.json,
//      the JSON web_api_test.cc pins WorkerJson to), the page shows its models, free
//      and unhealthy GPUs, capabilities, and each GPU's utilisation, memory,
//      temperature, power, errors and state; saves web-fleet-gpus.png beside --screenshot.
//      g1 is cordoned: its row says so with the reason. The job's JSON given a
//      preemption and its owner's share, the attempt, quota and fair share cards show them.
//   4. A screenshot of the job page is saved (--screenshot), kept by CI as an artifact.
//   5. The job cancelled, its events are the proto3 JSON of trainyard.v1.Event (every
//      field by its .proto name, 64-bit integers as strings), and the job page's charts
//      hold exactly the steps (and validation runs) the API served, the step card the
//      last one.
//
// Run by ctest (tests/server/web/CMakeLists.txt, label `web`):
//   node job_page.test.mjs --controller BIN --worker BIN --cli BIN --job-file TOML
//        --screenshot PNG --fake-nvml LIBNVIDIA-ML.SO.1 [--chromium /usr/bin/chromium]
// playwright-core comes from tests/server/web/node_modules: `npm ci --prefix tests/server/web`.
import {spawn, spawnSync} from 'node:child_process';
import {createHash, randomBytes} from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

const DEADLINE_MS = 100_000;  // the whole test; ctest's TIMEOUT is above it
const started = Date.now();

function arg(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  if (i >= 0 && i + 1 < process.argv.length) return process.argv[i + 1];
  if (fallback !== undefined) return fallback;
  fail(`missing --${name}`);
}
function log(msg) { console.log(`[web ${((Date.now() - started) / 1000).toFixed(1)}s] ${msg}`); }

// The text of `locator` (waited for) must hold every string of `want`.
async function expectText(locator, what, want) {
  await locator.first().waitFor({timeout: 10_000});
  const text = (await locator.first().textContent()).replace(/\s+/g, ' ');
  for (const w of want) if (!text.includes(w)) fail(`${what}: no ${JSON.stringify(w)} in ${JSON.stringify(text)}`);
}

// The fleet page's row of worker `name` (its first cell is the name).
function workerRow(page, name) {
  return page.locator('#workers-table tbody tr').filter({has: page.locator('td:first-child', {hasText: new RegExp(`^${name}$`)})});
}

// 3a. A real GPU worker: trainyard-worker on two H200s of the fake NVML (--fake-nvml),
//     registered with the controller and heartbeating samples; `trainyard workers` and
//     the fleet page show what the controller made of them.
async function checkRealGpuWorker(page) {
  const config = path.join(workDir, 'fake_nvml.conf');
  fs.writeFileSync(config, 'count 2\nname NVIDIA H200\nmemory_mib 143771\ndriver 580.159.04\ncuda 13000\n' +
                   'nvlink all\nutil 0 0.5\nutil 1 0.25\ntemp 0 61\npower_mw 0 350000\nmem_used_mib 0 40960\n');
  const ports = rendezvous + 10;
  start('gpu-worker', [bins.worker, '--controller', `127.0.0.1:${grpcPort}`, '--name', 'gw',
                       '--rendezvous-ports', `${ports}-${ports + 9}`, '--work-dir', path.join(workDir, 'gw'),
                       '--nvml-library', fakeNvml, '--gpu-sample-interval', '0.2'],
        {FAKE_NVML_CONFIG: config});
  await waitFor('worker gw to connect with its GPU samples', () => {
    const r = cli(['workers', '--output', 'json']);
    return r.status === 0 && r.stdout.split('\n').some((l) => {
      try { const w = JSON.parse(l); return w.name === 'gw' && w.connected && (w.gpu_samples || []).length === 2; } catch { return false; }
    });
  }, 30_000);
  const table = cli(['workers']);
  const line = table.stdout.split('\n').find((l) => l.startsWith('gw '));
  if (!line) fail(`trainyard workers lists no gw:\n${table.stdout}`);
  for (const want of ['cuda', '2× NVIDIA H200 140 GiB', '2 (0,1)']) {
    if (!line.includes(want)) fail(`trainyard workers' gw line lacks ${JSON.stringify(want)}: ${line}`);
  }
  const row = workerRow(page, 'gw');
  await expectText(row, 'gw\'s row', ['cuda', '2× NVIDIA H200 140 GiB', '2 free', 'driver 580.159.04']);
  const gpu = (i) => page.locator(`#gpus-table tbody tr[data-worker="gw"][data-gpu="${i}"]`);
  await expectText(gpu(0), 'gw GPU 0', ['NVIDIA H200', 'GPU-00000000-0000-0000-0000-000000000000', '50%',
                                        '40.0 GiB / 140.4 GiB', '61 °C', '350 W', 'free']);
  await expectText(gpu(1), 'gw GPU 1', ['25%', 'free']);
  log(`a real GPU worker: trainyard workers says "${line.replace(/\s+/g, ' ')}"; the fleet page shows its GPUs' samples`);
}

// 3b. The fleet page with a GPU worker (see the header).
async function checkGpuFleet(page) {
  await checkRealGpuWorker(page);
  const gpuWorker = JSON.parse(fs.readFileSync(new URL('./gpu_worker.json', import.meta.url), 'utf8'));
  await page.route('**/api/fleet', async (route) => {
    const response = await route.fetch();
    const body = await response.json();
    body.workers.push({...gpuWorker, jobs: []});
    body.connected_workers += 1;
    body.slots += gpuWorker.slots;
    body.free_slots += gpuWorker.free_slots;
    body.gpus += 3;
    body.free_gpus += 1;
    body.unhealthy_gpus += 2;
    await route.fulfill({response, json: body});
  });
  const row = workerRow(page, 'g1');
  await row.waitFor({timeout: 10_000});  // the page polls every 3 s
  await expectText(row, 'the GPU worker\'s row',
                   ['3× NVIDIA H200 140 GiB', '1 free', '2 unhealthy', 'cuda 12.4', 'nccl', 'bf16',
                    'driver 550.54.15 · CUDA 12.4']);
  if ((await row.textContent()).includes('cudagraph')) fail('g1 shows cudagraph, which its rank binary lacks');
  // g1 is cordoned (gpu_worker.json): marked, with the reason; w1 is not.
  await expectText(row.locator('td.link'), 'the cordoned worker\'s link cell', ['connected', 'cordoned', 'ECC errors: RMA pending']);
  if ((await workerRow(page, 'w1').textContent()).includes('cordoned')) fail('w1 is marked cordoned');
  await expectText(workerRow(page, 'w1').locator('td.gpus'), 'w1\'s GPUs', ['–']);
  const gpu = (i) => page.locator(`#gpus-table tbody tr[data-worker="g1"][data-gpu="${i}"]`);
  await expectText(gpu(0), 'GPU 0', ['NVIDIA H200', 'GPU-0', '25%', '40.0 GiB / 140.4 GiB', '55 °C', '312 W',
                                     'ECC 0 · XID 0', 'free']);
  await expectText(gpu(1), 'GPU 1', ['unhealthy', 'taken out of service by the controller']);
  await expectText(gpu(2), 'GPU 2', ['ECC 4 · XID 2 (last 48)', 'unhealthy', 'uncorrectable ECC error']);
  await expectText(gpu(2).locator('td.gpu-temp'), 'GPU 2\'s temperature (NVML gave none)', ['–']);
  // gw's two free GPUs and g1's one free of three.
  await expectText(page.locator('.card', {hasText: 'GPUs free'}), 'the GPUs card', ['3 / 5', '2 unhealthy']);
  await page.screenshot({path: path.join(path.dirname(screenshot), 'web-fleet-gpus.png'), fullPage: true});
  await page.unroute('**/api/fleet');
  log('fleet page shows the GPU worker g1: models, free/unhealthy GPUs, capabilities, per-GPU samples');
}

const children = [];
let workDir = null;
let keepDir = false;

function cleanup() {
  for (const c of children) {
    try { process.kill(-c.pid, 'SIGKILL'); } catch { /* already gone */ }
  }
  if (workDir && !keepDir) fs.rmSync(workDir, {recursive: true, force: true});
}

function fail(message) {
  console.error(`FAIL: ${message}`);
  if (workDir) {
    keepDir = true;
    for (const name of ['controller.log', 'worker.log', 'gpu-worker.log']) {
      const p = path.join(workDir, name);
      if (fs.existsSync(p)) {
        const text = fs.readFileSync(p, 'utf8');
        console.error(`---- ${name} (last 3000 bytes; all of it in ${p}) ----\n${text.slice(-3000)}`);
      }
    }
  }
  cleanup();
  process.exit(1);
}

// ---- what the test needs, each missing piece named with its fix ----
let chromium;
try {
  ({chromium} = await import('playwright-core'));
} catch (e) {
  fail('playwright-core is not installed in tests/server/web/node_modules: run `npm ci --prefix tests/server/web` ' +
       `(from the repository root) before ctest (${e.code || e.message})`);
}
const chromiumPath = arg('chromium', '/usr/bin/chromium');
if (!fs.existsSync(chromiumPath)) fail(`no chromium at ${chromiumPath}: apt-get install chromium (deploy/install-deps.sh does)`);
const bins = {controller: arg('controller'), worker: arg('worker'), cli: arg('cli')};
for (const [k, v] of Object.entries(bins)) if (!fs.existsSync(v)) fail(`the ${k} binary ${v} is not built`);
const jobFile = arg('job-file');
const screenshot = arg('screenshot');
const fakeNvml = arg('fake-nvml');
if (!fs.existsSync(fakeNvml)) fail(`the fake NVML ${fakeNvml} is not built (target fake_nvml)`);

workDir = fs.mkdtempSync(path.join(os.tmpdir(), 'ty-web-'));
const watchdog = setTimeout(() => fail(`the test ran past ${DEADLINE_MS / 1000} s`), DEADLINE_MS);

// ---- tokens: the controller stores only their sha256 ----
const adminToken = randomBytes(16).toString('hex');
const viewerToken = randomBytes(16).toString('hex');
const sha = (t) => createHash('sha256').update(t).digest('hex');
const tokenFile = path.join(workDir, 'tokens');
fs.writeFileSync(tokenFile, `${sha(adminToken)} admin root\n${sha(viewerToken)} viewer dashboard\n`, {mode: 0o600});

// ---- a controller and a worker ----
function start(name, argv, env) {
  const out = fs.openSync(path.join(workDir, `${name}.log`), 'a');
  // Its own process group, so cleanup ends it and whatever it started.
  const child = spawn(argv[0], argv.slice(1), {stdio: ['ignore', out, out], detached: true,
                                               env: {...process.env, ...(env || {})}});
  children.push(child);
  child.on('exit', (code, signal) => { child.exited = {code, signal}; });
  return child;
}
async function waitFor(what, fn, timeoutMs) {
  const until = Date.now() + timeoutMs;
  while (Date.now() < until) {
    const v = await fn();
    if (v) return v;
    await new Promise((r) => setTimeout(r, 100));
  }
  fail(`timed out after ${timeoutMs / 1000} s waiting for ${what}`);
}

const portFile = path.join(workDir, 'port');
const controller = start('controller', [
  bins.controller, '--listen', '127.0.0.1:0', '--data-dir', path.join(workDir, 'data'), '--port-file', portFile,
  '--web-listen', '127.0.0.1:0', '--token-file', tokenFile]);
const grpcPort = await waitFor('the controller\'s port file', () => {
  if (controller.exited) fail(`the controller exited (${JSON.stringify(controller.exited)})`);
  return fs.existsSync(portFile) && fs.readFileSync(portFile, 'utf8').trim();
}, 20_000);
// --web-listen port 0: the controller logs the port it bound.
const webPort = await waitFor('the controller\'s "web UI on" log line', () => {
  const m = /web UI on http:\/\/127\.0\.0\.1:(\d+)\//.exec(fs.readFileSync(path.join(workDir, 'controller.log'), 'utf8'));
  return m && m[1];
}, 10_000);
const base = `http://127.0.0.1:${webPort}`;
log(`controller on 127.0.0.1:${grpcPort}, web UI on ${base}`);

const rendezvous = 20000 + Math.floor(Math.random() * 4000) * 10;
start('worker', [bins.worker, '--controller', `127.0.0.1:${grpcPort}`, '--name', 'w1', '--slots', '1',
                 '--rendezvous-ports', `${rendezvous}-${rendezvous + 9}`, '--work-dir', path.join(workDir, 'w1')]);

function cli(args) {
  const r = spawnSync(bins.cli, [...args, '--controller', `127.0.0.1:${grpcPort}`],
                      {env: {...process.env, TRAINYARD_TOKEN: adminToken}, encoding: 'utf8', timeout: 30_000});
  return r;
}
await waitFor('worker w1 to connect', () => {
  const r = cli(['workers', '--output', 'json']);
  return r.status === 0 && r.stdout.split('\n').some((l) => { try { const w = JSON.parse(l); return w.name === 'w1' && w.connected; } catch { return false; } });
}, 20_000);

// A job that outlasts the test however fast the machine (it is cancelled at the end):
// the tiny preset, every step reported, compile summaries often enough to fill the
// table's hit counts, and a one-batch validation every 5 steps for the loss chart's
// second series.
const submit = cli(['submit', jobFile, '--set', 'model.preset=tiny', '--set', 'training.steps=50000',
                    '--set', 'training.log_freq=1', '--set', 'compile.summary_every=5',
                    '--set', 'validation.dataset=synthetic', '--set', 'validation.freq=5', '--set', 'validation.steps=1',
                    '--output', 'json']);
if (submit.status !== 0) fail(`trainyard submit failed: ${submit.stderr}`);
const jobId = JSON.parse(submit.stdout.split('\n').find((l) => l.startsWith('{'))).id;
log(`submitted ${jobId}`);

// StepMetrics' fields by their .proto names (proto/trainyard/v1/event.proto), sorted.
const STEP_METRICS_FIELDS = ['step', 'loss', 'grad_norm', 'lr', 'tokens_per_s', 'model_tflops', 'mfu', 'step_ms',
                             'data_ms', 'peak_rss_mb', 'expert_load', 'imbalance', 'tokens', 'epoch',
                             'peak_tensor_bytes'].sort().join(',');
const VALIDATION_FIELDS = ['step', 'loss', 'tokens', 'ms'].sort().join(',');
// Every event of the job of `kinds`, page by page, as the API serves them.
async function jobEvents(base, id, token, kinds) {
  const out = [];
  let after = 0;
  for (let pages = 0; pages < 200; ++pages) {
    const res = await fetch(`${base}/api/jobs/${encodeURIComponent(id)}/events?kinds=${kinds}&limit=2000&after_seq=${after}`,
                            {headers: {Authorization: `Bearer ${token}`}});
    if (!res.ok) fail(`events: HTTP ${res.status}`);
    const body = await res.json();
    out.push(...body.events);
    after = body.next_after_seq;
    if (!body.more) return out;
  }
  fail('events: more than 200 pages');
}

// ---- the browser ----
const browser = await chromium.launch({
  executablePath: chromiumPath, headless: true,
  // --no-sandbox: CI runs as root, where chromium's sandbox refuses to start.
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
});
try {
  const context = await browser.newContext({viewport: {width: 1400, height: 1000}, deviceScaleFactor: 1});
  const page = await context.newPage();
  const consoleErrors = [];
  page.on('console', (m) => { if (m.type() === 'error' && !/401/.test(m.text())) consoleErrors.push(m.text()); });
  page.on('pageerror', (e) => consoleErrors.push(String(e)));
  const jobUrl = `${base}/#/jobs/${encodeURIComponent(jobId)}`;

  // 1. No token: the API answers 401 and the page asks for one.
  await page.goto(jobUrl);
  await page.locator('#token-prompt').waitFor({state: 'visible', timeout: 15_000});
  const message = await page.locator('#token-message').textContent();
  if (!/requires a token/.test(message)) fail(`the token prompt says ${JSON.stringify(message)}`);
  log('without a token the page shows the token prompt');

  // A token the controller does not know: asked again, saying why.
  await page.fill('#token-input', 'not-a-known-token');
  await page.click('#token-form button[type=submit]');
  await waitFor('the prompt to say the token was refused', async () =>
    /refused \(unknown token\)/.test(await page.locator('#token-message').textContent()) &&
    page.locator('#token-prompt').isVisible(), 10_000);
  log('an unknown token is refused and the prompt asks again');

  // 2. The viewer token; the charts grow as the job trains.
  await page.fill('#token-input', viewerToken);
  await page.click('#token-form button[type=submit]');
  await page.locator('#token-prompt').waitFor({state: 'hidden', timeout: 5_000});
  const points = (id) => page.evaluate((sel) => Number(document.querySelector(sel)?.dataset.points || 0), id);
  // The loss chart's second series: a count the page sets once it has the series at all.
  const valPoints = () => page.evaluate(() => {
    const v = document.querySelector('#loss-chart')?.dataset.validationPoints;
    return v === undefined ? -1 : Number(v);
  });
  const first = await waitFor('the loss chart to have 3 points', async () => {
    const n = await points('#loss-chart');
    return n >= 3 ? n : 0;
  }, 45_000);
  log(`loss chart has ${first} points`);
  const later = await waitFor(`the loss chart to grow past ${first + 4} points`, async () => {
    const n = await points('#loss-chart');
    return n >= first + 5 ? n : 0;
  }, 30_000);
  log(`loss chart grew to ${later} points`);
  if ((await points('#tps-chart')) < 1) fail('the tokens/s chart has no points');
  if ((await valPoints()) < 0) fail('the loss chart has no validation series (data-validation-points)');
  const firstVal = await waitFor('the loss chart\'s validation series to have 2 points', async () => {
    const n = await valPoints();
    return n >= 2 ? n : 0;
  }, 30_000);
  log(`validation series has ${firstVal} points`);
  const compileRows = await waitFor('rows in the compile table', async () =>
    page.locator('#compile-table tbody tr').count(), 20_000);
  log(`compile table has ${compileRows} row(s)`);
  // Something is drawn: the loss curve's colour is on the canvas.
  const drawn = await page.evaluate(() => {
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
  });
  if (drawn.blue < 50) fail(`the loss canvas has ${drawn.blue} pixels of the curve's colour`);
  if (drawn.orange < 20) fail(`the loss canvas has ${drawn.orange} pixels of the validation markers' colour`);
  const state = await page.locator('.page-head .badge').first().textContent();
  log(`job state on the page: ${state}; ${drawn.blue} curve and ${drawn.orange} validation pixels`);

  // The ranks card: this CPU job's worker, no GPU; then the same job as a CUDA job
  // would come (its rank 0 on GPU 0 of w1, w1's NCCL settings), through the API's JSON.
  const ranksCard = page.locator('#job-cards .card').filter({has: page.locator('.card-label', {hasText: /^ranks$/})});
  await expectText(ranksCard, 'the ranks card', ['w1']);
  if ((await ranksCard.textContent()).includes('gpu')) fail('a CPU job\'s ranks card names a GPU');
  const isJob = (url) => new URL(url).pathname === `/api/jobs/${jobId}`;
  await page.route(isJob, async (route) => {
    const response = await route.fetch();
    const job = await response.json();
    job.placement = job.placement.map((p) => ({...p, gpu: 0, gpu_uuid: 'GPU-5f0c6a4e-test'}));
    job.worker_env = [{worker: 'w1', nccl_env: ['NCCL_SOCKET_IFNAME=lo']}];
    // And as a job preempted once whose owner has a quota and a place in the queue.
    job.preemptions = 1;
    job.share = {owner: 'viewer-test', group: 'research', owner_slots_in_use: 6, owner_slot_limit: 8,
                 owner_gpus_in_use: 0, owner_gpu_limit: 0, group_slots_in_use: 10, group_slot_limit: 16,
                 group_gpus_in_use: 4, group_gpu_limit: 8, weight: 2, usage_slot_seconds: 45000,
                 fair_share: 22500, queue_position: 3, queue_length: 5};
    await route.fulfill({response, json: job});
  });
  await waitFor('the ranks card to show the rank\'s GPU', async () =>
    ((await ranksCard.textContent()).includes('w1 gpu 0') ? 1 : 0), 10_000);
  const jobCard = (label) => page.locator('#job-cards .card').filter({has: page.locator('.card-label', {hasText: new RegExp(`^${label}$`)})});
  await expectText(jobCard('attempt'), 'the attempt card', ['preempted 1×']);
  await expectText(jobCard('quota'), 'the quota card', ['6 / 8 slots', 'owner viewer-test', '0 GPUs (no limit)',
                                                        'group research: 10 / 16 slots, 4 / 8 GPUs']);
  await expectText(jobCard('fair share'), 'the fair share card', ['3rd of 5 pending', '12.50 slot-hours used (decayed)',
                                                                  'weight 2', 'share 6.25']);
  const title = await ranksCard.locator('.placement').getAttribute('title');
  for (const want of ['rank 0: w1 gpu 0 GPU-5f0c6a4e-test', 'w1 NCCL: NCCL_SOCKET_IFNAME=lo']) {
    if (!(title || '').includes(want)) fail(`the ranks card's title ${JSON.stringify(title)} lacks ${JSON.stringify(want)}`);
  }
  await page.unroute(isJob);
  log('the ranks card shows the worker, and a rank\'s GPU and the NCCL settings when the job has them; ' +
      'the attempt card the preemptions, the quota and fair share cards the owner\'s share');

  // 4. The screenshot CI keeps.
  fs.mkdirSync(path.dirname(screenshot), {recursive: true});
  await page.screenshot({path: screenshot, fullPage: true});
  log(`screenshot: ${screenshot}`);

  // 3. The fleet page, with the token kept for the tab.
  await page.goto(`${base}/#/fleet`);
  await page.locator('#workers-table tbody tr', {hasText: 'w1'}).waitFor({timeout: 10_000});
  if (await page.locator('#token-prompt').isVisible()) fail('the token was not kept for the tab');
  log('fleet page lists w1');
  await checkGpuFleet(page);
  await page.goto(`${base}/#/jobs`);
  await page.locator('#jobs-table tbody tr a', {hasText: jobId}).waitFor({timeout: 10_000});
  log(`jobs list shows ${jobId}`);

  // 5. The events are the proto3 JSON of trainyard.v1.Event, and the page reads that
  //    dialect: once the job ended, its charts hold exactly the steps the API served.
  const cancel = cli(['cancel', jobId]);
  if (cancel.status !== 0) fail(`trainyard cancel failed: ${cancel.stderr}`);
  // A rank's last steps may commit after the CANCELLED state, and the page stops polling
  // once the job ended and it read up to last_seq: wait for the rank to be gone first.
  await waitFor('the rank to be killed', async () => (await jobEvents(base, jobId, viewerToken, 'rank_state'))
    .some((e) => ['KILLED', 'EXITED', 'FAILED'].includes(e.rank_state.state)), 20_000);
  await page.goto(jobUrl);
  await page.locator('.page-head .badge', {hasText: 'CANCELLED'}).waitFor({timeout: 20_000});
  const served = await jobEvents(base, jobId, viewerToken, 'step_metrics');
  const loss = new Set(), tps = new Set();
  for (const e of served) {
    // Every field of an Event by its .proto name; 64-bit integers as decimal strings.
    const keys = Object.keys(e).filter((k) => k !== 'time').sort().join(',');
    if (keys !== 'attempt,job_id,rank,seq,source_seq,step_metrics') fail(`an event has the fields ${keys}: ${JSON.stringify(e)}`);
    const m = e.step_metrics;
    const fields = Object.keys(m).sort().join(',');
    if (fields !== STEP_METRICS_FIELDS) fail(`step_metrics has the fields ${fields}, not ${STEP_METRICS_FIELDS}`);
    if (!/^[0-9]+$/.test(e.seq) || !/^[0-9]+$/.test(m.step) || !/^[0-9]+$/.test(m.tokens)) {
      fail(`64-bit integers are not decimal strings: ${JSON.stringify(e)}`);
    }
    if (typeof m.loss === 'number') loss.add(m.step);
    if (typeof m.tokens_per_s === 'number' && m.tokens_per_s > 0) tps.add(m.step);
  }
  const validations = await jobEvents(base, jobId, viewerToken, 'validation');
  const valSteps = new Set();
  for (const e of validations) {
    const fields = Object.keys(e.validation).sort().join(',');
    if (fields !== VALIDATION_FIELDS) fail(`validation has the fields ${fields}, not ${VALIDATION_FIELDS}`);
    if (e.rank !== 0 || !/^[0-9]+$/.test(e.validation.step)) fail(`a validation event: ${JSON.stringify(e)}`);
    if (typeof e.validation.loss === 'number') valSteps.add(e.validation.step);
  }
  // A long job's events may take the page a few polls to read (each poll reads at most
  // 50 pages); the charts only grow, up to what the API served.
  let shown = {};
  for (const until = Date.now() + 15_000; Date.now() < until;) {
    shown = {loss: await points('#loss-chart'), tps: await points('#tps-chart'), validation: await valPoints()};
    if (shown.loss === loss.size && shown.tps === tps.size && shown.validation === valSteps.size) break;
    await new Promise((r) => setTimeout(r, 250));
  }
  if (shown.loss !== loss.size || shown.tps !== tps.size || shown.validation !== valSteps.size) {
    fail(`the charts show ${JSON.stringify(shown)} points; the API served ${loss.size} loss, ${tps.size} tokens/s ` +
         `and ${valSteps.size} validation steps`);
  }
  const lastStep = served.length ? served[served.length - 1].step_metrics.step : '0';
  const stepCard = await page.locator('#job-cards .card-value').first().textContent();
  if (!stepCard.startsWith(`${lastStep} / `)) fail(`the step card says ${JSON.stringify(stepCard)}, the last step is ${lastStep}`);
  log(`${served.length} step_metrics and ${validations.length} validation events as proto3 JSON; the charts hold ` +
      `their ${loss.size} and ${valSteps.size} steps`);
  if (consoleErrors.length) fail(`errors in the page: ${consoleErrors.join(' | ')}`);
} catch (e) {
  fail(e.stack || String(e));
} finally {
  await browser.close().catch(() => {});
}

clearTimeout(watchdog);
cleanup();
log('PASS');
