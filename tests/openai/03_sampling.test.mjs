// n and seed through the official openai SDK (spec points 6 and 7).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { MODEL, TEST_TIMEOUT_MS, byIndex, chat, client, userMessage } from './lib.mjs';

const c = client();
const T = { timeout: TEST_TIMEOUT_MS };
const PROMPT = 'Describe a mountain';

function indexes(r) {
  return byIndex(r.choices).map((ch) => ch.index);
}
const chatTexts = (r) => byIndex(r.choices).map((ch) => ch.message.content);
const completionTexts = (r) => byIndex(r.choices).map((ch) => ch.text);

test('06a chat n=2: two choices with indexes 0 and 1', T, async () => {
  const r = await chat(c, userMessage(PROMPT), { n: 2, max_tokens: 6 });
  assert.equal(r.choices.length, 2);
  assert.deepEqual(indexes(r), [0, 1]);
  for (const ch of r.choices) {
    assert.equal(ch.message.role, 'assistant');
    assert.equal(typeof ch.message.content, 'string');
  }
  assert.ok(r.usage.completion_tokens <= 12, `completion_tokens ${r.usage.completion_tokens} (2 choices x 6)`);
});

test('06b completions n=2: two choices with indexes 0 and 1', T, async () => {
  const r = await c.completions.create({ model: MODEL, prompt: PROMPT, n: 2, max_tokens: 6 });
  assert.equal(r.choices.length, 2);
  assert.deepEqual(indexes(r), [0, 1]);
  for (const ch of r.choices) assert.equal(typeof ch.text, 'string');
});

test('06c n=2 at temperature 1 with seed 7: the same request twice gives identical choices', T, async () => {
  const body = { n: 2, temperature: 1, seed: 7, max_tokens: 12 };
  const a = await chat(c, userMessage(PROMPT), body);
  const b = await chat(c, userMessage(PROMPT), body);
  assert.deepEqual(chatTexts(a), chatTexts(b));
  const ca = await c.completions.create({ model: MODEL, prompt: PROMPT, ...body });
  const cb = await c.completions.create({ model: MODEL, prompt: PROMPT, ...body });
  assert.deepEqual(completionTexts(ca), completionTexts(cb));
});

test('06d n=2 at temperature 0: both choices are equal', T, async () => {
  const r = await chat(c, userMessage(PROMPT), { n: 2, temperature: 0, max_tokens: 8 });
  const [x, y] = chatTexts(r);
  assert.equal(x, y);
  const rc = await c.completions.create({ model: MODEL, prompt: PROMPT, n: 2, temperature: 0, max_tokens: 8 });
  const [u, v] = completionTexts(rc);
  assert.equal(u, v);
});

test('07a temperature 1 with the same seed twice gives the same text', T, async () => {
  const body = { temperature: 1, seed: 1234, max_tokens: 12 };
  const a = await chat(c, userMessage(PROMPT), body);
  const b = await chat(c, userMessage(PROMPT), body);
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  const ca = await c.completions.create({ model: MODEL, prompt: PROMPT, ...body });
  const cb = await c.completions.create({ model: MODEL, prompt: PROMPT, ...body });
  assert.equal(ca.choices[0].text, cb.choices[0].text);
});

test('07b four unseeded requests at temperature 1 are not all equal', T, async () => {
  const texts = [];
  for (let i = 0; i < 4; ++i) {
    const r = await chat(c, userMessage(PROMPT), { temperature: 1, max_tokens: 12 });
    texts.push(r.choices[0].message.content);
  }
  assert.ok(new Set(texts).size > 1, `all four unseeded texts equal: ${JSON.stringify(texts[0])}`);
});
