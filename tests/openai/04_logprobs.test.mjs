// logprobs on chat and completions through the official openai SDK (spec points 8 and 9).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { MODEL, OpenAI, TEST_TIMEOUT_MS, chat, client, expectApiError, http, userMessage } from './lib.mjs';

const c = client();
const T = { timeout: TEST_TIMEOUT_MS };
const PROMPT = 'Count to ten';

function assertBytes(bytes, what) {
  assert.ok(Array.isArray(bytes), `${what}: bytes is not an array (${JSON.stringify(bytes)})`);
  for (const b of bytes) assert.ok(Number.isInteger(b) && b >= 0 && b <= 255, `${what}: byte ${b}`);
}

function assertLogprob(lp, what) {
  assert.equal(typeof lp, 'number', `${what}: logprob ${lp}`);
  assert.ok(lp <= 0, `${what}: logprob ${lp} > 0`);
}

test('08a chat logprobs with top_logprobs 3: one entry per token, well-formed, greedy token first', T, async () => {
  const r = await chat(c, userMessage(PROMPT), { temperature: 0, max_tokens: 6, logprobs: true, top_logprobs: 3 });
  const lp = r.choices[0].logprobs;
  assert.ok(lp && Array.isArray(lp.content), `choices[0].logprobs.content missing: ${JSON.stringify(lp)}`);
  assert.equal(lp.content.length, r.usage.completion_tokens, 'one entry per completion token');
  lp.content.forEach((e, i) => {
    const what = `token ${i}`;
    assert.equal(typeof e.token, 'string', what);
    assertLogprob(e.logprob, what);
    assertBytes(e.bytes, what);
    assert.ok(Array.isArray(e.top_logprobs), `${what}: top_logprobs`);
    assert.equal(e.top_logprobs.length, 3, `${what}: top_logprobs length`);
    for (const t of e.top_logprobs) {
      assert.equal(typeof t.token, 'string', what);
      assertLogprob(t.logprob, what);
      assertBytes(t.bytes, what);
    }
    for (let k = 1; k < 3; ++k) {
      assert.ok(e.top_logprobs[k - 1].logprob >= e.top_logprobs[k].logprob, `${what}: top_logprobs not sorted by logprob desc`);
    }
    assert.equal(e.token, e.top_logprobs[0].token, `${what}: greedy token is not the most likely one`);
    assert.ok(Math.abs(e.logprob - e.top_logprobs[0].logprob) < 1e-4, `${what}: logprob ${e.logprob} vs top ${e.top_logprobs[0].logprob}`);
  });
});

test('08b chat without logprobs: choices[0].logprobs is null or absent', T, async () => {
  const r = await chat(c, userMessage(PROMPT), { temperature: 0, max_tokens: 4 });
  assert.ok(r.choices[0].logprobs == null, `logprobs ${JSON.stringify(r.choices[0].logprobs)}`);
});

test('08c chat top_logprobs > 20 is a 400', T, async () => {
  await expectApiError(chat(c, userMessage(PROMPT), { max_tokens: 4, logprobs: true, top_logprobs: 21 }), 400, {
    errorClass: OpenAI.BadRequestError,
  });
});

test('09b completions text_offset counts characters of text, not UTF-8 bytes', T, async () => {
  // The byte tokens of "é" pushed up and sampled (seeded): answers with multi-byte characters, where
  // bytes and characters differ.
  const tok = await http('POST', '/tokenize', { body: { content: 'é' } });
  assert.equal(tok.status, 200, tok.text);
  const logit_bias = Object.fromEntries(tok.json.tokens.map((id) => [id, 100]));
  const r = await c.completions.create({
    model: MODEL, prompt: 'hi', temperature: 1, seed: 3, n: 4, max_tokens: 12, logprobs: 1, logit_bias,
  });
  let multibyte = 0;
  for (const choice of r.choices) {
    const text = choice.text;
    const chars = [...text].length;  // code points, as Python indexes the string
    if (chars < Buffer.byteLength(text, 'utf8')) ++multibyte;
    const off = choice.logprobs.text_offset;
    assert.equal(off[0], 0);
    // The sampled token is always among top_logprobs (OpenAI: up to logprobs + 1 entries), also where
    // logit_bias made it one the raw logits do not rank first.
    choice.logprobs.tokens.forEach((t, i) => {
      const top = choice.logprobs.top_logprobs[i];
      assert.ok(t in top, `top_logprobs[${i}] lacks the sampled token ${JSON.stringify(t)}`);
      assert.ok(Object.keys(top).length <= 2, `top_logprobs[${i}] has more than logprobs + 1 entries`);
      assert.equal(top[t], choice.logprobs.token_logprobs[i]);
    });
    for (let i = 0; i < off.length; ++i) {
      assert.ok(off[i] <= chars, `text_offset[${i}] = ${off[i]} beyond the ${chars} characters of ${JSON.stringify(text)}`);
      if (i > 0) assert.ok(off[i] >= off[i - 1], 'text_offset not increasing');
    }
  }
  assert.ok(multibyte > 0, 'no answer with a multi-byte character: the test says nothing');
});

test('09 completions logprobs 2: tokens, token_logprobs, top_logprobs, text_offset per token', T, async () => {
  const prompt = 'The quick brown fox';
  const r = await c.completions.create({ model: MODEL, prompt, temperature: 0, max_tokens: 6, logprobs: 2 });
  const lp = r.choices[0].logprobs;
  assert.ok(lp, 'choices[0].logprobs missing');
  const n = r.usage.completion_tokens;
  for (const k of ['tokens', 'token_logprobs', 'top_logprobs', 'text_offset']) {
    assert.ok(Array.isArray(lp[k]), `logprobs.${k} is not an array`);
    assert.equal(lp[k].length, n, `logprobs.${k} length`);
  }
  for (let i = 0; i < n; ++i) {
    assert.equal(typeof lp.tokens[i], 'string', `tokens[${i}]`);
    assertLogprob(lp.token_logprobs[i], `token_logprobs[${i}]`);
    const top = lp.top_logprobs[i];
    assert.ok(top && typeof top === 'object' && !Array.isArray(top), `top_logprobs[${i}] is not an object`);
    const keys = Object.keys(top);
    assert.ok(keys.length >= 1 && keys.length <= 2, `top_logprobs[${i}] has ${keys.length} keys`);
    for (const k of keys) assertLogprob(top[k], `top_logprobs[${i}][${JSON.stringify(k)}]`);
    assert.ok(Number.isInteger(lp.text_offset[i]), `text_offset[${i}]`);
    if (i > 0) assert.ok(lp.text_offset[i] >= lp.text_offset[i - 1], 'text_offset not increasing');
  }
});
