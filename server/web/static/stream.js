// A job's live events: the server-sent event stream /api/jobs/ID/stream read with
// fetch(), not EventSource, because EventSource cannot send the Authorization header
// and the token never goes into a URL or a cookie. Frames are "id: SEQ", "event: event"
// (data: the event's proto3 JSON), "event: end" (the job is settled and everything was
// sent), "event: error"; comments (": keep-alive") are skipped. A dropped connection is
// resumed from the last id seen (Last-Event-ID), after a second. A refusal (503: the
// controller's streams are all taken) calls onFallback: the page then polls /events.

import {TOKEN_KEY, Unauthorized} from './api.js';

export class EventStream {
  // handlers: onEvents(events), onEnd(), onFallback(message), onUnauthorized(message)
  constructor(url, afterSeq, handlers) {
    this.url = url;
    this.lastId = afterSeq;
    this.handlers = handlers;
    this.abort = new AbortController();
    this.stopped = false;
  }
  stop() { this.stopped = true; this.abort.abort(); }

  async run() {
    while (!this.stopped) {
      let ended = false;
      try {
        ended = await this.once();
      } catch (e) {
        if (this.stopped) return;
        if (e instanceof Unauthorized) { this.handlers.onUnauthorized(e.message); return; }
        if (e.fallback) { this.handlers.onFallback(e.message); return; }
        // A dropped connection: resume from lastId.
      }
      if (ended) { this.handlers.onEnd(); return; }
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
  }

  // One connection; true once the server said the stream ended.
  async once() {
    const headers = {};
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.Authorization = `Bearer ${token}`;
    if (this.lastId > 0) headers['Last-Event-ID'] = String(this.lastId);
    const res = await fetch(this.url, {headers, cache: 'no-store', signal: this.abort.signal});
    if (res.status === 401) {
      const body = await res.json().catch(() => ({}));
      throw new Unauthorized(body.error || 'a token is required');
    }
    if (!res.ok) {
      const body = await res.json().catch(() => ({}));
      const err = new Error(body.error || `${res.status} ${res.statusText}`);
      err.fallback = true;
      throw err;
    }
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = '';
    for (;;) {
      const {value, done} = await reader.read();
      if (done) return false;
      buffer += value;
      const events = [];
      let cut;
      while ((cut = buffer.indexOf('\n\n')) >= 0) {
        const frame = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        const f = parseFrame(frame);
        if (f.event === 'event' && f.data) {
          events.push(JSON.parse(f.data));
          if (f.id) this.lastId = Number(f.id);
        } else if (f.event === 'end') {
          if (events.length) this.handlers.onEvents(events);
          return true;
        } else if (f.event === 'error') {
          const err = new Error(JSON.parse(f.data || '{}').error || 'the stream failed');
          err.fallback = true;
          throw err;
        }
      }
      if (events.length) this.handlers.onEvents(events);
    }
  }
}

export function parseFrame(frame) {
  const out = {id: null, event: 'message', data: ''};
  for (const line of frame.split('\n')) {
    if (!line || line.startsWith(':')) continue;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'id') out.id = value;
    else if (field === 'event') out.event = value;
    else if (field === 'data') out.data = out.data ? `${out.data}\n${value}` : value;
  }
  return out;
}
