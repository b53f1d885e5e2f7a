// API key: run.sh starts the server with env ZIPMOE_API_KEY; every other test file authenticates
// with it through the SDK's apiKey (spec point 16).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { API_KEY, MODEL, OpenAI, TEST_TIMEOUT_MS, assertErrorBody, client, expectApiError, http, preflight, userMessage } from './lib.mjs';

const T = { timeout: TEST_TIMEOUT_MS };

test('16a a wrong API key is a 401 AuthenticationError', T, async () => {
  const wrong = client({ apiKey: `wrong-${API_KEY}` });
  await expectApiError(
    wrong.chat.completions.create({ model: MODEL, messages: userMessage('Hi'), max_tokens: 2 }),
    401,
    { errorClass: OpenAI.AuthenticationError },
  );
  await expectApiError(wrong.models.list(), 401, { errorClass: OpenAI.AuthenticationError });
  // The right key works (the other files rely on it).
  const ok = await client().chat.completions.create({ model: MODEL, messages: userMessage('Hi'), max_tokens: 2 });
  assert.equal(ok.choices.length, 1);
});

test('16b a missing Authorization header is a 401 with an OpenAI error body', T, async () => {
  const r = await http('POST', '/v1/completions', { body: { model: MODEL, prompt: 'Hi', max_tokens: 1 }, auth: false });
  assert.equal(r.status, 401, r.text);
  assertErrorBody(r.json, 'missing key');
  const w = await http('POST', '/v1/completions', {
    body: { model: MODEL, prompt: 'Hi', max_tokens: 1 },
    headers: { Authorization: `Bearer not-${API_KEY}` },
  });
  assert.equal(w.status, 401, w.text);
  assertErrorBody(w.json, 'wrong key');
});

test('16c GET /health and the OPTIONS preflight work without a key', T, async () => {
  const h = await http('GET', '/health', { auth: false });
  assert.equal(h.status, 200, h.text);
  const res = await preflight('/v1/completions');
  assert.ok(res.status === 200 || res.status === 204, `OPTIONS without a key: HTTP ${res.status}`);
});
