// The base of every page: refresh every `period` ms until stopped; a 401 shows the prompt.

import {Unauthorized, showTokenPrompt} from './api.js';
import {fill, h} from './dom.js';

export class Page {
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
    fill(this.main, h('div', {class: 'locked'}, h('h1', {}, 'Token required'),
                                h('p', {class: 'muted'}, message)));
  }
  setError(message) {
    let el = document.getElementById('page-error');
    if (!message) { if (el) el.remove(); return; }
    if (!el) { el = h('div', {id: 'page-error', class: 'error'}); this.main.prepend(el); }
    el.textContent = message;
  }
}
