// The web UI's DOM and number helpers: elements built with textContent only (job names,
// reasons and logs are never parsed as HTML), formats, cards and tables.

// h('div', {class: 'x'}, 'text', child, ...): an element; strings become text nodes.
export function h(tag, attrs, ...children) {
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

// el.replaceChildren(...children) without what h() also leaves out: the DOM would
// write a null child as the text "null" (the fleet page did, under its workers table).
export function fill(el, ...children) {
  el.replaceChildren(...children.flat().filter((c) => c !== undefined && c !== null && c !== false));
}

export function fmtNum(v, digits) {
  if (v === null || v === undefined || Number.isNaN(v)) return '–';
  const a = Math.abs(v);
  if (digits !== undefined) return v.toFixed(digits);
  if (a !== 0 && (a >= 1e6 || a < 1e-3)) return v.toExponential(2);
  if (a >= 1000) return Math.round(v).toLocaleString('en-US');
  return Number(v.toPrecision(4)).toString();
}
export function fmtBytes(n) {
  if (!n) return '0 B';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; ++i; }
  return `${i === 0 ? n : n.toFixed(1)} ${units[i]}`;
}
// ISO 8601 in UTC to the second, "2026-12-06T10:47:17Z", as the CLI prints times: a
// locale's "06/12/2026" is read as June in one country and December in the next.
export function fmtTime(ms) {
  if (!ms) return '–';
  return `${new Date(ms).toISOString().slice(0, 19)}Z`;
}
// The clock of the header: "10:47:17Z".
export function fmtClock(ms) { return `${new Date(ms).toISOString().slice(11, 19)}Z`; }
export function fmtDuration(ms) {
  if (ms === null || ms === undefined || ms < 0) return '–';
  const s = Math.round(ms / 1000);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
}
export function badge(state) { return h('span', {class: `badge st-${(state || '').toLowerCase()}`}, state || '?'); }
export function card(label, value, sub) {
  return h('div', {class: 'card'}, h('div', {class: 'card-label'}, label),
           h('div', {class: 'card-value'}, value), sub ? h('div', {class: 'card-sub'}, sub) : null);
}
export function table(headers, rows, attrs) {
  // A column of numbers (class num in the first row) gets a right-aligned heading too.
  const first = rows[0] ? [...rows[0].children] : [];
  return h('table', attrs || {},
           h('thead', {}, h('tr', {}, headers.map((x, i) => h('th', {class: first[i] && first[i].classList.contains('num') ? 'num' : null}, x)))),
           h('tbody', {}, rows));
}
