// The job page's part of sharing a fleet: the owner's quota and fair-share standing
// (the job's `share`, server/web/web_json.cc ShareJson; null from an older controller)
// as two cards, and which job_state changes are preemptions.

import {card, fmtNum, h} from './dom.js';

// "1st", "2nd", "3rd", "11th", "22nd".
export function ordinal(n) {
  const tens = n % 100;
  const suffix = tens >= 11 && tens <= 13 ? 'th' : ({1: 'st', 2: 'nd', 3: 'rd'}[n % 10] || 'th');
  return `${n}${suffix}`;
}

// "6 / 8 slots", "6 slots (no limit)".
function inUse(used, limit, unit) {
  return limit ? `${used} / ${limit} ${unit}` : `${used} ${unit} (no limit)`;
}

// A RESTARTING or PENDING state change the controller wrote when it stopped the job for
// a higher-priority one ("preempted by job-N (priority P)") or a drain ("drained from W:
// ..."); it repeats the reason, with the scheduler's words after it, while the job waits,
// so the first of an attempt is the preemption.
export function isPreemption(s) {
  return (s.state === 'RESTARTING' || s.state === 'PENDING') && /^(preempted by|drained from) /.test(s.reason || '');
}

// The quota card (the owner's running slots and GPUs against the limits, and the
// group's) and the fair-share card (decayed usage, weight, usage / weight, the place in
// the queue while PENDING); none without a share.
export function shareCards(job) {
  const s = job.share;
  if (!s) return [];
  const group = s.group
    ? h('div', {class: 'share-group'}, `group ${s.group}: ${inUse(s.group_slots_in_use, s.group_slot_limit, 'slots')}, ` +
        inUse(s.group_gpus_in_use, s.group_gpu_limit, 'GPUs'))
    : null;
  const quota = card('quota', inUse(s.owner_slots_in_use, s.owner_slot_limit, 'slots'),
    h('span', {class: 'share-quota'}, h('div', {}, `owner ${s.owner || job.owner} · ` +
      inUse(s.owner_gpus_in_use, s.owner_gpu_limit, 'GPUs')), group));
  const place = s.queue_position ? `${ordinal(s.queue_position)} of ${s.queue_length} pending` : 'not queued';
  const share = card('fair share', place,
    h('span', {class: 'share-usage', title: 'among jobs of equal priority the lower usage / weight goes first'},
      `${fmtNum(s.usage_slot_seconds / 3600, 2)} slot-hours used (decayed) · weight ${fmtNum(s.weight)} · ` +
      `share ${fmtNum(s.fair_share / 3600, 2)}`));
  return [quota, share];
}
