// One job's live page: events as they come from the job's event stream (stream.js;
// polled page by page from /events only when the controller refuses a stream), the
// loss chart (training and validation loss) and the tokens/s chart, the compile table per region, expert load, restarts,
// preemptions and stalls, the owner's quota and fair share (share.js), artifact downloads.

import {jobActions} from './actions.js';
import {Unauthorized, api, apiJson, me, showTokenPrompt} from './api.js';
import {LineChart, expertLoadSvg} from './charts.js';
import {badge, card, fill, fmtBytes, fmtDuration, fmtNum, fmtTime, h, table} from './dom.js';
import {eventKind, numericPayload, timeMs} from './events.js';
import {placementSummary} from './gpus.js';
import {isPreemption, shareCards} from './share.js';
import {Page} from './page.js';
import {EventStream} from './stream.js';

const POLL_MS = 1000;
// While the stream runs, the job's summary and artifacts are read again this often
// (and at once after a state change, checkpoint or artifact event).
const SUMMARY_MS = 5000;
const EVENT_KINDS = 'step_metrics,validation,compile,stall,job_state,checkpoint,artifact';
const TERMINAL = new Set(['SUCCEEDED', 'FAILED', 'CANCELLED']);

// How long the job has been at it: waiting (never started), running, or, once it
// ended, how long it ran (an ended job is not "running for" anything).
function timeCard(job) {
  if (TERMINAL.has(job.state)) {
    const ran = job.start_time_ms && job.end_time_ms ? fmtDuration(job.end_time_ms - job.start_time_ms) : 'never started';
    return card('ran for', ran, `ended ${fmtTime(job.end_time_ms)}`);
  }
  if (job.start_time_ms) {
    return card('running for', fmtDuration(Date.now() - job.start_time_ms), `started ${fmtTime(job.start_time_ms)}`);
  }
  return card('waiting for', fmtDuration(Date.now() - job.create_time_ms), `created ${fmtTime(job.create_time_ms)}`);
}

export class JobPage extends Page {
  constructor(main, id) {
    super(main, POLL_MS);
    this.id = id;
    this.afterSeq = 0;
    this.loss = new Map();       // step -> loss (the latest report of a step wins, as after a restart)
    this.tps = new Map();        // step -> tokens/s
    this.valLoss = new Map();    // step -> validation loss (the latest evaluation of a step wins)
    this.lastValidation = null;
    this.lastMetrics = null;
    this.lastLoad = null;        // {step, load, imbalance, dropped}
    this.regions = new Map();    // region -> compile stats
    this.stalls = [];
    this.states = [];            // job_state events
    this.checkpoints = [];
    this.built = false;
    this.stream = null;          // EventStream while it runs
    this.streamEnded = false;
    this.polling = false;        // the controller refused a stream: read /events instead
    this.job = null;
    this.artifacts = [];
    this.summaryAt = 0;
    this.actionsKey = '';
  }

  stop() {
    super.stop();
    if (this.stream) this.stream.stop();
  }

  startStream() {
    this.stream = new EventStream(`${this.base()}/stream`, this.afterSeq, {
      onEvents: (events) => {
        let changed = false;
        for (const e of events) {
          this.ingest(e);
          this.afterSeq = Math.max(this.afterSeq, Number(e.seq));
          const kind = eventKind(e);
          changed = changed || kind === 'job_state' || kind === 'checkpoint' || kind === 'artifact';
        }
        if (changed) this.summaryAt = 0;
        if (this.job) this.render(this.job, this.artifacts);
        if (changed) { clearTimeout(this.timer); this.tick(); }
      },
      onEnd: () => { this.streamEnded = true; this.summaryAt = 0; clearTimeout(this.timer); this.tick(); },
      onFallback: (message) => { this.polling = true; this.stream = null; this.setError(null); console.info(`event stream refused (${message}); polling`); },
      onUnauthorized: (message) => { showTokenPrompt(message); this.renderLocked(message); },
    });
    this.stream.run();
  }

  base() { return `/api/jobs/${encodeURIComponent(this.id)}`; }

  async refresh() {
    this.me = await me();
    const now = Date.now();
    if (this.polling || !this.job || now - this.summaryAt >= SUMMARY_MS) {
      this.job = await apiJson(this.base());
      this.artifacts = (await apiJson(`${this.base()}/artifacts`)).artifacts;
      this.summaryAt = now;
    }
    if (this.polling) {
      // Every event since the last poll, page by page (each page bounded by the server).
      for (let pages = 0; pages < 50; ++pages) {
        const page = await apiJson(`${this.base()}/events?after_seq=${this.afterSeq}&limit=1000&kinds=${EVENT_KINDS}`);
        for (const e of page.events) this.ingest(e);
        this.afterSeq = page.next_after_seq;
        if (!page.more) break;
      }
    } else if (!this.stream && !this.streamEnded) {
      this.startStream();
    }
    this.render(this.job, this.artifacts);
    // A settled job gets nothing new: stop once it ended and all is read.
    return !(TERMINAL.has(this.job.state) && this.afterSeq >= this.job.last_seq &&
             (this.polling || this.streamEnded));
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
        if (m.expert_load.length) {
          this.lastLoad = {step: m.step, load: m.expert_load, imbalance: m.imbalance, dropped: m.dropped_tokens, rank: e.rank};
        }
        break;
      }
      case 'validation': {
        const v = numericPayload(d);
        // As the training loss: a diverged model's NaN is named on the card, not charted.
        if (Number.isFinite(v.loss)) this.valLoss.set(v.step, v.loss);
        else this.valLoss.delete(v.step);
        this.lastValidation = v;
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
    this.lossChart = new LineChart('loss', '', '#2563eb', {key: 'validation', label: 'validation', color: '#d97706'});
    this.lossChart.canvas.id = 'loss-chart';
    this.tpsChart = new LineChart('tokens/s', 'tok/s', '#059669');
    this.tpsChart.canvas.id = 'tps-chart';
    this.compile = h('div', {id: 'compile'});
    this.experts = h('div', {id: 'experts'});
    this.history = h('div', {id: 'history'});
    this.artifactsEl = h('div', {id: 'artifacts'});
    this.failure = h('div');
    this.actionsEl = h('div', {id: 'actions-slot'});
    this.crumbs = h('p', {class: 'crumbs'});
    fill(this.main,
      this.crumbs,
      this.head, this.actionsEl, this.failure, this.cards,
      h('div', {class: 'charts'}, this.lossChart.el, this.tpsChart.el),
      h('section', {}, h('h2', {}, 'Compile regions'), this.compile),
      h('div', {class: 'two'},
        h('section', {}, h('h2', {}, 'Expert load'), this.experts),
        h('section', {}, h('h2', {}, 'Restarts, preemptions and stalls'), this.history)),
      h('section', {}, h('h2', {}, 'Artifacts'), this.artifactsEl));
    this.built = true;
  }

  render(job, artifacts) {
    if (!this.built) this.build();
    const m = this.lastMetrics;
    const v = this.lastValidation;
    // A sweep's child links back to its sweep.
    fill(this.crumbs, h('a', {href: '#/jobs'}, '← jobs'),
      job.sweep_id ? [' · ', h('a', {href: `#/sweeps/${encodeURIComponent(job.sweep_id)}`, id: 'job-sweep'},
                               `sweep ${job.sweep_id} #${job.sweep_index}`),
                      job.sweep_label ? h('span', {class: 'muted mono'}, ` ${job.sweep_label}`) : null] : null);
    fill(this.head,
      h('h1', {}, job.id, ' ', h('span', {class: 'muted'}, job.name || '')), badge(job.state),
      h('span', {class: 'muted'}, `owner ${job.owner} · ${job.preset || 'custom'} · ${job.device} · dp ${job.dp}${job.dp_shard > 1 ? ` (dp_shard ${job.dp_shard})` : ''} tp ${job.tp} ep ${job.ep}`));
    const causes = (job.failure_causes || []).map((c) => h('li', {}, c));
    fill(this.failure,
      job.pending_reason ? h('div', {class: 'note'}, `pending: ${job.pending_reason}`) : null,
      job.failure_reason ? h('div', {class: 'error'}, job.failure_reason, causes.length ? h('ul', {}, causes) : null) : null);
    // Rebuilt only when what it offers changes, so a half-typed resubmit form stays.
    const key = `${job.state}|${this.me ? this.me.role : ''}`;
    if (key !== this.actionsKey) {
      this.actionsKey = key;
      fill(this.actionsEl, jobActions(this.me, job, this.base(), () => { this.summaryAt = 0; clearTimeout(this.timer); this.tick(); }));
    }
    const placed = placementSummary(job);
    fill(this.cards,
      card('step', m ? `${m.step} / ${job.steps}` : `0 / ${job.steps}`,
           h('div', {class: 'progress'}, h('div', {style: `width:${m ? Math.min(100, (100 * m.step) / job.steps) : 0}%`}))),
      card('loss', m ? (Number.isFinite(m.loss) ? fmtNum(m.loss, 4) : 'not finite') : '–',
           m ? `grad norm ${fmtNum(m.grad_norm)} · lr ${fmtNum(m.lr)}${m.epoch > 0 ? ` · epoch ${m.epoch}` : ''}` : ''),
      card('validation loss', v ? (Number.isFinite(v.loss) ? fmtNum(v.loss, 4) : 'not finite') : '–',
           v ? `at step ${v.step} · ${fmtNum(v.ms)} ms` : 'none reported'),
      card('tokens/s', m ? fmtNum(m.tokens_per_s) : '–', m ? `${fmtNum(m.step_ms)} ms/step · ${fmtNum(m.peak_rss_mb)} MB rss` : ''),
      card('attempt', String(job.attempt), `restarts ${job.restarts} of ${job.max_restarts}` +
           (job.preemptions ? ` · preempted ${job.preemptions}×` : '')),
      card('stalls', String(this.stalls.length), this.stalls.length ? this.stalls[this.stalls.length - 1].collective || 'step timeout' : 'none'),
      card('ranks', String(job.world_size || job.dp * job.tp), h('span', {class: 'placement', title: placed.title}, placed.text)),
      card('checkpoint', job.last_checkpoint ? `step ${job.last_checkpoint.step}` : '–',
           job.last_checkpoint ? fmtBytes(job.last_checkpoint.bytes) : ''),
      timeCard(job),
      ...shareCards(job));
    const sorted = (map) => [...map.entries()].sort((a, b) => a[0] - b[0]);
    const empty = TERMINAL.has(job.state) ? `no step metrics: the job ended ${job.state} before it reported a step`
                                          : 'waiting for step metrics…';
    this.lossChart.setEmptyText(empty);
    this.tpsChart.setEmptyText(empty);
    this.lossChart.set(sorted(this.loss), sorted(this.valLoss));
    this.tpsChart.set(sorted(this.tps));
    this.renderCompile();
    this.renderExperts();
    this.renderHistory();
    this.renderArtifacts(artifacts);
  }

  renderCompile() {
    if (this.regions.size === 0) {
      fill(this.compile, h('p', {class: 'muted'}, 'No compile events yet.'));
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
    fill(this.compile, table(
      ['region', 'layers', 'compiles', 'hits', 'recompiles', 'entries', 'compile ms', 'flags', 'last recompile reason'],
      rows, {class: 'grid', id: 'compile-table'}));
  }

  renderExperts() {
    const l = this.lastLoad;
    if (!l) { fill(this.experts, h('p', {class: 'muted'}, 'No expert load reported yet.')); return; }
    fill(this.experts,
      h('p', {class: 'muted small'}, `step ${l.step} · ${l.load.length} routed experts · imbalance (max/mean) ${fmtNum(l.imbalance, 2)}` +
        (l.dropped > 0 ? ` · ${l.dropped} assignments dropped by the expert capacity` : '')),
      expertLoadSvg(l.load));
  }

  renderHistory() {
    const rows = [];
    const preempted = new Set();  // attempts: the first change of each names its preemption
    for (const s of this.states) {
      if (isPreemption(s)) {
        if (preempted.has(s.attempt)) continue;
        preempted.add(s.attempt);
        rows.push(h('tr', {class: 'preemption'}, h('td', {}, fmtTime(s.time_ms)),
                    h('td', {}, h('span', {class: 'badge st-preempted'}, 'PREEMPTED')),
                    h('td', {class: 'num'}, s.attempt), h('td', {class: 'reason'}, s.reason)));
      } else if (s.state === 'RESTARTING' || s.state === 'FAILED' || s.state === 'CANCELLED') {
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
    fill(this.history, rows.length
      ? table(['time', 'what', 'attempt', 'detail'], rows, {class: 'grid'})
      : h('p', {class: 'muted'}, 'No restarts, no preemptions and no stalls.'));
  }

  renderArtifacts(list) {
    if (!list.length) { fill(this.artifactsEl, h('p', {class: 'muted'}, 'No artifacts.')); return; }
    const rows = list.map((a) => h('tr', {},
      h('td', {class: 'mono'}, a.name), h('td', {}, a.kind), h('td', {class: 'num'}, a.attempt),
      h('td', {class: 'num'}, a.rank < 0 ? 'worker' : a.rank), h('td', {}, a.worker),
      h('td', {class: 'num'}, fmtBytes(a.size_bytes)),
      h('td', {}, h('button', {class: 'link', onclick: () => this.download(a.name)}, 'download'))));
    fill(this.artifactsEl, table(['name', 'kind', 'attempt', 'rank', 'worker', 'size', ''], rows,
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
