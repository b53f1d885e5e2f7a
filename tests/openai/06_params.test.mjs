// Accepted and rejected request fields through the official openai SDK (spec point 12).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  MODEL,
  OpenAI,
  TEST_TIMEOUT_MS,
  assertErrorBody,
  assertUsage,
  chat,
  client,
  expectApiError,
  http,
  userMessage,
} from './lib.mjs';

const c = client();
const T = { timeout: TEST_TIMEOUT_MS };
const MSGS = userMessage('Repeat after me: la la la');

function assertWellFormedChat(r, maxTokens) {
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(typeof r.choices[0].message.content, 'string');
  assert.ok(['length', 'stop'].includes(r.choices[0].finish_reason));
  assertUsage(r.usage, maxTokens);
}

test('12a presence_penalty and frequency_penalty are accepted', T, async () => {
  const plain = await chat(c, MSGS, { temperature: 0, max_tokens: 24, frequency_penalty: 0 });
  assertWellFormedChat(plain, 24);
  const freq = await chat(c, MSGS, { temperature: 0, max_tokens: 24, frequency_penalty: 2.0 });
  assertWellFormedChat(freq, 24);
  const pres = await chat(c, MSGS, { temperature: 0, max_tokens: 24, presence_penalty: 1.5 });
  assertWellFormedChat(pres, 24);
  const cmpl = await c.completions.create({
    model: MODEL,
    prompt: 'la la la',
    temperature: 0,
    max_tokens: 8,
    presence_penalty: 0.5,
    frequency_penalty: 0.5,
  });
  assert.equal(typeof cmpl.choices[0].text, 'string');
});

test('12b logit_bias: +100 on a token makes it every token; a bias out of range is a 400 naming it', T, async () => {
  const id = 300;
  const forced = await c.completions.create({
    model: MODEL, prompt: 'Hi', max_tokens: 4, temperature: 0, logit_bias: { [id]: 100 }, logprobs: 1,
  });
  const tokens = forced.choices[0].logprobs.tokens;
  assert.equal(tokens.length, 4);
  assert.equal(new Set(tokens).size, 1, `tokens ${JSON.stringify(tokens)}`);
  const detok = await http('POST', '/detokenize', { body: { tokens: [id, id, id, id] } });
  assert.equal(detok.status, 200, detok.text);
  assert.equal(forced.choices[0].text, detok.json.content);
  await expectApiError(chat(c, MSGS, { max_tokens: 4, logit_bias: { 5: 101 } }), 400, {
    param: 'logit_bias',
    errorClass: OpenAI.BadRequestError,
  });
});

test("12c response_format json_schema: the content parses and has the schema's shape; an unsupported keyword is a 400 naming response_format", T, async () => {
  const schema = {
    type: 'object',
    properties: { color: { enum: ['red', 'green'] }, n: { enum: [1, 2, 3] } },
    required: ['color', 'n'],
  };
  const r = await chat(c, MSGS, {
    temperature: 1, seed: 11, max_tokens: 300,
    response_format: { type: 'json_schema', json_schema: { name: 'pick', schema, strict: true } },
  });
  assert.equal(r.choices[0].finish_reason, 'stop', JSON.stringify(r));
  const v = JSON.parse(r.choices[0].message.content);
  assert.ok(['red', 'green'].includes(v.color), r.choices[0].message.content);
  assert.ok([1, 2, 3].includes(v.n), r.choices[0].message.content);
  await expectApiError(chat(c, MSGS, {
    max_tokens: 4,
    response_format: { type: 'json_schema', json_schema: { name: 'p', schema: { type: 'string', pattern: '^a' } } },
  }), 400, { param: 'response_format' });
});

test("12d response_format text is accepted", T, async () => {
  const r = await chat(c, MSGS, { temperature: 0, max_tokens: 4, response_format: { type: 'text' } });
  assertWellFormedChat(r, 4);
});

test("12e tools reach the template; a forced tool_choice is a 400 naming it", T, async () => {
  const tools = [
    {
      type: 'function',
      function: {
        name: 'get_weather',
        description: 'Weather of a city',
        parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
      },
    },
  ];
  // The tiny model's ChatML template does not render tools: the request is served as without them.
  const r = await chat(c, MSGS, { max_tokens: 4, temperature: 0, tools });
  assertWellFormedChat(r, 4);
  await expectApiError(chat(c, MSGS, { max_tokens: 4, tools, tool_choice: 'required' }), 400, { param: 'tool_choice' });
});

test("12f best_of on completions is a 400 with param 'best_of'", T, async () => {
  await expectApiError(c.completions.create({ model: MODEL, prompt: 'Hi', max_tokens: 4, best_of: 3 }), 400, {
    param: 'best_of',
  });
});

test('12j min_p and repetition_penalty (vLLM extra body fields) change the answer as they should; out of range is a 400', T, async () => {
  // min_p 1 keeps only the most probable token: a seeded sampled answer is the greedy one.
  const greedy = await c.completions.create({ model: MODEL, prompt: 'la la la', temperature: 0, max_tokens: 16 });
  const minP = await c.completions.create({
    model: MODEL, prompt: 'la la la', temperature: 1.5, seed: 5, max_tokens: 16, min_p: 1,
  });
  assert.equal(minP.choices[0].text, greedy.choices[0].text);
  // A large repetition penalty: no greedy token repeats a prompt token or an earlier one (the plain
  // greedy answer to this prompt repeats). Tokens compared by their pieces (/tokenize with_pieces, the
  // completions logprobs' tokens), those of single bytes of a character left out.
  const tok = await http('POST', '/tokenize', { body: { content: 'la la la', with_pieces: true } });
  assert.equal(tok.status, 200, tok.text);
  const prompt = tok.json.tokens.map((t) => t.id);
  const pieces = (r) => r.choices[0].logprobs.tokens;
  const plain = await c.completions.create({ model: MODEL, prompt, temperature: 0, max_tokens: 64, logprobs: 0 });
  const penal = await c.completions.create({
    model: MODEL, prompt, temperature: 0, max_tokens: 64, logprobs: 0, repetition_penalty: 100,
  });
  assert.ok(new Set(pieces(plain)).size < pieces(plain).length, `plain greedy did not repeat: ${pieces(plain)}`);
  const seen = new Set(tok.json.tokens.map((t) => t.piece));
  for (const piece of pieces(penal)) {
    if (piece.includes('\uFFFD')) continue;  // a byte of a character: several ids show as U+FFFD
    assert.ok(!seen.has(piece), `${JSON.stringify(piece)} repeats under repetition_penalty 100: ${pieces(penal)}`);
    seen.add(piece);
  }
  await expectApiError(chat(c, MSGS, { max_tokens: 4, min_p: 1.5 }), 400, { param: 'min_p' });
  await expectApiError(chat(c, MSGS, { max_tokens: 4, repetition_penalty: 0 }), 400, { param: 'repetition_penalty' });
});

test('12k stop_token_ids end the answer without their text; min_tokens holds them back', T, async () => {
  const id = 300;  // +100 makes it every greedy token (12b)
  const base = { model: MODEL, prompt: 'Hi', max_tokens: 8, temperature: 0, logit_bias: { [id]: 100 } };
  const stopped = await c.completions.create({ ...base, stop_token_ids: [id] });
  assert.equal(stopped.choices[0].finish_reason, 'stop');
  assert.equal(stopped.choices[0].text, '');
  assert.equal(stopped.usage.completion_tokens, 1);
  // min_tokens 3: the first three tokens are the greedy ones without that token, then it stops the answer.
  const held = await c.completions.create({ ...base, stop_token_ids: [id], min_tokens: 3 });
  const banned = await c.completions.create({ ...base, max_tokens: 3, logit_bias: { [id]: -100 } });
  assert.equal(held.choices[0].finish_reason, 'stop');
  assert.equal(held.usage.completion_tokens, 4);
  assert.equal(held.choices[0].text, banned.choices[0].text);
  await expectApiError(c.completions.create({ ...base, min_tokens: 9 }), 400, { param: 'min_tokens' });
  await expectApiError(c.completions.create({ ...base, stop_token_ids: ['x'] }), 400, { param: 'stop_token_ids' });
});

test('12g max_tokens -1 is a 400', T, async () => {
  await expectApiError(chat(c, MSGS, { max_tokens: -1 }), 400, { errorClass: OpenAI.BadRequestError });
  await expectApiError(c.completions.create({ model: MODEL, prompt: 'Hi', max_tokens: -1 }), 400);
});

test('12h top_k -1 (an extra body field) is a 400', T, async () => {
  // The SDK serializes the body as given, so fields it does not know reach the server.
  await expectApiError(chat(c, MSGS, { max_tokens: 4, top_k: -1 }), 400);
});

test('12i every 4xx error body (400, 404; 401 in 08_auth) has error.message, type, param and code', T, async () => {
  const cases = [
    ['unknown role', 'POST', '/v1/chat/completions', { model: MODEL, messages: [{ role: 'wizard', content: 'x' }] }],
    ['logit_bias', 'POST', '/v1/chat/completions', { model: MODEL, messages: MSGS, logit_bias: { x: 10 } }],
    ['best_of', 'POST', '/v1/completions', { model: MODEL, prompt: 'Hi', best_of: 3 }],
    ['max_tokens -1', 'POST', '/v1/completions', { model: MODEL, prompt: 'Hi', max_tokens: -1 }],
    ['no messages', 'POST', '/v1/chat/completions', { model: MODEL }],
    ['bad JSON', 'POST', '/v1/completions', '{"prompt": '],
    ['unknown path', 'GET', '/v1/nothing-here', undefined],
  ];
  for (const [what, method, path, body] of cases) {
    const r = await http(method, path, { body });
    assert.ok(r.status >= 400 && r.status < 500, `${what}: HTTP ${r.status}`);
    assertErrorBody(r.json, what);
  }
});
