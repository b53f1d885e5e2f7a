// /v1/completions prompt forms and echo through the official openai SDK (spec points 5 and 11).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { MODEL, TEST_TIMEOUT_MS, assertUsage, byIndex, client } from './lib.mjs';

const c = client();
const T = { timeout: TEST_TIMEOUT_MS };
const GREEDY = { temperature: 0, max_tokens: 6 };

function complete(prompt, extra = {}) {
  return c.completions.create({ model: MODEL, prompt, ...GREEDY, ...extra });
}

function assertIndexes(r, n) {
  assert.equal(r.choices.length, n, `${r.choices.length} choices`);
  assert.deepEqual(
    byIndex(r.choices).map((ch) => ch.index),
    [...Array(n).keys()],
  );
  for (const ch of r.choices) assert.equal(typeof ch.text, 'string');
}

test('05a prompt as a string', T, async () => {
  const r = await complete('The quick brown fox');
  assert.equal(r.object, 'text_completion');
  assertIndexes(r, 1);
  assert.ok(['length', 'stop'].includes(r.choices[0].finish_reason));
  assertUsage(r.usage, 6);
});

test('05b prompt as [string, string]: one choice per prompt, each equal to that prompt alone', T, async () => {
  const prompts = ['The quick brown fox', 'Once upon a time'];
  const both = await complete(prompts);
  assertIndexes(both, 2);
  const alone = [];
  for (const p of prompts) alone.push(await complete(p)); // one at a time: each alone in its batch
  const got = byIndex(both.choices);
  for (let i = 0; i < 2; ++i) assert.equal(got[i].text, alone[i].choices[0].text, `choice ${i}`);
  assertUsage(both.usage, 12);
  assert.equal(both.usage.prompt_tokens, alone[0].usage.prompt_tokens + alone[1].usage.prompt_tokens);
});

test('05c prompt as token ids', T, async () => {
  const r = await complete([5, 17, 300, 42]);
  assertIndexes(r, 1);
  assert.equal(r.usage.prompt_tokens, 4);
});

test('05d prompt as [[ids], [ids]]: two choices', T, async () => {
  const r = await complete([
    [5, 17, 300, 42],
    [7, 8, 9],
  ]);
  assertIndexes(r, 2);
  assert.equal(r.usage.prompt_tokens, 7);
});

test('11 echo: the text starts with the prompt', T, async () => {
  const prompt = 'Hello world, this is';
  const r = await complete(prompt, { echo: true });
  const text = r.choices[0].text;
  assert.ok(text.startsWith(prompt), `text ${JSON.stringify(text)} does not start with the prompt`);
  assert.ok(text.length > prompt.length || r.usage.completion_tokens === 0, 'nothing generated after the echo');
});
