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
