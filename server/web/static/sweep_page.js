// One sweep's page (#/sweeps/ID): its header (name, owner, max_concurrent, axes, children
// by state, Cancel), its children ranked by their last validation loss, and one chart of
// the children's loss curves overlaid. /api/sweeps/ID is the proto3 JSON of
// trainyard.v1.SweepView (64-bit integers as strings, a non-finite loss "NaN"); each
// charted child's training and validation losses come page by page from its
// /api/jobs/ID/events, as the job page reads them when it polls.

import {sweepActions} from './actions.js';
import {Unauthorized, apiJson, me} from './api.js';
import {MultiLineChart, seriesColor} from './charts.js';
import {badge, fill, fmtNum, fmtTime, h, table} from './dom.js';
import {eventKind, numericPayload, timeMs} from './events.js';
import {Page} from './page.js';

const POLL_MS = 2000;
const EVENT_KINDS = 'step_metrics,validation';
const TERMINAL = new Set(['SUCCEEDED', 'FAILED', 'CANCELLED']);
// The chart overlays at most this many children (the best ranked first), so that it
// stays readable and a sweep of a thousand points costs as many event reads as this.
export const MAX_CHARTED = 20;
// Event pages read per child and refresh, and children read at once.
const PAGES_PER_CHILD = 20;
const PARALLEL_READS = 6;

// The children in rank order: those with a validation by rank, then the rest by index.
export function rankedChildren(children) {
  return [...children].sort((a, b) => {
    const ra = a.rank > 0 ? a.rank : Infinity, rb = b.rank > 0 ? b.rank : Infinity;
    return ra !== rb ? ra - rb : a.index - b.index;
  });
}

// "2.3456 @ 40", or '–' without a validation; a diverged child's loss is named, not hidden.
function valLossText(v) {
  if (!v) return '–';
  const loss = Number(v.loss);
  return `${Number.isFinite(loss) ? fmtNum(loss, 4) : 'not finite'} @ ${Number(v.step)}`;
}

export class SweepPage extends Page {
  constructor(main, id) {
    super(main, POLL_MS);
    this.id = id;
    this.view = null;
    this.curves = new Map();  // job id -> {afterSeq, loss: Map(step -> loss), val: Map, done}
    this.built = false;
    this.actionsKey = '';
  }

  base() { return `/api/sweeps/${encodeURIComponent(this.id)}`; }

  async refresh() {
    this.me = await me();
    this.view = await apiJson(this.base());
    const ranked = rankedChildren(this.view.children || []);
    const charted = ranked.slice(0, MAX_CHARTED);
    const todo = charted.filter((c) => !(this.curves.get(c.job_id) || {}).done);
    for (let i = 0; i < todo.length; i += PARALLEL_READS) {
      await Promise.all(todo.slice(i, i + PARALLEL_READS).map((c) => this.readEvents(c.job_id)));
    }
    this.render(ranked, charted);
    // Settled: every child ended and every charted child's events read.
    return !(this.view.ended && charted.every((c) => (this.curves.get(c.job_id) || {}).done));
  }

  // The child's events since the last read, as the job page polls them. A child whose
  // events cannot be read (compacted by the controller's retention) keeps what was read
  // and is not asked again; the others are still charted.
  async readEvents(jobId) {
    let curve = this.curves.get(jobId);
    if (!curve) {
      curve = {afterSeq: 0, loss: new Map(), val: new Map(), done: false, error: ''};
      this.curves.set(jobId, curve);
    }
    try {
      await this.readPages(curve, jobId);
    } catch (e) {
      if (e instanceof Unauthorized) throw e;
      curve.done = true;
      curve.error = e.message;
    }
  }

  async readPages(curve, jobId) {
    for (let pages = 0; pages < PAGES_PER_CHILD; ++pages) {
      const page = await apiJson(
        `/api/jobs/${encodeURIComponent(jobId)}/events?after_seq=${curve.afterSeq}&limit=1000&kinds=${EVENT_KINDS}`);
      for (const e of page.events) {
        const kind = eventKind(e);
        const d = numericPayload(e[kind]);
        // A NaN or infinite loss is left off the chart (it would be drawn as 0).
        const into = kind === 'step_metrics' ? curve.loss : kind === 'validation' ? curve.val : null;
        if (!into) continue;
        if (Number.isFinite(d.loss)) into.set(d.step, d.loss);
        else into.delete(d.step);
      }
      curve.afterSeq = Number(page.next_after_seq);
      if (!page.more) {
        curve.done = TERMINAL.has(page.state) && curve.afterSeq >= Number(page.last_seq);
        break;
      }
    }
  }

  build() {
    this.head = h('div', {class: 'page-head'});
    this.actionsEl = h('div', {id: 'sweep-actions-slot'});
    this.actionStatus = h('span', {class: 'action-status', id: 'sweep-action-status'});
    this.info = h('div', {id: 'sweep-info'});
    this.chart = new MultiLineChart('loss by child');
    this.chart.canvas.id = 'sweep-chart';
    this.childrenEl = h('div', {id: 'sweep-children'});
    fill(this.main,
      h('p', {class: 'crumbs'}, h('a', {href: '#/jobs'}, '← jobs')),
      this.head, h('section', {class: 'actions'}, h('div', {class: 'buttons'}, this.actionsEl, this.actionStatus)), this.info,
      h('div', {class: 'charts one'}, this.chart.el),
      h('section', {}, h('h2', {}, 'Children, best validation loss first'), this.childrenEl));
    this.built = true;
  }

  render(ranked, charted) {
    if (!this.built) this.build();
    const v = this.view, s = v.sweep;
    const total = (s.job_ids || []).length;
    fill(this.head,
      h('h1', {}, s.id, ' ', h('span', {class: 'muted'}, s.name || '')),
      v.ended ? h('span', {class: 'badge st-ended'}, 'ENDED') : null,
      h('span', {class: 'muted', id: 'sweep-summary'},
        `owner ${s.owner} · ${total} children · max concurrent ${s.max_concurrent > 0 ? s.max_concurrent : 'no limit'}` +
        ` · created ${fmtTime(timeMs(s.create_time))}`));
    // Rebuilt only when what it offers changes, so its status line stays.
    const key = `${v.ended}|${this.me ? this.me.role : ''}`;
    if (key !== this.actionsKey) {
      this.actionsKey = key;
      fill(this.actionsEl, sweepActions(this.me, v, this.base(), this.actionStatus,
                                        () => { clearTimeout(this.timer); this.tick(); }));
    }
    const axes = (s.axes || []).map((a) => h('li', {class: 'axis', dataset: {key: a.key}},
      h('span', {class: 'mono'}, a.key), ': ', (a.values || []).map((x) => h('span', {class: 'chip mono'}, x))));
    const states = Object.entries(v.states || {}).filter(([, n]) => n > 0)
      .map(([st, n]) => h('span', {class: 'state-count', dataset: {state: st}}, badge(st), ` ${n}`));
    fill(this.info,
      h('div', {class: 'two'},
        h('section', {}, h('h2', {}, 'Axes'), h('ul', {class: 'axes', id: 'sweep-axes'}, axes)),
        h('section', {}, h('h2', {}, 'Children by state'), h('div', {class: 'states', id: 'sweep-states'}, states))));

    const rows = ranked.map((c) => h('tr', {dataset: {job: c.job_id, rank: String(c.rank)}},
      h('td', {class: 'num'}, c.rank > 0 ? c.rank : '–'),
      h('td', {}, h('a', {href: `#/jobs/${encodeURIComponent(c.job_id)}`}, c.job_id)),
      h('td', {class: 'mono'}, c.label),
      h('td', {}, badge(c.state), c.reason ? h('div', {class: 'small reason'}, c.reason) : null),
      h('td', {class: 'num'}, Number(c.last_step) > 0 ? Number(c.last_step) : '–'),
      h('td', {class: 'num val-loss'}, valLossText(c.last_validation))));
    fill(this.childrenEl, rows.length
      ? table(['rank', 'job', 'label', 'state', 'step', 'val loss @ step'], rows, {class: 'grid', id: 'sweep-table'})
      : h('p', {class: 'muted'}, 'This sweep has no children.'));

    // The chart's series keep their colour by index whatever the ranking does.
    const sorted = (map) => [...map.entries()].sort((a, b) => a[0] - b[0]);
    this.chart.set(charted.map((c) => {
      const curve = this.curves.get(c.job_id) || {loss: new Map(), val: new Map()};
      return {key: c.job_id, label: c.label || c.job_id, color: seriesColor(c.index), error: curve.error || '',
              href: `#/jobs/${encodeURIComponent(c.job_id)}`, points: sorted(curve.loss), validation: sorted(curve.val)};
    }));
    this.chart.setNote(ranked.length > charted.length ? `the best ${charted.length} of ${ranked.length} children` : '');
    this.chart.setEmptyText(v.ended ? 'no step metrics: no child reported a step' : 'waiting for step metrics…');
  }
}

// The jobs list's sweeps table (lists.js): each sweep linking to its page.
export function sweepsTable(sweeps) {
  const rows = sweeps.map((v) => {
    const s = v.sweep;
    return h('tr', {dataset: {sweep: s.id}},
      h('td', {}, h('a', {href: `#/sweeps/${encodeURIComponent(s.id)}`}, s.id)),
      h('td', {}, s.name || '–'),
      h('td', {}, s.owner),
      h('td', {class: 'num'}, (s.job_ids || []).length),
      h('td', {}, Object.entries(v.states || {}).filter(([, n]) => n > 0)
        .map(([st, n]) => h('span', {class: 'state-count'}, badge(st), ` ${n} `))),
      h('td', {}, (s.axes || []).map((a) => `${a.key} ×${(a.values || []).length}`).join(' · ')),
      h('td', {class: 'num'}, s.max_concurrent > 0 ? s.max_concurrent : '–'),
      h('td', {}, fmtTime(timeMs(s.create_time))));
  });
  return table(['sweep', 'name', 'owner', 'children', 'states', 'axes', 'max concurrent', 'created'], rows,
               {class: 'grid', id: 'sweeps-table'});
}
