// How the page reads an event. Events are the proto3 JSON of trainyard.v1.Event with the .proto field names
// (docs/web.md), as `trainyard watch --output json` prints them: the payload is the one
// member whose value is an object, under its kind's name (step_metrics, compile, ...);
// 64-bit integers are decimal strings, times RFC 3339 strings, and a non-finite double
// is "NaN", "Infinity" or "-Infinity".
export function eventKind(e) {
  return Object.keys(e).find((k) => e[k] !== null && typeof e[k] === 'object') || 'none';
}
// The milliseconds of an RFC 3339 time, or null when unset.
export function timeMs(t) { return t ? Date.parse(t) : null; }
// A payload whose every field is a number or a list of numbers (StepMetrics), as numbers.
export function numericPayload(d) {
  return Object.fromEntries(Object.entries(d).map(([k, v]) => [k, Array.isArray(v) ? v.map(Number) : Number(v)]));
}
