// Trainyard web UI: a read-only view of the controller's JSON API (docs/web.md).
// No framework and no build step: routes after '#', DOM built with textContent only
// (job names, reasons and logs are never parsed as HTML), charts drawn on <canvas>.
'use strict';

const TOKEN_KEY = 'trainyard.token';
const POLL_MS = 1000;
const LIST_POLL_MS = 3000;
const EVENT_KINDS = 'step_metrics,compile,stall,job_state,checkpoint,artifact';
const TERMINAL = new Set(['SUCCEEDED', 'FAILED', 'CANCELLED']);

// ---------- small helpers ----------

// h('div', {class: 'x'}, 'text', child, ...): an element; strings become text nodes.
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') el.className = v;
    else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'dataset') Object.assign(el.dataset, v);
    // Through CSSOM: the page's CSP (style-src 'self') refuses style attributes.
    else if (k === 'style') el.style.cssText = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function fmtNum(v, digits) {
  if (v === null || v === undefined || Number.isNaN(v)) return '–';
  const a = Math.abs(v);
  if (digits !== undefined) return v.toFixed(digits);
  if (a !== 0 && (a >= 1e6 || a < 1e-3)) return v.toExponential(2);
  if (a >= 1000) return Math.round(v).toLocaleString('en-US');
  return Number(v.toPrecision(4)).toString();
}
function fmtBytes(n) {
  if (!n) return '0 B';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; ++i; }
  return `${i === 0 ? n : n.toFixed(1)} ${units[i]}`;
}
function fmtTime(ms) {
  if (!ms) return '–';
  const d = new Date(ms);
  return d.toLocaleString('en-GB', {hour12: false});
}
function fmtDuration(ms) {
  if (ms === null || ms === undefined || ms < 0) return '–';
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
}
function badge(state) { return h('span', {class: `badge st-${(state || '').toLowerCase()}`}, state || '?'); }
function card(label, value, sub) {
  return h('div', {class: 'card'}, h('div', {class: 'card-label'}, label),
           h('div', {class: 'card-value'}, value), sub ? h('div', {class: 'card-sub'}, sub) : null);
}
function table(headers, rows, attrs) {
  // A column of numbers (class num in the first row) gets a right-aligned heading too.
  const first = rows[0] ? [...rows[0].children] : [];
  return h('table', attrs || {},
           h('thead', {}, h('tr', {}, headers.map((x, i) => h('th', {class: first[i] && first[i].classList.contains('num') ? 'num' : null}, x)))),
           h('tbody', {}, rows));
}

// ---------- events ----------

// Events are the proto3 JSON of trainyard.v1.Event with the .proto field names
// (docs/web.md), as `trainyard watch --output json` prints them: the payload is the one
// member whose value is an object, under its kind's name (step_metrics, compile, ...);
// 64-bit integers are decimal strings, times RFC 3339 strings, and a non-finite double
// is "NaN", "Infinity" or "-Infinity".
function eventKind(e) {
  return Object.keys(e).find((k) => e[k] !== null && typeof e[k] === 'object') || 'none';
}
// The milliseconds of an RFC 3339 time, or null when unset.
function timeMs(t) { return t ? Date.parse(t) : null; }
// A payload whose every field is a number or a list of numbers (StepMetrics), as numbers.
function numericPayload(d) {
  return Object.fromEntries(Object.entries(d).map(([k, v]) => [k, Array.isArray(v) ? v.map(Number) : Number(v)]));
}

// ---------- API and the token prompt ----------

class Unauthorized extends Error {}

async function api(path) {
  const headers = {};
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = `Bearer ${token}`;
  const res = await fetch(path, {headers, cache: 'no-store'});
  if (res.status === 401) {
    const body = await res.json().catch(() => ({}));
    throw new Unauthorized(body.error || 'a token is required');
  }
  if (!res.ok) {
    const body = await res.json().catch(() => ({}));
    const err = new Error(body.error || `${res.status} ${res.statusText}`);
    err.status = res.status;
    throw err;
  }
  return res;
}
async function apiJson(path) { return (await api(path)).json(); }

function showTokenPrompt(message) {
  const prompt = document.getElementById('token-prompt');
  const had = sessionStorage.getItem(TOKEN_KEY);
  document.getElementById('token-message').textContent = had
    ? `The token was refused (${message}). Enter another one.`
    : 'This controller requires a token (the same one the trainyard CLI uses).';
  prompt.hidden = false;
  document.getElementById('token-input').focus();
}

document.addEventListener('DOMContentLoaded', () => {
  document.getElementById('token-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const input = document.getElementById('token-input');
    const token = input.value.trim();
    if (!token) return;
    sessionStorage.setItem(TOKEN_KEY, token);
    input.value = '';
    document.getElementById('token-prompt').hidden = true;
    route();
  });
  window.addEventListener('hashchange', route);
  setInterval(() => { document.getElementById('clock').textContent = new Date().toLocaleTimeString('en-GB'); }, 1000);
  route();
});

// ---------- routing ----------

let current = null;  // the page being shown: {stop()}

async function route() {
  if (current) current.stop();
  current = null;
  const hash = location.hash.replace(/^#\/?/, '');
  // A hand-typed '%' that is not an escape must not stop the page (URIError).
  const parts = hash.split('/').filter(Boolean).map((p) => { try { return decodeURIComponent(p); } catch (e) { return p; } });
  const main = document.getElementById('main');
  for (const a of document.querySelectorAll('nav a')) {
    a.classList.toggle('active', a.dataset.nav === (parts[0] || 'jobs'));
  }
  let page;
  if (parts[0] === 'fleet') page = new FleetPage(main);
  else if (parts[0] === 'jobs' && parts[1]) page = new JobPage(main, parts[1]);
  else page = new JobsPage(main);
  current = page;
  page.start();
  whoami();
}

async function whoami() {
  const el = document.getElementById('who');
  try {
    const me = await apiJson('/api/me');
    el.textContent = me.auth ? `${me.owner} · ${me.role}` : 'no authorization (loopback)';
  } catch (e) {
    el.textContent = '';
  }
}

// A page that refreshes itself every `period` ms until stopped; 401 shows the prompt.
class Page {
  constructor(main, period) { this.main = main; this.period = period; this.stopped = false; this.timer = null; }
  start() { this.tick(); }
  stop() { this.stopped = true; clearTimeout(this.timer); }
  async tick() {
    if (this.stopped) return;
    let again = true;
    try {
      again = (await this.refresh()) !== false;
      this.setError(null);
    } catch (e) {
      if (e instanceof Unauthorized) {
        showTokenPrompt(e.message);
        this.renderLocked(e.message);
        return;  // the prompt's submit re-routes
      }
      this.setError(e.message);
    }
    if (!this.stopped && again) this.timer = setTimeout(() => this.tick(), this.period);
  }
  renderLocked(message) {
    this.main.replaceChildren(h('div', {class: 'locked'}, h('h1', {}, 'Token required'),
                                h('p', {class: 'muted'}, message)));
  }
  setError(message) {
    let el = document.getElementById('page-error');
    if (!message) { if (el) el.remove(); return; }
    if (!el) { el = h('div', {id: 'page-error', class: 'error'}); this.main.prepend(el); }
    el.textContent = message;
  }
}

// ---------- jobs list ----------

class JobsPage extends Page {
  constructor(main) { super(main, LIST_POLL_MS); }
  async refresh() {
    const data = await apiJson('/api/jobs?limit=200');
    const rows = data.jobs.map((j) => h('tr', {},
      h('td', {}, h('a', {href: `#/jobs/${encodeURIComponent(j.id)}`}, j.id)),
      h('td', {}, j.name || '–'),
      h('td', {}, j.owner),
      h('td', {}, badge(j.state), j.pending_reason ? h('div', {class: 'small muted'}, j.pending_reason) : null),
      h('td', {class: 'num'}, j.attempt),
      h('td', {class: 'num'}, j.restarts ? `${j.restarts} / ${j.max_restarts}` : '0'),
      h('td', {class: 'num'}, `${j.world_size || j.dp * j.tp}`),
      h('td', {}, `${j.preset || 'custom'} · ${j.steps} steps · ${j.device}`),
      h('td', {}, fmtTime(j.create_time_ms)),
      h('td', {}, j.start_time_ms ? fmtDuration((j.end_time_ms || Date.now()) - j.start_time_ms) : '–')));
    this.main.replaceChildren(
      h('div', {class: 'page-head'}, h('h1', {}, 'Jobs'), h('span', {class: 'muted'}, `${data.jobs.length} shown, newest first`)),
      data.jobs.length ? table(['id', 'name', 'owner', 'state', 'attempt', 'restarts', 'ranks', 'shape', 'created', 'ran'],
                               rows, {class: 'grid', id: 'jobs-table'})
                       : h('p', {class: 'muted'}, 'No jobs yet. Submit one with: trainyard submit examples/debug.toml'));
  }
}

// ---------- charts ----------

// A line chart on a canvas: x = step, y = value. `points` is sorted by x.
class LineChart {
  constructor(title, unit, color) {
    this.title = title; this.unit = unit; this.color = color;
    this.canvas = h('canvas', {class: 'chart', role: 'img', 'aria-label': title, dataset: {points: '0'}});
    this.last = h('span', {class: 'chart-last'});
    this.el = h('div', {class: 'chart-box'}, h('div', {class: 'chart-title'}, title, this.last), this.canvas);
    this.points = [];
    new ResizeObserver(() => this.draw()).observe(this.canvas);
  }
  set(points) {
    this.points = points;
    this.canvas.dataset.points = String(points.length);
    const lastPoint = points[points.length - 1];
    this.last.textContent = lastPoint ? ` ${fmtNum(lastPoint[1])}${this.unit ? ' ' + this.unit : ''} @ step ${lastPoint[0]}` : '';
    this.draw();
  }
  draw() {
    const c = this.canvas;
    const dpr = window.devicePixelRatio || 1;
    const w = c.clientWidth, hgt = c.clientHeight;
    if (!w || !hgt) return;
    c.width = Math.round(w * dpr); c.height = Math.round(hgt * dpr);
    const g = c.getContext('2d');
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, hgt);
    const pad = {l: 58, r: 14, t: 10, b: 26};
    const pw = w - pad.l - pad.r, ph = hgt - pad.t - pad.b;
    g.font = '11px system-ui, sans-serif';
    g.fillStyle = '#6b7280';
    const pts = this.points;
    if (pts.length === 0) {
      g.textAlign = 'center';
      g.fillText('waiting for step metrics…', pad.l + pw / 2, pad.t + ph / 2);
      return;
    }
    let x0 = pts[0][0], x1 = pts[pts.length - 1][0];
    if (x1 === x0) x1 = x0 + 1;
    let y0 = Infinity, y1 = -Infinity;
    for (const [, y] of pts) { if (y < y0) y0 = y; if (y > y1) y1 = y; }
    if (y1 === y0) { y0 -= Math.abs(y0) * 0.1 || 1; y1 += Math.abs(y1) * 0.1 || 1; }
    const span = y1 - y0, nonNegative = y0 >= 0;
    y0 -= span * 0.05; y1 += span * 0.05;
    if (nonNegative && y0 < 0) y0 = 0;  // rates and losses never dip below zero
    const X = (x) => pad.l + ((x - x0) / (x1 - x0)) * pw;
    const Y = (y) => pad.t + (1 - (y - y0) / (y1 - y0)) * ph;
    // Grid and labels: 5 rows, up to 6 columns of whole steps.
    g.strokeStyle = '#e5e7eb'; g.lineWidth = 1;
    g.textAlign = 'right'; g.textBaseline = 'middle';
    for (let i = 0; i <= 4; ++i) {
      const v = y0 + ((y1 - y0) * i) / 4, yy = Math.round(Y(v)) + 0.5;
      g.beginPath(); g.moveTo(pad.l, yy); g.lineTo(pad.l + pw, yy); g.stroke();
      g.fillText(fmtNum(v), pad.l - 6, yy);
    }
    g.textAlign = 'center'; g.textBaseline = 'top';
    // Whole, round steps between columns (1, 2, 5, 10, 20, 50, ...), at most 6 of them.
    const raw = (x1 - x0) / 6, mag = Math.pow(10, Math.floor(Math.log10(Math.max(raw, 1))));
    const stepEvery = Math.max(1, [1, 2, 5, 10].map((m) => m * mag).find((m) => m >= raw) || 10 * mag);
    for (let s = Math.ceil(x0 / stepEvery) * stepEvery; s <= x1; s += stepEvery) {
      const xx = Math.round(X(s)) + 0.5;
      g.beginPath(); g.moveTo(xx, pad.t); g.lineTo(xx, pad.t + ph); g.stroke();
      g.fillText(String(s), xx, pad.t + ph + 6);
    }
    g.strokeStyle = '#9ca3af';
    g.strokeRect(pad.l + 0.5, pad.t + 0.5, pw, ph);
    // The series, with a soft fill under it.
    g.beginPath();
    pts.forEach(([x, y], i) => (i ? g.lineTo(X(x), Y(y)) : g.moveTo(X(x), Y(y))));
    g.strokeStyle = this.color; g.lineWidth = 2; g.lineJoin = 'round'; g.stroke();
    g.lineTo(X(pts[pts.length - 1][0]), pad.t + ph); g.lineTo(X(pts[0][0]), pad.t + ph); g.closePath();
    g.globalAlpha = 0.08; g.fillStyle = this.color; g.fill(); g.globalAlpha = 1;
    if (pts.length <= 60) {
      g.fillStyle = this.color;
      for (const [x, y] of pts) { g.beginPath(); g.arc(X(x), Y(y), 2.2, 0, 2 * Math.PI); g.fill(); }
    }
  }
}

// Tokens per routed expert as inline SVG bars (the latest step that carried them).
function expertLoadSvg(load) {
  const n = load.length, w = 640, hgt = 120, gap = 2;
  const max = Math.max(...load, 1), mean = load.reduce((a, b) => a + b, 0) / n;
  const ns = 'http://www.w3.org/2000/svg';
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('viewBox', `0 0 ${w} ${hgt + 16}`);
  svg.setAttribute('class', 'experts');
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', 'tokens per expert');
  const bw = (w - gap * (n - 1)) / n;
  load.forEach((v, i) => {
    const bh = (v / max) * hgt;
    const r = document.createElementNS(ns, 'rect');
    r.setAttribute('x', (i * (bw + gap)).toFixed(1)); r.setAttribute('y', (hgt - bh).toFixed(1));
    r.setAttribute('width', bw.toFixed(1)); r.setAttribute('height', Math.max(bh, 0.5).toFixed(1));
    r.setAttribute('class', v > 1.5 * mean ? 'hot' : 'bar');
    const t = document.createElementNS(ns, 'title'); t.textContent = `expert ${i}: ${v} tokens`; r.append(t);
    svg.append(r);
    if (n <= 32) {
      const lbl = document.createElementNS(ns, 'text');
      lbl.setAttribute('x', (i * (bw + gap) + bw / 2).toFixed(1)); lbl.setAttribute('y', String(hgt + 12));
      lbl.textContent = String(i); svg.append(lbl);
    }
  });
  const my = hgt - (mean / max) * hgt;
  const line = document.createElementNS(ns, 'line');
  line.setAttribute('x1', '0'); line.setAttribute('x2', String(w));
  line.setAttribute('y1', my.toFixed(1)); line.setAttribute('y2', my.toFixed(1));
  line.setAttribute('class', 'mean');
  svg.append(line);
  return svg;
}

// ---------- one job ----------

class JobPage extends Page {
  constructor(main, id) {
    super(main, POLL_MS);
    this.id = id;
    this.afterSeq = 0;
    this.loss = new Map();       // step -> loss (the latest report of a step wins, as after a restart)
    this.tps = new Map();        // step -> tokens/s
    this.lastMetrics = null;
    this.lastLoad = null;        // {step, load, imbalance}
    this.regions = new Map();    // region -> compile stats
    this.stalls = [];
    this.states = [];            // job_state events
    this.checkpoints = [];
    this.built = false;
  }

  base() { return `/api/jobs/${encodeURIComponent(this.id)}`; }

  async refresh() {
    const job = await apiJson(this.base());
    // Every event since the last poll, page by page (each page bounded by the server).
    for (let pages = 0; pages < 50; ++pages) {
      const page = await apiJson(`${this.base()}/events?after_seq=${this.afterSeq}&limit=1000&kinds=${EVENT_KINDS}`);
      for (const e of page.events) this.ingest(e);
      this.afterSeq = page.next_after_seq;
      if (!page.more) break;
    }
    const artifacts = await apiJson(`${this.base()}/artifacts`);
    this.render(job, artifacts.artifacts);
    // A settled job gets nothing new: stop polling once it ended and all is read.
    return !(TERMINAL.has(job.state) && this.afterSeq >= job.last_seq);
  }

  ingest(e) {
    const kind = eventKind(e);
    const d = e[kind];
    switch (kind) {
      case 'step_metrics': {
        const m = numericPayload(d);
        // A NaN or infinite loss ("NaN", "Infinity" in proto3 JSON) is left off the
        // chart, which would otherwise draw it as 0, and named on the loss card.
        if (Number.isFinite(m.loss)) this.loss.set(m.step, m.loss);
        else this.loss.delete(m.step);
        if (m.tokens_per_s > 0) this.tps.set(m.step, m.tokens_per_s);
        this.lastMetrics = m;
        if (m.expert_load.length) this.lastLoad = {step: m.step, load: m.expert_load, imbalance: m.imbalance, rank: e.rank};
        break;
      }
      case 'compile': {
        let r = this.regions.get(d.region);
        if (!r) {
          r = {region: d.region, layers: d.layers, ranks: new Set(), compiles: 0, recompiles: 0, ms: 0,
               entries: 0, hits: new Map(), lastReason: '', flags: new Map()};
          this.regions.set(d.region, r);
        }
        r.ranks.add(e.rank);
        if (d.layers && d.layers.length) r.layers = d.layers;
        if (d.cache_entries) r.entries = Math.max(r.entries, d.cache_entries);
        if (d.kind === 'COMPILE') { r.compiles++; r.ms += d.compile_ms; }
        else if (d.kind === 'RECOMPILE') { r.recompiles++; r.ms += d.compile_ms; r.lastReason = d.reason; }
        else if (d.kind === 'SUMMARY') {
          // "hits=N misses=N eager_fallbacks=N entries=N backend=B", the rank's running totals.
          const m = /hits=(\d+)/.exec(d.reason);
          if (m) r.hits.set(e.rank, Number(m[1]));
        } else {
          // RECOMPILE_LIMIT, GRAPH_BREAK, UNSAFE_SIDE_EFFECT, FALLBACK: a flag whose
          // tooltip is the latest reason given for it.
          r.flags.set(d.kind, d.reason || '');
        }
        break;
      }
      case 'stall': this.stalls.push({...d, rank: e.rank, attempt: e.attempt, time_ms: timeMs(e.time)}); break;
      case 'job_state': this.states.push({...d, attempt: e.attempt, time_ms: timeMs(e.time)}); break;
      case 'checkpoint': this.checkpoints.push({...d, attempt: e.attempt}); break;
      default: break;
    }
  }

  build() {
    this.head = h('div', {class: 'page-head'});
    this.cards = h('div', {class: 'cards', id: 'job-cards'});
    this.lossChart = new LineChart('loss', '', '#2563eb');
    this.lossChart.canvas.id = 'loss-chart';
    this.tpsChart = new LineChart('tokens/s', 'tok/s', '#059669');
    this.tpsChart.canvas.id = 'tps-chart';
    this.compile = h('div', {id: 'compile'});
    this.experts = h('div', {id: 'experts'});
    this.history = h('div', {id: 'history'});
    this.artifactsEl = h('div', {id: 'artifacts'});
    this.failure = h('div');
    this.main.replaceChildren(
      h('p', {class: 'crumbs'}, h('a', {href: '#/jobs'}, '← jobs')),
      this.head, this.failure, this.cards,
      h('div', {class: 'charts'}, this.lossChart.el, this.tpsChart.el),
      h('section', {}, h('h2', {}, 'Compile regions'), this.compile),
      h('div', {class: 'two'},
        h('section', {}, h('h2', {}, 'Expert load'), this.experts),
        h('section', {}, h('h2', {}, 'Restarts and stalls'), this.history)),
      h('section', {}, h('h2', {}, 'Artifacts'), this.artifactsEl));
    this.built = true;
  }

  render(job, artifacts) {
    if (!this.built) this.build();
    const m = this.lastMetrics;
    this.head.replaceChildren(
      h('h1', {}, job.id, ' ', h('span', {class: 'muted'}, job.name || '')), badge(job.state),
      h('span', {class: 'muted'}, `owner ${job.owner} · ${job.preset || 'custom'} · ${job.device} · dp ${job.dp} tp ${job.tp} ep ${job.ep}`));
    const causes = (job.failure_causes || []).map((c) => h('li', {}, c));
    this.failure.replaceChildren(
      job.pending_reason ? h('div', {class: 'note'}, `pending: ${job.pending_reason}`) : '',
      job.failure_reason ? h('div', {class: 'error'}, job.failure_reason, causes.length ? h('ul', {}, causes) : '') : '');
    const end = job.end_time_ms || Date.now();
    this.cards.replaceChildren(
      card('step', m ? `${m.step} / ${job.steps}` : `0 / ${job.steps}`,
           h('div', {class: 'progress'}, h('div', {style: `width:${m ? Math.min(100, (100 * m.step) / job.steps) : 0}%`}))),
      card('loss', m ? (Number.isFinite(m.loss) ? fmtNum(m.loss, 4) : 'not finite') : '–', m ? `grad norm ${fmtNum(m.grad_norm)} · lr ${fmtNum(m.lr)}` : ''),
      card('tokens/s', m ? fmtNum(m.tokens_per_s) : '–', m ? `${fmtNum(m.step_ms)} ms/step · ${fmtNum(m.peak_rss_mb)} MB rss` : ''),
      card('attempt', String(job.attempt), `restarts ${job.restarts} of ${job.max_restarts}`),
      card('stalls', String(this.stalls.length), this.stalls.length ? this.stalls[this.stalls.length - 1].collective || 'step timeout' : 'none'),
      card('ranks', String(job.world_size || job.dp * job.tp), (job.placement || []).length
        ? [...new Set(job.placement.map((p) => p.worker))].join(', ') : 'not placed'),
      card('checkpoint', job.last_checkpoint ? `step ${job.last_checkpoint.step}` : '–',
           job.last_checkpoint ? fmtBytes(job.last_checkpoint.bytes) : ''),
      card('running for', job.start_time_ms ? fmtDuration(end - job.start_time_ms) : '–', `created ${fmtTime(job.create_time_ms)}`));
    const sorted = (map) => [...map.entries()].sort((a, b) => a[0] - b[0]);
    this.lossChart.set(sorted(this.loss));
    this.tpsChart.set(sorted(this.tps));
    this.renderCompile();
    this.renderExperts();
    this.renderHistory();
    this.renderArtifacts(artifacts);
  }

  renderCompile() {
    if (this.regions.size === 0) {
      this.compile.replaceChildren(h('p', {class: 'muted'}, 'No compile events yet.'));
      return;
    }
    const rows = [...this.regions.values()].map((r) => h('tr', {},
      h('td', {class: 'mono'}, r.region),
      h('td', {}, r.layers && r.layers.length ? r.layers.join(',') : '–'),
      h('td', {class: 'num'}, r.compiles),
      h('td', {class: 'num'}, [...r.hits.values()].reduce((a, b) => a + b, 0)),
      h('td', {class: `num ${r.recompiles ? 'warn' : ''}`}, r.recompiles),
      h('td', {class: 'num'}, r.entries),
      h('td', {class: 'num'}, fmtNum(r.ms, 1)),
      h('td', {}, [...r.flags].map(([f, why]) => h('span', {class: 'flag', title: why || null}, f))),
      h('td', {class: 'reason'}, r.lastReason || '–')));
    this.compile.replaceChildren(table(
      ['region', 'layers', 'compiles', 'hits', 'recompiles', 'entries', 'compile ms', 'flags', 'last recompile reason'],
      rows, {class: 'grid', id: 'compile-table'}));
  }

  renderExperts() {
    const l = this.lastLoad;
    if (!l) { this.experts.replaceChildren(h('p', {class: 'muted'}, 'No expert load reported yet.')); return; }
    this.experts.replaceChildren(
      h('p', {class: 'muted small'}, `step ${l.step} · ${l.load.length} routed experts · imbalance (max/mean) ${fmtNum(l.imbalance, 2)}`),
      expertLoadSvg(l.load));
  }

  renderHistory() {
    const rows = [];
    for (const s of this.states) {
      if (s.state === 'RESTARTING' || s.state === 'FAILED' || s.state === 'CANCELLED') {
        rows.push(h('tr', {}, h('td', {}, fmtTime(s.time_ms)), h('td', {}, badge(s.state)),
                    h('td', {class: 'num'}, s.attempt), h('td', {class: 'reason'}, s.reason || '–')));
      }
    }
    for (const s of this.stalls) {
      rows.push(h('tr', {}, h('td', {}, fmtTime(s.time_ms)), h('td', {}, h('span', {class: 'badge st-failed'}, 'STALL')),
                  h('td', {class: 'num'}, s.attempt),
                  h('td', {class: 'reason'}, `${s.collective || 'step timeout'} · lagging rank ${s.lagging_rank} · ` +
                    `waited ${fmtNum(s.waited_s)} s · step ${s.step}${s.message ? ' · ' + s.message : ''}`)));
    }
    this.history.replaceChildren(rows.length
      ? table(['time', 'what', 'attempt', 'detail'], rows, {class: 'grid'})
      : h('p', {class: 'muted'}, 'No restarts and no stalls.'));
  }

  renderArtifacts(list) {
    if (!list.length) { this.artifactsEl.replaceChildren(h('p', {class: 'muted'}, 'No artifacts.')); return; }
    const rows = list.map((a) => h('tr', {},
      h('td', {class: 'mono'}, a.name), h('td', {}, a.kind), h('td', {class: 'num'}, a.attempt),
      h('td', {class: 'num'}, a.rank < 0 ? 'worker' : a.rank), h('td', {}, a.worker),
      h('td', {class: 'num'}, fmtBytes(a.size_bytes)),
      h('td', {}, h('button', {class: 'link', onclick: () => this.download(a.name)}, 'download'))));
    this.artifactsEl.replaceChildren(table(['name', 'kind', 'attempt', 'rank', 'worker', 'size', ''], rows,
                                           {class: 'grid', id: 'artifacts-table'}));
  }

  // The token travels in a header, which a plain link cannot send: fetch, then save.
  async download(name) {
    try {
      const res = await api(`${this.base()}/artifacts/${encodeURIComponent(name)}`);
      const url = URL.createObjectURL(await res.blob());
      const a = h('a', {href: url, download: name});
      document.body.append(a); a.click(); a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 10000);
    } catch (e) {
      if (e instanceof Unauthorized) showTokenPrompt(e.message);
      else this.setError(`download of ${name}: ${e.message}`);
    }
  }
}

// ---------- fleet ----------

class FleetPage extends Page {
  constructor(main) { super(main, LIST_POLL_MS); }
  async refresh() {
    const f = await apiJson('/api/fleet');
    const used = f.slots - f.free_slots;
    const workers = f.workers.map((w) => h('tr', {},
      h('td', {class: 'mono'}, w.name), h('td', {}, w.address),
      h('td', {}, h('span', {class: `badge ${w.connected ? 'st-running' : 'st-failed'}`}, w.connected ? 'connected' : 'lost')),
      h('td', {}, h('div', {class: 'slotbar', title: `${w.slots - w.free_slots} of ${w.slots} slots busy`},
                    h('div', {style: `width:${w.slots ? (100 * (w.slots - w.free_slots)) / w.slots : 0}%`})),
        h('span', {class: 'small muted'}, ` ${w.slots - w.free_slots} / ${w.slots}`)),
      h('td', {}, w.jobs.length ? w.jobs.map((id) => h('a', {href: `#/jobs/${encodeURIComponent(id)}`, class: 'chip'}, id)) : '–')));
    const queue = f.queue.map((j, i) => h('tr', {},
      h('td', {class: 'num'}, i + 1), h('td', {}, h('a', {href: `#/jobs/${encodeURIComponent(j.id)}`}, j.id)),
      h('td', {}, j.owner), h('td', {class: 'num'}, j.priority), h('td', {class: 'num'}, j.world_size || j.dp * j.tp),
      h('td', {}, j.estimated_start_time_ms ? fmtTime(j.estimated_start_time_ms) : '–'),
      h('td', {class: 'reason'}, j.pending_reason || '')));
    const states = Object.entries(f.jobs_by_state).map(([s, n]) => h('span', {class: 'state-count'}, badge(s), ` ${n}`));
    this.main.replaceChildren(
      h('div', {class: 'page-head'}, h('h1', {}, 'Fleet')),
      h('div', {class: 'cards'},
        card('workers', `${f.connected_workers} / ${f.workers.length}`, 'connected / known'),
        card('slots busy', `${used} / ${f.slots}`, h('div', {class: 'progress'}, h('div', {style: `width:${f.slots ? (100 * used) / f.slots : 0}%`}))),
        card('queue', String(f.queue_length), 'pending jobs')),
      h('section', {}, h('h2', {}, 'Jobs by state'), h('div', {class: 'states'}, states)),
      h('section', {}, h('h2', {}, 'Workers'), f.workers.length
        ? table(['name', 'address', 'link', 'slots', 'jobs'], workers, {class: 'grid', id: 'workers-table'})
        : h('p', {class: 'muted'}, 'No worker has registered.')),
      h('section', {}, h('h2', {}, 'Queue'), f.queue.length
        ? table(['#', 'job', 'owner', 'priority', 'ranks', 'estimated start', 'why it waits'], queue, {class: 'grid'})
        : h('p', {class: 'muted'}, 'Nothing is waiting.')));
  }
}
