// The jobs list (with the sweeps, when there are any, above it; a sweep's children are
// marked with their sweep) and the fleet page (cordoned workers marked with the reason),
// each refreshed every 3 s.

import {workerActions} from './actions.js';
import {Unauthorized, apiJson, me} from './api.js';
import {badge, card, fill, fmtDuration, fmtTime, h, table} from './dom.js';
import {deviceCell, gpuSection, gpusCell} from './gpus.js';
import {Page} from './page.js';
import {sweepsTable} from './sweep_page.js';

const LIST_POLL_MS = 3000;
// Each sweep in the list carries its children's ids: a few sweeps are enough here.
const SWEEPS_SHOWN = 20;

// The newest sweeps; none where the controller serves no sweeps (a read-only web UI).
async function recentSweeps() {
  try {
    return (await apiJson(`/api/sweeps?limit=${SWEEPS_SHOWN}`)).sweeps || [];
  } catch (e) {
    if (e instanceof Unauthorized) throw e;
    return [];
  }
}

export class JobsPage extends Page {
  constructor(main) { super(main, LIST_POLL_MS); }
  async refresh() {
    const data = await apiJson('/api/jobs?limit=200');
    const sweeps = await recentSweeps();
    // A sweep's child stays in the list (its limit counts every job), marked with its sweep.
    const rows = data.jobs.map((j) => h('tr', {class: j.sweep_id ? 'sweep-child' : null, dataset: j.sweep_id ? {sweep: j.sweep_id} : null},
      h('td', {}, h('a', {href: `#/jobs/${encodeURIComponent(j.id)}`}, j.id)),
      h('td', {}, j.name || '–', j.sweep_id
        ? h('a', {href: `#/sweeps/${encodeURIComponent(j.sweep_id)}`, class: 'chip sweep-chip', title: j.sweep_label || null},
            `${j.sweep_id} #${j.sweep_index}`)
        : null),
      h('td', {}, j.owner),
      h('td', {}, badge(j.state), j.pending_reason ? h('div', {class: 'small muted'}, j.pending_reason) : null),
      h('td', {class: 'num'}, j.attempt),
      h('td', {class: 'num'}, j.restarts ? `${j.restarts} / ${j.max_restarts}` : '0'),
      h('td', {class: 'num'}, `${j.world_size || j.dp * j.tp}`),
      h('td', {}, `${j.preset || 'custom'} · ${j.steps} steps · ${j.device}`),
      h('td', {}, fmtTime(j.create_time_ms)),
      h('td', {}, j.start_time_ms ? fmtDuration((j.end_time_ms || Date.now()) - j.start_time_ms) : '–')));
    fill(this.main,
      sweeps.length ? [h('div', {class: 'page-head'}, h('h1', {}, 'Sweeps'),
                         h('span', {class: 'muted'}, `${sweeps.length} shown, newest first`)),
                       sweepsTable(sweeps)] : null,
      h('div', {class: `page-head${sweeps.length ? ' spaced' : ''}`}, h('h1', {}, 'Jobs'), h('span', {class: 'muted'}, `${data.jobs.length} shown, newest first`)),
      data.jobs.length ? table(['id', 'name', 'owner', 'state', 'attempt', 'restarts', 'ranks', 'shape', 'created', 'ran'],
                               rows, {class: 'grid', id: 'jobs-table'})
                       : h('p', {class: 'muted'}, 'No jobs yet. Submit one with: trainyard submit examples/debug.toml'));
  }
}

export class FleetPage extends Page {
  constructor(main) {
    super(main, LIST_POLL_MS);
    this.actionStatus = h('span', {class: 'action-status', id: 'fleet-action-status'});
  }
  async refresh() {
    const f = await apiJson('/api/fleet');
    const who = await me();
    const admin = who.role === 'admin';
    const used = f.slots - f.free_slots;
    const workers = f.workers.map((w) => h('tr', {},
      h('td', {class: 'mono'}, w.name), h('td', {}, w.address),
      h('td', {class: 'link'}, h('span', {class: `badge ${w.connected ? 'st-running' : 'st-failed'}`}, w.connected ? 'connected' : 'lost'),
        // A cordoned worker takes no new ranks (trainyard workers cordon / drain).
        w.cordoned ? [' ', h('span', {class: 'badge st-cordoned'}, 'cordoned'),
                      w.cordon_reason ? h('div', {class: 'small reason cordon-reason'}, w.cordon_reason) : null] : null),
      h('td', {}, h('div', {class: 'slotbar', title: `${w.slots - w.free_slots} of ${w.slots} slots busy`},
                    h('div', {style: `width:${w.slots ? (100 * (w.slots - w.free_slots)) / w.slots : 0}%`})),
        h('span', {class: 'small muted'}, ` ${w.slots - w.free_slots} / ${w.slots}`)),
      deviceCell(w), gpusCell(w),
      h('td', {}, w.jobs.length ? w.jobs.map((id) => h('a', {href: `#/jobs/${encodeURIComponent(id)}`, class: 'chip'}, id)) : '–'),
      // Admins only: a viewer's and a submitter's page has no such column.
      admin ? h('td', {}, workerActions(who, w, this.actionStatus, () => { clearTimeout(this.timer); this.tick(); })) : null));
    const queue = f.queue.map((j, i) => h('tr', {},
      h('td', {class: 'num'}, i + 1), h('td', {}, h('a', {href: `#/jobs/${encodeURIComponent(j.id)}`}, j.id)),
      h('td', {}, j.owner), h('td', {class: 'num'}, j.priority), h('td', {class: 'num'}, j.world_size || j.dp * j.tp),
      h('td', {}, j.estimated_start_time_ms ? fmtTime(j.estimated_start_time_ms) : '–'),
      h('td', {class: 'reason'}, j.pending_reason || '')));
    const states = Object.entries(f.jobs_by_state).map(([s, n]) => h('span', {class: 'state-count'}, badge(s), ` ${n}`));
    fill(this.main,
      h('div', {class: 'page-head'}, h('h1', {}, 'Fleet'), admin ? this.actionStatus : null),
      h('div', {class: 'cards'},
        card('workers', `${f.connected_workers} / ${f.workers.length}`, 'connected / known'),
        card('slots busy', `${used} / ${f.slots}`, h('div', {class: 'progress'}, h('div', {style: `width:${f.slots ? (100 * used) / f.slots : 0}%`}))),
        card('queue', String(f.queue_length), 'pending jobs'),
        f.gpus ? card('GPUs free', `${f.free_gpus} / ${f.gpus}`, f.unhealthy_gpus ? `${f.unhealthy_gpus} unhealthy` : 'all healthy') : null),
      h('section', {}, h('h2', {}, 'Jobs by state'), h('div', {class: 'states'}, states)),
      h('section', {}, h('h2', {}, 'Workers'), f.workers.length
        ? table(['name', 'address', 'link', 'slots', 'device', 'GPUs', 'jobs', ...(admin ? ['actions'] : [])], workers,
                {class: 'grid', id: 'workers-table'})
        : h('p', {class: 'muted'}, 'No worker has registered.')),
      gpuSection(f.workers),
      h('section', {}, h('h2', {}, 'Queue'), f.queue.length
        ? table(['#', 'job', 'owner', 'priority', 'ranks', 'estimated start', 'why it waits'], queue, {class: 'grid'})
        : h('p', {class: 'muted'}, 'Nothing is waiting.')));
  }
}
