// Models and /v1/chat/completions basics through the official openai SDK (spec points 1-4).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { MODEL, OpenAI, TEST_TIMEOUT_MS, assertUsage, chat, client, expectApiError, userMessage } from './lib.mjs';

const c = client();
const T = { timeout: TEST_TIMEOUT_MS };

test('01a models.list() contains the served model id', T, async () => {
  const ids = [];
  for await (const m of c.models.list()) ids.push(m.id);
  assert.ok(ids.includes(MODEL), `served id ${MODEL} not in ${JSON.stringify(ids)}`);
});

test('01b chat with another model id is accepted and the response echoes it', T, async () => {
  const r = await c.chat.completions.create({
    model: 'anything-else',
    messages: userMessage('Hello'),
    temperature: 0,
    max_tokens: 4,
  });
  assert.equal(r.model, 'anything-else');
  assert.equal(r.choices.length, 1);
});

test('02 chat non-streaming: one assistant choice, consistent usage, finish_reason', T, async () => {
  const r = await chat(c, userMessage('Tell me a story'), { temperature: 0, max_tokens: 8 });
  assert.equal(r.object, 'chat.completion');
  assert.equal(typeof r.id, 'string');
  // A random per-process part, then a counter: ids (and the tool-call ids made from them) do not repeat
  // after a restart, where a client's conversation may still hold the earlier ones.
  assert.match(r.id, /^chatcmpl-[0-9a-f]{16}[0-9]+$/);
  assert.ok(Number.isInteger(r.created), `created ${r.created}`);
  assert.equal(r.choices.length, 1);
  const ch = r.choices[0];
  assert.equal(ch.index, 0);
  assert.equal(ch.message.role, 'assistant');
  assert.equal(typeof ch.message.content, 'string');
  assert.ok(['length', 'stop'].includes(ch.finish_reason), `finish_reason ${ch.finish_reason}`);
  assertUsage(r.usage, 8);
  if (ch.finish_reason === 'length') assert.equal(r.usage.completion_tokens, 8);
});

test('03 chat without max_tokens defaults to the context left (> 16 tokens)', T, async () => {
  const stream = await c.chat.completions.create({
    model: MODEL,
    messages: userMessage('Write a very long essay about the sea'),
    temperature: 0,
    stream: true,
  });
  let contentChunks = 0;
  let finish = null;
  for await (const chunk of stream) {
    const ch = chunk.choices[0];
    if (ch?.delta?.content) ++contentChunks;
    if (ch?.finish_reason) finish = ch.finish_reason;
    if (contentChunks > 40) {
      stream.controller.abort();
      break;
    }
  }
  assert.ok(contentChunks > 16, `only ${contentChunks} content chunks before the stream ended (finish_reason ${finish})`);
});

test('04a content as an array of text parts equals the parts joined with "\\n" as a string (as vLLM)', T, async () => {
  const parts = await chat(
    c,
    [{ role: 'user', content: [{ type: 'text', text: 'Hello' }, { type: 'text', text: 'world' }] }],
    { temperature: 0, max_tokens: 8 },
  );
  const plain = await chat(c, userMessage('Hello\nworld'), { temperature: 0, max_tokens: 8 });
  assert.equal(parts.choices[0].message.content, plain.choices[0].message.content);
  assert.equal(parts.usage.prompt_tokens, plain.usage.prompt_tokens);
});

test('04b an assistant message with content null and tool_calls in the history is accepted', T, async () => {
  const r = await chat(
    c,
    [
      { role: 'user', content: 'What is the weather in Paris?' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
        ],
      },
      { role: 'user', content: 'Thanks' },
    ],
    { temperature: 0, max_tokens: 4 },
  );
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, 'assistant');
});

test('04c a message with an unknown role is a 400 BadRequestError', T, async () => {
  await expectApiError(chat(c, [{ role: 'wizard', content: 'abracadabra' }], { max_tokens: 4 }), 400, {
    errorClass: OpenAI.BadRequestError,
  });
});
