// gpt-oss's Harmony format end to end through the official openai SDK (issue 41): a tiny gpt_oss
// (tests/openai/make_scripted_model.py --harmony) under gpt-oss's published chat template
// (openai-gpt-oss-120b.jinja, ZIPMOE_HARMONY_TEMPLATE), whose greedy answer to any prompt is
//   <|channel|>analysis<|message|>The user wants the weather in Paris.<|end|><|start|>assistant
//   to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris", "unit": "celsius"}<|call|>
// The analysis channel must come back as reasoning_content, the commentary message to functions.NAME as a
// tool call; the server's rendering of the published template must be jinja2's (tests/openai/render_chat.py).
// Run by tests/openai/run.sh ZIPMOE_BIN serve scripted-harmony (ctest openai_sdk_harmony_serve).
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { MODEL, TEST_TIMEOUT_MS, WEATHER_ARGS as ARGS, WEATHER_REASONING as REASONING, WEATHER_TOOLS as TOOLS,
  assertTheWeatherCall as assertTheCall, client, http } from './lib.mjs';

const c = client();
const T = { timeout: TEST_TIMEOUT_MS };
const TEMPLATE = process.env.ZIPMOE_HARMONY_TEMPLATE;
const ASK = [
  { role: 'system', content: 'You answer weather questions.' },
  { role: 'user', content: 'What is the weather in Paris?' },
];

// jinja2's rendering of the published template (transformers' environment) for `context`.
function jinja2Render(context) {
  const script = join(dirname(fileURLToPath(import.meta.url)), 'render_chat.py');
  return execFileSync('/usr/bin/python3', [script, TEMPLATE], { input: JSON.stringify(context), encoding: 'utf8' });
}

test('11a Harmony, non-streaming: analysis -> reasoning_content, commentary to=functions.NAME -> tool_calls', T, async () => {
  const r = await c.chat.completions.create({ model: MODEL, messages: ASK, tools: TOOLS, temperature: 0 });
  assert.equal(r.choices.length, 1);
  assertTheCall(r.choices[0].message);
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  assert.equal(r.usage.completion_tokens, 5); // four pieces and <|call|>
});

test('11b Harmony, streamed: the SDK assembles the same message from the deltas', T, async () => {
  const stream = c.chat.completions.stream({ model: MODEL, messages: ASK, tools: TOOLS, temperature: 0 });
  let reasoning = '';
  let content = '';
  let sawToolDelta = false;
  for await (const chunk of stream) {
    const d = chunk.choices[0]?.delta ?? {};
    if (d.reasoning_content) reasoning += d.reasoning_content;
    if (d.content) content += d.content;
    if (d.tool_calls) sawToolDelta = true;
  }
  const final = await stream.finalChatCompletion();
  assert.ok(sawToolDelta);
  assert.equal(reasoning, REASONING);
  assert.equal(content, '', 'no Harmony marker leaks into content');
  assert.equal(final.choices[0].finish_reason, 'tool_calls');
  const call = final.choices[0].message.tool_calls[0];
  assert.equal(call.function.name, 'get_weather');
  assert.deepEqual(JSON.parse(call.function.arguments), ARGS);
});

test('11c the prompt is the published template as jinja2 renders it (tools, system message, reasoning_effort)', T, async () => {
  assert.ok(TEMPLATE, 'ZIPMOE_HARMONY_TEMPLATE is not set: run through tests/openai/run.sh ... scripted-harmony');
  for (const effort of ['low', 'high']) {
    const r = await http('POST', '/v1/chat/completions', {
      body: { model: MODEL, messages: ASK, tools: TOOLS, temperature: 0, max_tokens: 1, reasoning_effort: effort },
    });
    assert.equal(r.status, 200, r.text);
    const rendered = jinja2Render({ messages: ASK, tools: TOOLS, add_generation_prompt: true, reasoning_effort: effort });
    assert.ok(rendered.includes(`Reasoning: ${effort}`), rendered.slice(0, 400));
    assert.ok(rendered.includes('namespace functions'), 'the tools are rendered');
    const tok = await http('POST', '/tokenize', { body: { content: rendered, add_special: false } });
    assert.equal(tok.status, 200, tok.text);
    assert.equal(r.json.usage.prompt_tokens, tok.json.tokens.length,
      `reasoning_effort ${effort}: the server's prompt is not jinja2's rendering`);
  }
});

test('11d the call and its result go back through the published template', T, async () => {
  const first = await c.chat.completions.create({ model: MODEL, messages: ASK, tools: TOOLS, temperature: 0 });
  // The SDK's own message as the assistant turn (content null beside the call): the published template
  // tests `"..." in message.content`, which jinja2 cannot evaluate on null, so the server renders the
  // empty string there (docs/api.md), which is what jinja2 renders for a turn without a content key.
  const result = { role: 'tool', tool_call_id: first.choices[0].message.tool_calls[0].id,
                   content: JSON.stringify({ temperature: 21, sky: 'clear' }) };
  const history = [...ASK, first.choices[0].message, result];
  assert.equal(first.choices[0].message.content, null);
  const r = await c.chat.completions.create({ model: MODEL, messages: history, tools: TOOLS, temperature: 0 });
  assertTheCall(r.choices[0].message); // the script answers the same whatever the prompt
  assert.ok(r.usage.prompt_tokens > first.usage.prompt_tokens, 'the history did not grow the prompt');
  // As jinja2 renders it: the call as `<|start|>assistant to=functions.get_weather<|channel|>commentary json
  // <|message|>...<|call|>` and the result as `<|start|>functions.get_weather to=assistant...`.
  // jinja2's context as the server builds it (docs/api.md `messages`): the arguments parsed into an object
  // (vLLM's and transformers' convention), the content key left out (see above).
  const { content, tool_calls: calls, ...rest } = first.choices[0].message;
  const parsed = calls.map((x) => ({ ...x, function: { ...x.function, arguments: JSON.parse(x.function.arguments) } }));
  const rendered = jinja2Render({ messages: [...ASK, { ...rest, tool_calls: parsed }, result], tools: TOOLS,
                                  add_generation_prompt: true });
  assert.ok(rendered.includes('<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>'), rendered);
  assert.ok(rendered.includes('<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>'), rendered);
  const tok = await http('POST', '/tokenize', { body: { content: rendered, add_special: false } });
  assert.equal(tok.status, 200, tok.text);
  assert.equal(r.usage.prompt_tokens, tok.json.tokens.length, "the server's prompt is not jinja2's rendering");
  // A tool message without a call before it is the template's own error (raise_exception): a 400.
  const bad = await http('POST', '/v1/chat/completions', {
    body: { model: MODEL, messages: [ASK[1], { role: 'tool', tool_call_id: 'x', content: '{}' }], temperature: 0 },
  });
  assert.equal(bad.status, 400, bad.text);
  assert.match(bad.text, /tool role/);
});
