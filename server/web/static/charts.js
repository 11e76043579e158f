// The pages' charts: a line chart on <canvas> (x = step), several series overlaid on one
// (a sweep's children), and expert load as SVG bars.

import {fmtNum, h} from './dom.js';

// The canvas sized to its box, cleared, with its grid and axis labels for the points
// `all` ([x, y] pairs); null when there is nothing to draw (or no box yet). X and Y map a
// point to the canvas; bottom is the plot's lowest pixel.
function drawFrame(c, all) {
  const dpr = window.devicePixelRatio || 1;
  const w = c.clientWidth, hgt = c.clientHeight;
  if (!w || !hgt) return null;
  c.width = Math.round(w * dpr); c.height = Math.round(hgt * dpr);
  const g = c.getContext('2d');
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, w, hgt);
  const pad = {l: 58, r: 14, t: 10, b: 26};
  const pw = w - pad.l - pad.r, ph = hgt - pad.t - pad.b;
  g.font = '11px system-ui, sans-serif';
  g.fillStyle = '#6b7280';
  if (all.length === 0) return null;
  let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
  for (const [x, y] of all) {
    if (x < x0) x0 = x; if (x > x1) x1 = x;
    if (y < y0) y0 = y; if (y > y1) y1 = y;
  }
  if (x1 === x0) x1 = x0 + 1;
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
  return {g, X, Y, bottom: pad.t + ph};
}

// Evaluations: a diamond at each point (so they read apart from training dots), joined
// by a thin line.
function drawMarkers(g, pts, X, Y, color, lineWidth) {
  g.beginPath();
  pts.forEach(([x, y], i) => (i ? g.lineTo(X(x), Y(y)) : g.moveTo(X(x), Y(y))));
  g.strokeStyle = color; g.lineWidth = lineWidth; g.stroke();
  g.fillStyle = color;
  for (const [x, y] of pts) {
    const cx = X(x), cy = Y(y);
    g.beginPath(); g.moveTo(cx, cy - 4.5); g.lineTo(cx + 4.5, cy); g.lineTo(cx, cy + 4.5); g.lineTo(cx - 4.5, cy);
    g.closePath(); g.fill();
  }
}

// A line chart on a canvas: x = step, y = value. `points` is sorted by x. An optional
// second series (`second`: {key, label, color}) shares the axes and is drawn as a thin
// line with a marker at every point (the loss chart's validation loss: a point every
// validation.freq steps); the canvas's data-points counts the first series' points and
// data-<key>-points the second's, which the browser test compares with the API.
export class LineChart {
  constructor(title, unit, color, second) {
    this.title = title; this.unit = unit; this.color = color; this.second = second || null;
    this.canvas = h('canvas', {class: 'chart', role: 'img', 'aria-label': title, dataset: {points: '0'}});
    if (this.second) this.canvas.dataset[`${this.second.key}Points`] = '0';
    this.last = h('span', {class: 'chart-last'});
    this.lastSecond = h('span', {class: 'chart-last'});
    const legend = this.second
      ? h('span', {class: 'chart-legend'},
          h('span', {class: 'swatch line', style: `background:${color}`}), title,
          h('span', {class: 'swatch marker', style: `background:${this.second.color}`}), this.second.label)
      : null;
    // What an empty chart says, as text over the canvas (so it reads as text, and the
    // page says why: still waiting, or the job ended with nothing to draw).
    this.empty = h('div', {class: 'chart-empty'}, 'waiting for step metrics…');
    this.el = h('div', {class: 'chart-box'},
                h('div', {class: 'chart-title'}, title, this.last, this.second ? this.lastSecond : null, legend),
                h('div', {class: 'chart-area'}, this.canvas, this.empty));
    this.points = [];
    this.secondPoints = [];
    new ResizeObserver(() => this.draw()).observe(this.canvas);
  }
  // The text an empty chart shows.
  setEmptyText(text) { this.empty.textContent = text; }
  set(points, secondPoints) {
    this.points = points;
    this.canvas.dataset.points = String(points.length);
    const lastPoint = points[points.length - 1];
    this.last.textContent = lastPoint ? ` ${fmtNum(lastPoint[1])}${this.unit ? ' ' + this.unit : ''} @ step ${lastPoint[0]}` : '';
    if (this.second) {
      this.secondPoints = secondPoints || [];
      this.canvas.dataset[`${this.second.key}Points`] = String(this.secondPoints.length);
      const l = this.secondPoints[this.secondPoints.length - 1];
      this.lastSecond.textContent = l ? ` · ${this.second.label} ${fmtNum(l[1])} @ step ${l[0]}` : '';
    }
    this.draw();
  }
  draw() {
    const all = this.points.concat(this.secondPoints);
    this.empty.hidden = all.length > 0;
    const frame = drawFrame(this.canvas, all);
    if (!frame) return;
    const {g, X, Y, bottom} = frame;
    const pts = this.points, second = this.secondPoints;
    // The series, with a soft fill under it.
    if (pts.length) this.drawMain(g, pts, X, Y, bottom);
    // A validation point is one evaluation: a marker each, joined by a thin line.
    if (second.length) drawMarkers(g, second, X, Y, this.second.color, 1.5);
  }
  drawMain(g, pts, X, Y, bottom) {
    g.beginPath();
    pts.forEach(([x, y], i) => (i ? g.lineTo(X(x), Y(y)) : g.moveTo(X(x), Y(y))));
    g.strokeStyle = this.color; g.lineWidth = 2; g.lineJoin = 'round'; g.stroke();
    g.lineTo(X(pts[pts.length - 1][0]), bottom); g.lineTo(X(pts[0][0]), bottom); g.closePath();
    g.globalAlpha = 0.08; g.fillStyle = this.color; g.fill(); g.globalAlpha = 1;
    if (pts.length <= 60) {
      g.fillStyle = this.color;
      for (const [x, y] of pts) { g.beginPath(); g.arc(X(x), Y(y), 2.2, 0, 2 * Math.PI); g.fill(); }
    }
  }
}

// Colours for overlaid series: Tableau 10, then hues a golden angle apart.
const SERIES_COLORS = ['#4e79a7', '#f28e2b', '#e15759', '#76b7b2', '#59a14f', '#edc948', '#b07aa1', '#ff9da7',
                       '#9c755f', '#bab0ac'];
export function seriesColor(i) {
  return i < SERIES_COLORS.length ? SERIES_COLORS[i] : `hsl(${Math.round((i * 137.508) % 360)}, 65%, 45%)`;
}

// Several series overlaid on one canvas (a sweep's children): each a training line and
// its validation diamonds in the series' colour, and a legend by label. The canvas's
// data-series counts the series and data-points / data-validation-points all their
// points; each legend entry (li.legend-item) carries its series' data-key,
// data-points and data-validation-points, which the browser test compares with the API.
export class MultiLineChart {
  constructor(title) {
    this.title = title;
    this.canvas = h('canvas', {class: 'chart tall', role: 'img', 'aria-label': title,
                               dataset: {series: '0', points: '0', validationPoints: '0'}});
    this.empty = h('div', {class: 'chart-empty'}, 'waiting for step metrics…');
    this.note = h('span', {class: 'chart-last'});
    this.legend = h('ul', {class: 'multi-legend'});
    this.el = h('div', {class: 'chart-box'},
                h('div', {class: 'chart-title'}, title, this.note,
                  h('span', {class: 'chart-legend'},
                    h('span', {class: 'swatch line', style: 'background:#6b7280'}), 'training',
                    h('span', {class: 'swatch marker', style: 'background:#6b7280'}), 'validation')),
                h('div', {class: 'chart-area'}, this.canvas, this.empty),
                this.legend);
    this.series = [];
    new ResizeObserver(() => this.draw()).observe(this.canvas);
  }
  setEmptyText(text) { this.empty.textContent = text; }
  setNote(text) { this.note.textContent = text ? ` ${text}` : ''; }
  // series: [{key, label, color, href, points: [[step, loss]], validation: [[step, loss]],
  // error}], each sorted by step; `error` (why its losses could not be read) is the
  // legend entry's tooltip.
  set(series) {
    this.series = series;
    const d = this.canvas.dataset;
    d.series = String(series.length);
    d.points = String(series.reduce((n, s) => n + s.points.length, 0));
    d.validationPoints = String(series.reduce((n, s) => n + s.validation.length, 0));
    this.legend.replaceChildren(...series.map((s) => {
      const last = s.validation[s.validation.length - 1];
      const title = s.error || (last ? `validation ${fmtNum(last[1])} @ step ${last[0]}` : null);
      return h('li', {class: `legend-item${s.error ? ' unread' : ''}`, title,
                      dataset: {key: s.key, points: String(s.points.length), validationPoints: String(s.validation.length)}},
               h('span', {class: 'swatch line', style: `background:${s.color}`}),
               s.href ? h('a', {href: s.href}, s.label) : s.label);
    }));
    this.draw();
  }
  draw() {
    const all = [];
    for (const s of this.series) all.push(...s.points, ...s.validation);
    this.empty.hidden = all.length > 0;
    const frame = drawFrame(this.canvas, all);
    if (!frame) return;
    const {g, X, Y} = frame;
    g.lineJoin = 'round';
    for (const s of this.series) {
      if (s.points.length) {
        g.beginPath();
        s.points.forEach(([x, y], i) => (i ? g.lineTo(X(x), Y(y)) : g.moveTo(X(x), Y(y))));
        g.strokeStyle = s.color; g.lineWidth = 1.75; g.stroke();
      }
      if (s.validation.length) drawMarkers(g, s.validation, X, Y, s.color, 1);
    }
  }
}

// Tokens per routed expert as inline SVG bars (the latest step that carried them).
export function expertLoadSvg(load) {
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
