// Shared helpers of the OpenAI SDK compatibility tests (tests/openai/*.test.mjs).
// The server is started by tests/openai/run.sh, which passes:
//   ZIPMOE_BASE_URL  http://127.0.0.1:PORT (no /v1)
//   ZIPMOE_MODEL_ID  the id GET /v1/models lists (basename of the model directory)
//   ZIPMOE_MODE      serve | up
//   ZIPMOE_API_KEY   the key the server was started with (env ZIPMOE_API_KEY)
import assert from 'node:assert/strict';
import OpenAI from 'openai';

function required(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run these tests through tests/openai/run.sh ZIPMOE_BIN serve|up`);
  return v;
}

export const BASE_URL = required('ZIPMOE_BASE_URL').replace(/\/+$/, '');
export const MODEL = required('ZIPMOE_MODEL_ID');
export const MODE = process.env.ZIPMOE_MODE ?? 'serve';
export const API_KEY = required('ZIPMOE_API_KEY');
// Context length of the tiny synthetic model (config.json max_position_embeddings).
export const CONTEXT_LENGTH = 8192;
// Per-test time limit (node:test `timeout` option).
export const TEST_TIMEOUT_MS = 90_000;

// An SDK client; no retries, so every status the server answers reaches the test as is.
export function client(options = {}) {
  return new OpenAI({ baseURL: `${BASE_URL}/v1`, apiKey: API_KEY, maxRetries: 0, timeout: 60_000, ...options });
}

export { OpenAI };

// Headers of a plain fetch() that the SDK would send.
export function authHeaders(extra = {}) {
  return { Authorization: `Bearer ${API_KEY}`, 'Content-Type': 'application/json', ...extra };
}

// Plain fetch of BASE_URL + path; the body (an object) is sent as JSON.
export async function http(method, path, { body, headers, auth = true, timeoutMs = 30_000 } = {}) {
  const h = auth ? authHeaders(headers) : { ...(body !== undefined ? { 'Content-Type': 'application/json' } : {}), ...headers };
  const res = await fetch(`${BASE_URL}${path}`, {
    method,
    headers: h,
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
    signal: AbortSignal.timeout(timeoutMs),
  });
  const text = await res.text();
  let json;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, headers: res.headers, text, json };
}

// Asserts that `promise` (an SDK call) rejects with an APIError of `status` (and `param` when given);
// returns the error. `errorClass` (e.g. OpenAI.BadRequestError) is checked when given.
export async function expectApiError(promise, status, { param, errorClass } = {}) {
  let caught;
  try {
    const r = await promise;
    assert.fail(`expected HTTP ${status}, the request succeeded: ${JSON.stringify(r).slice(0, 300)}`);
  } catch (e) {
    if (e instanceof assert.AssertionError) throw e;
    caught = e;
  }
  assert.ok(caught instanceof OpenAI.APIError, `expected an APIError, got ${caught}`);
  assert.equal(caught.status, status, `HTTP status (${caught.message})`);
  if (errorClass) assert.ok(caught instanceof errorClass, `expected ${errorClass.name}, got ${caught.constructor.name}`);
  if (param !== undefined) assert.equal(caught.param, param, `error.param (${caught.message})`);
  return caught;
}

// The error body every 4xx answer must have: {"error": {message, type, param, code}}.
// A CORS preflight for POST `path` (no API key, as a browser sends it); the Response, body consumed.
export async function preflight(path) {
  const res = await fetch(`${BASE_URL}${path}`, {
    method: 'OPTIONS',
    headers: {
      Origin: 'http://example.com',
      'Access-Control-Request-Method': 'POST',
      'Access-Control-Request-Headers': 'authorization,content-type',
    },
    signal: AbortSignal.timeout(10_000),
  });
  await res.arrayBuffer();
  return res;
}

export function assertErrorBody(json, what = '') {
  assert.ok(json && typeof json === 'object', `${what}: body is not JSON`);
  const e = json.error;
  assert.ok(e && typeof e === 'object', `${what}: no "error" object in ${JSON.stringify(json)}`);
  assert.equal(typeof e.message, 'string', `${what}: error.message`);
  assert.equal(typeof e.type, 'string', `${what}: error.type`);
  assert.ok('param' in e, `${what}: error.param missing (may be null) in ${JSON.stringify(e)}`);
  assert.ok(e.param === null || typeof e.param === 'string', `${what}: error.param is ${JSON.stringify(e.param)}`);
  assert.ok('code' in e, `${what}: error.code missing (may be null) in ${JSON.stringify(e)}`);
}

// A non-streaming chat request with the usual test defaults.
export function chat(c, messages, extra = {}, options = {}) {
  return c.chat.completions.create({ model: MODEL, messages, ...extra }, options);
}

export function userMessage(content) {
  return [{ role: 'user', content }];
}

export function assertUsage(usage, maxCompletion) {
  assert.ok(usage, 'usage missing');
  assert.ok(Number.isInteger(usage.prompt_tokens) && usage.prompt_tokens > 0, `prompt_tokens ${usage.prompt_tokens}`);
  assert.ok(Number.isInteger(usage.completion_tokens) && usage.completion_tokens >= 0, `completion_tokens ${usage.completion_tokens}`);
  if (maxCompletion !== undefined) assert.ok(usage.completion_tokens <= maxCompletion, `completion_tokens ${usage.completion_tokens} > ${maxCompletion}`);
  assert.equal(usage.total_tokens, usage.prompt_tokens + usage.completion_tokens, 'total_tokens = prompt + completion');
}

export function byIndex(choices) {
  return [...choices].sort((a, b) => a.index - b.index);
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The scripted models' answer (tests/openai/make_scripted_model.py): both reason WEATHER_REASONING and
// call get_weather with WEATHER_ARGS, whatever the prompt (scripted_tools.mjs, scripted_harmony.mjs).
export const WEATHER_REASONING = 'The user wants the weather in Paris.';
export const WEATHER_ARGS = { city: 'Paris', unit: 'celsius' };
export const WEATHER_TOOLS = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'The current weather of a city',
      parameters: {
        type: 'object',
        properties: { city: { type: 'string' }, unit: { type: 'string', enum: ['celsius', 'fahrenheit'] } },
        required: ['city'],
      },
    },
  },
];

// `message` is that answer: reasoning_content, one get_weather call with WEATHER_ARGS, no content.
export function assertTheWeatherCall(message) {
  assert.equal(message.role, 'assistant');
  assert.equal(message.content, null, `content ${JSON.stringify(message.content)}`);
  assert.equal(message.reasoning_content, WEATHER_REASONING);
  assert.equal(message.tool_calls?.length, 1, JSON.stringify(message));
  const call = message.tool_calls[0];
  assert.equal(call.type, 'function');
  assert.equal(typeof call.id, 'string');
  assert.ok(call.id.length > 0);
  assert.equal(call.function.name, 'get_weather');
  assert.deepEqual(JSON.parse(call.function.arguments), WEATHER_ARGS);
}
