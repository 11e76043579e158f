// Trainyard web UI: a read-only view of the controller's JSON API (docs/web.md).
// No framework and no build step: ES modules loaded by index.html (this one first),
// routes after '#', DOM built with textContent only, charts drawn on <canvas>.
//   dom.js      elements, formats, cards, tables
//   api.js      the API with the tab's token, the token prompt
//   events.js   reading an event (proto3 JSON of trainyard.v1.Event)
//   page.js     the polling page every view extends
//   charts.js   line chart, expert-load bars
//   job_page.js one job;  lists.js  the jobs list and the fleet
//   sweep_page.js one sweep: its children ranked, their loss curves overlaid

import {TOKEN_KEY, apiJson} from './api.js';
import {fmtClock} from './dom.js';
import {JobPage} from './job_page.js';
import {FleetPage, JobsPage} from './lists.js';
import {SweepPage} from './sweep_page.js';

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
  setInterval(() => { document.getElementById('clock').textContent = fmtClock(Date.now()); }, 1000);
  route();
});

let current = null;  // the page being shown: {stop()}

async function route() {
  if (current) current.stop();
  current = null;
  const hash = location.hash.replace(/^#\/?/, '');
  // A hand-typed '%' that is not an escape must not stop the page (URIError).
  const parts = hash.split('/').filter(Boolean).map((p) => { try { return decodeURIComponent(p); } catch (e) { return p; } });
  const main = document.getElementById('main');
  for (const a of document.querySelectorAll('nav a')) {
    // A sweep is reached from the jobs list.
    a.classList.toggle('active', a.dataset.nav === (parts[0] === 'sweeps' ? 'jobs' : parts[0] || 'jobs'));
  }
  let page;
  if (parts[0] === 'fleet') page = new FleetPage(main);
  else if (parts[0] === 'jobs' && parts[1]) page = new JobPage(main, parts[1]);
  else if (parts[0] === 'sweeps' && parts[1]) page = new SweepPage(main, parts[1]);
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
