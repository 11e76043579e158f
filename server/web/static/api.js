// The controller's JSON API with the tab's bearer token, and the token prompt a 401 brings.

export const TOKEN_KEY = 'trainyard.token';

export class Unauthorized extends Error {}

export async function api(path) {
  const headers = {};
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = `Bearer ${token}`;
  const res = await fetch(path, {headers, cache: 'no-store'});
  if (res.status === 401) {
    const body = await res.json().catch(() => ({}));
    throw new Unauthorized(body.error || 'a token is required');
  }
  if (!res.ok) {
    const body = await res.json().catch(() => ({}));
    const err = new Error(body.error || `${res.status} ${res.statusText}`);
    err.status = res.status;
    throw err;
  }
  return res;
}
export async function apiJson(path) { return (await api(path)).json(); }

export function showTokenPrompt(message) {
  const prompt = document.getElementById('token-prompt');
  const had = sessionStorage.getItem(TOKEN_KEY);
  document.getElementById('token-message').textContent = had
    ? `The token was refused (${message}). Enter another one.`
    : 'This controller requires a token (the same one the trainyard CLI uses).';
  prompt.hidden = false;
  document.getElementById('token-input').focus();
}

// An action: POST with a JSON body and the bearer token in the Authorization header
// (never a cookie: another site's page cannot send that header). The answer's JSON, or
// an Error carrying the server's message (a bad --set edit names the key).
export async function apiPost(path, body) {
  const headers = {'Content-Type': 'application/json'};
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers.Authorization = `Bearer ${token}`;
  const res = await fetch(path, {method: 'POST', headers, body: JSON.stringify(body || {}), cache: 'no-store'});
  const answer = await res.json().catch(() => ({}));
  if (res.status === 401) throw new Unauthorized(answer.error || 'a token is required');
  if (!res.ok) {
    const err = new Error(answer.error || `${res.status} ${res.statusText}`);
    err.status = res.status;
    throw err;
  }
  return answer;
}

// Who the tab's token is ({auth, role, owner}), asked once per token.
let meCache = {token: null, me: null};
export async function me() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (meCache.me && meCache.token === token) return meCache.me;
  const answer = await apiJson('/api/me');
  meCache = {token, me: answer};
  return answer;
}
