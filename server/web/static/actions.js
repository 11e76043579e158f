// The buttons that change something, shown only to a role that may use them (the
// server checks again: the same rules as the CLI). Job page: cancel, checkpoint now,
// resubmit (a form of --set edits, one per line, checked by the server's spec rules;
// its error, naming the key, is shown in the form). Fleet page: cordon, uncordon,
// drain (admins). Sweep page: cancel every child not ended. Each result is written next
// to the buttons.

import {Unauthorized, apiPost, showTokenPrompt} from './api.js';
import {h} from './dom.js';

const TERMINAL = new Set(['SUCCEEDED', 'FAILED', 'CANCELLED']);

export function canChangeJob(me, job) {
  return me && (me.role === 'admin' || (me.role === 'submitter' && me.owner === job.owner));
}
export function canResubmit(me, job) { return canChangeJob(me, job); }
export function canManageFleet(me) { return me && me.role === 'admin'; }

async function run(button, status, what, fn) {
  button.disabled = true;
  status.className = 'action-status muted';
  status.textContent = `${what}…`;
  try {
    const message = await fn();
    status.className = 'action-status ok';
    status.textContent = message;
  } catch (e) {
    if (e instanceof Unauthorized) showTokenPrompt(e.message);
    status.className = 'action-status error';
    status.textContent = `${what} refused: ${e.message}`;
  } finally {
    button.disabled = false;
  }
}

// The job page's actions, or null for a role that may not change the job.
export function jobActions(me, job, base, onChange) {
  if (!canChangeJob(me, job)) return null;
  const status = h('span', {class: 'action-status', id: 'action-status'});
  const running = !TERMINAL.has(job.state);
  const buttons = [];
  if (running) {
    const cancel = h('button', {id: 'action-cancel', onclick: () => run(cancel, status, 'cancel', async () => {
      const answer = await apiPost(`${base}/cancel`, {reason: 'cancelled from the web UI'});
      onChange();
      return `cancelled: ${answer.job.state}`;
    })}, 'Cancel');
    buttons.push(cancel);
  }
  if (job.state === 'RUNNING') {
    const checkpoint = h('button', {id: 'action-checkpoint', onclick: () => run(checkpoint, status, 'checkpoint', async () => {
      const answer = await apiPost(`${base}/checkpoint`, {});
      onChange();
      return `checkpoint saved at step ${answer.checkpoint.step}`;
    })}, 'Checkpoint now');
    buttons.push(checkpoint);
  }
  const sets = h('textarea', {id: 'resubmit-set', rows: '2', placeholder: 'training.steps=100', spellcheck: 'false'});
  const error = h('div', {class: 'form-error', id: 'resubmit-error'});
  const submit = h('button', {type: 'submit', id: 'action-resubmit'}, 'Resubmit');
  const form = h('form', {class: 'resubmit', onsubmit: (ev) => {
    ev.preventDefault();
    error.textContent = '';
    const edits = sets.value.split('\n').map((s) => s.trim()).filter(Boolean);
    run(submit, status, 'resubmit', async () => {
      try {
        const answer = await apiPost(`${base}/resubmit`, {set: edits});
        return `resubmitted as ${answer.job.id}`;
      } catch (e) {
        error.textContent = e.message;  // the server's rule, naming the key
        throw e;
      }
    }).then(() => {
      const made = /resubmitted as (\S+)/.exec(status.textContent);
      if (made) status.append(' ', h('a', {href: `#/jobs/${encodeURIComponent(made[1])}`, id: 'resubmitted-link'}, 'open'));
    });
  }}, h('label', {}, 'resubmit with --set edits (one per line)'), sets, submit, error);
  return h('section', {class: 'actions', id: 'job-actions'}, h('div', {class: 'buttons'}, ...buttons, status), form);
}

// The sweep page's Cancel (the owner or an admin, while a child has not ended), or null.
// `view` is the SweepView as /api/sweeps/ID serves it; the result goes to `status`,
// which outlives the page's re-renders (the button goes once the sweep ended).
export function sweepActions(me, view, base, status, onChange) {
  if (view.ended || !canChangeJob(me, view.sweep)) return null;
  const cancel = h('button', {id: 'sweep-cancel', onclick: () => run(cancel, status, 'cancel', async () => {
    const answer = await apiPost(`${base}/cancel`, {reason: 'cancelled from the web UI'});
    onChange();
    const children = (answer.children || []).length;
    return `cancelled: ${(answer.states || {}).CANCELLED || 0} of ${children} children CANCELLED`;
  })}, 'Cancel sweep');
  return h('div', {class: 'buttons', id: 'sweep-actions'}, cancel);
}

// A worker's row's buttons (admin), or null; results go to `status`, which outlives
// the page's re-renders.
export function workerActions(me, worker, status, onChange) {
  if (!canManageFleet(me)) return null;
  const base = `/api/workers/${encodeURIComponent(worker.name)}`;
  const make = (action, label, body) => {
    const b = h('button', {class: `small action-${action}`, onclick: () => run(b, status, action, async () => {
      const answer = await apiPost(`${base}/${action}`, body());
      onChange();
      return action === 'drain' ? `drained: moved ${answer.job_ids.length}` : `${action}ed`;
    })}, label);
    return b;
  };
  const reason = () => ({reason: 'from the web UI'});
  return h('span', {class: 'worker-actions'},
    worker.cordoned ? make('uncordon', 'uncordon', () => ({})) : make('cordon', 'cordon', reason),
    make('drain', 'drain', reason));
}
