// The fleet page's GPU parts (from /api/fleet's workers, server/web/web_json.cc
// WorkerJson): a worker's device and capabilities, its GPU models with free and
// unhealthy counts, and the per-GPU table of the newest samples.

import {fmtBytes, fmtNum, h, table} from './dom.js';

const GIB = 1024 ** 3;

// "140 GiB" (whole GiB) for a GPU's memory; '' when unknown.
function gpuMemory(bytes) {
  if (!bytes) return '';
  return bytes < GIB ? fmtBytes(bytes) : `${Math.round(bytes / GIB)} GiB`;
}

// "8× NVIDIA H200 140 GiB", models grouped in index order.
export function gpuModels(w) {
  const groups = new Map();
  for (const g of w.gpus) {
    const model = [g.name || 'GPU', gpuMemory(g.memory_bytes)].filter(Boolean).join(' ');
    groups.set(model, (groups.get(model) || 0) + 1);
  }
  return [...groups.entries()].map(([model, n]) => `${n}× ${model}`).join(', ');
}

// The rank binary's flags as chips: cuda 12.4, nccl, bf16, cudagraph (cpu without CUDA).
export function capabilityChips(w) {
  const c = w.capabilities;
  if (!c) return h('span', {class: 'muted small'}, 'no capabilities sent');
  const flags = [c.cuda ? (c.cuda_version ? `cuda ${c.cuda_version}` : 'cuda') : 'cpu'];
  for (const k of ['nccl', 'bf16', 'cudagraph']) if (c[k]) flags.push(k);
  return h('span', {class: 'caps', title: c.libtorch_version ? `LibTorch ${c.libtorch_version}` : null},
           flags.map((f) => h('span', {class: 'chip cap'}, f)));
}

// The workers table's device cell: the device, its capabilities, the driver.
export function deviceCell(w) {
  return h('td', {class: 'device'}, h('div', {}, w.device || '–'), capabilityChips(w),
           w.gpu_driver_version ? h('div', {class: 'small muted'},
             `driver ${w.gpu_driver_version}${w.cuda_driver_version ? ` · CUDA ${w.cuda_driver_version}` : ''}`) : null);
}

// The workers table's GPUs cell: models, then free and unhealthy counts.
export function gpusCell(w) {
  if (!w.gpus.length) return h('td', {class: 'gpus muted'}, '–');
  const unhealthy = w.gpus.filter((g) => !g.healthy).length;
  return h('td', {class: 'gpus'}, h('div', {class: 'gpu-models'}, gpuModels(w)),
           h('div', {class: 'small'}, h('span', {class: 'gpu-free'}, `${w.free_gpus.length} free`),
             unhealthy ? h('span', {class: 'gpu-unhealthy-count'}, ` · ${unhealthy} unhealthy`) : null,
             w.nvlink_topology_known ? null : h('span', {class: 'muted'}, ' · NVLink topology unknown')));
}

function meter(fraction, text, title) {
  const pct = fraction === null || fraction === undefined ? 0 : Math.max(0, Math.min(1, fraction)) * 100;
  return [h('div', {class: 'slotbar', title}, h('div', {style: `width:${pct}%`})), h('span', {class: 'small'}, ` ${text}`)];
}

function gpuRow(w, g) {
  const s = g.sample;
  const used = s ? s.memory_used_bytes : null;
  const state = !g.healthy
    ? [h('span', {class: 'badge st-failed'}, 'unhealthy'), h('div', {class: 'small reason gpu-reason'}, g.unhealthy_reason)]
    : h('span', {class: `badge ${g.free ? 'st-succeeded' : 'st-running'}`}, g.free ? 'free' : 'in use');
  const errors = s ? `ECC ${s.ecc_uncorrected ?? '–'} · XID ${s.xid_errors ?? '–'}${s.last_xid ? ` (last ${s.last_xid})` : ''}` : '–';
  return h('tr', {dataset: {worker: w.name, gpu: String(g.index)}, class: g.healthy ? null : 'gpu-bad'},
    h('td', {class: 'mono'}, w.name),
    h('td', {class: 'num'}, g.index),
    h('td', {}, g.name || 'GPU', h('div', {class: 'small muted mono'}, g.uuid)),
    h('td', {class: 'gpu-util'}, s && s.utilization !== null ? meter(s.utilization, `${Math.round(100 * s.utilization)}%`, 'utilisation') : '–'),
    h('td', {class: 'gpu-mem'}, used !== null && used !== undefined
      ? meter(g.memory_bytes ? used / g.memory_bytes : 0, `${fmtBytes(used)} / ${fmtBytes(g.memory_bytes)}`, 'memory used')
      : `– / ${fmtBytes(g.memory_bytes)}`),
    h('td', {class: 'num gpu-temp'}, s && s.temperature_celsius !== null ? `${fmtNum(s.temperature_celsius, 0)} °C` : '–'),
    h('td', {class: 'num gpu-power'}, s && s.power_watts !== null ? `${fmtNum(s.power_watts, 0)} W` : '–'),
    h('td', {class: 'gpu-errors'}, errors),
    h('td', {class: 'gpu-state'}, state));
}

// The per-GPU section: one row per GPU of every worker, or null when none has GPUs.
export function gpuSection(workers) {
  const rows = workers.flatMap((w) => w.gpus.map((g) => gpuRow(w, g)));
  if (!rows.length) return null;
  return h('section', {}, h('h2', {}, 'GPUs'),
    table(['worker', 'gpu', 'model', 'utilisation', 'memory', 'temperature', 'power', 'errors', 'state'], rows,
          {class: 'grid', id: 'gpus-table'}));
}

// A job's ranks card subtitle: each worker once, in rank order, with its ranks' GPUs on
// a CUDA job ("g1 gpu 4,5 · g2 gpu 0"); the title holds each rank's GPU UUID and each
// worker's NCCL settings.
export function placementSummary(job) {
  const placement = job.placement || [];
  if (!placement.length) return {text: 'not placed', title: null};
  const byWorker = new Map();
  for (const p of placement) {
    if (!byWorker.has(p.worker)) byWorker.set(p.worker, []);
    if (p.gpu !== null && p.gpu !== undefined) byWorker.get(p.worker).push(p.gpu);
  }
  const text = [...byWorker.entries()].map(([w, gpus]) => (gpus.length ? `${w} gpu ${gpus.join(',')}` : w)).join(' · ');
  const lines = placement.filter((p) => p.gpu_uuid).map((p) => `rank ${p.rank}: ${p.worker} gpu ${p.gpu} ${p.gpu_uuid}`);
  for (const e of job.worker_env || []) lines.push(`${e.worker} NCCL: ${e.nccl_env.length ? e.nccl_env.join(' ') : 'none'}`);
  return {text, title: lines.length ? lines.join('\n') : null};
}
