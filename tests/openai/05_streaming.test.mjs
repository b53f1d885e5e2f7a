// Streaming chat and completions through the official openai SDK (spec point 10).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { MODEL, TEST_TIMEOUT_MS, assertUsage, chat, client, userMessage } from './lib.mjs';

const c = client();
const T = { timeout: TEST_TIMEOUT_MS };
const PROMPT = 'Explain how rivers form';
const MAX_TOKENS = 10;

async function collect(stream) {
  const chunks = [];
  for await (const chunk of stream) chunks.push(chunk);
  return chunks;
}

function streamChat(extra = {}) {
  return c.chat.completions.create({
    model: MODEL,
    messages: userMessage(PROMPT),
    temperature: 0,
    max_tokens: MAX_TOKENS,
    stream: true,
    ...extra,
  });
}

const deltaText = (chunks) => chunks.map((ch) => ch.choices[0]?.delta?.content ?? '').join('');

test('10a streaming chat with include_usage: the last chunk has choices [] and usage', T, async () => {
  const chunks = await collect(await streamChat({ stream_options: { include_usage: true } }));
  assert.ok(chunks.length >= 2, `${chunks.length} chunks`);
  const last = chunks.at(-1);
  assert.deepEqual(last.choices, [], 'last chunk choices');
  assertUsage(last.usage, MAX_TOKENS);
  for (const ch of chunks.slice(0, -1)) {
    assert.equal(ch.object, 'chat.completion.chunk');
    assert.ok(ch.usage == null, `a chunk before the last has usage ${JSON.stringify(ch.usage)}`);
  }
  const finishes = chunks.flatMap((ch) => ch.choices.map((x) => x.finish_reason)).filter((f) => f != null);
  assert.equal(finishes.length, 1, `finish_reason in ${finishes.length} chunks`);
  assert.ok(['length', 'stop'].includes(finishes[0]));
  if (finishes[0] === 'length') assert.equal(last.usage.completion_tokens, MAX_TOKENS);
});

test('10b streaming chat: concatenated deltas equal the non-streaming content', T, async () => {
  const chunks = await collect(await streamChat({ stream_options: { include_usage: true } }));
  const whole = await chat(c, userMessage(PROMPT), { temperature: 0, max_tokens: MAX_TOKENS });
  assert.equal(deltaText(chunks), whole.choices[0].message.content);
  assert.equal(chunks.at(-1).usage.completion_tokens, whole.usage.completion_tokens);
});

test("10c streaming chat: the first chunk carries delta.role 'assistant'", T, async () => {
  const chunks = await collect(await streamChat());
  assert.equal(chunks[0].choices[0]?.delta?.role, 'assistant');
});

test('10d streaming chat without include_usage: no chunk has usage', T, async () => {
  const chunks = await collect(await streamChat());
  assert.ok(chunks.length >= 1);
  for (const ch of chunks) assert.ok(ch.usage == null, `chunk with usage ${JSON.stringify(ch.usage)}`);
  for (const ch of chunks) assert.ok(ch.choices.length >= 1, 'a chunk with no choice without include_usage');
});

test('10e streaming completions: concatenated text equals the non-streaming text', T, async () => {
  const body = { model: MODEL, prompt: 'Once upon a time', temperature: 0, max_tokens: MAX_TOKENS };
  const chunks = await collect(await c.completions.create({ ...body, stream: true }));
  const whole = await c.completions.create(body);
  const text = chunks.map((ch) => ch.choices[0]?.text ?? '').join('');
  assert.equal(text, whole.choices[0].text);
});
