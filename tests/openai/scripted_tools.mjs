// Tool calls, reasoning and the model's own chat template through the official openai SDK (issue 39),
// against the scripted model of tests/openai/make_scripted_model.py, whose greedy answer to any prompt is
//   <think>The user wants the weather in Paris.</think><tool_call>{"name": "get_weather", "arguments":
//   {"city": "Paris", "unit": "celsius"}}</tool_call>
// Run by tests/openai/run.sh ZIPMOE_BIN serve|up scripted (ctest openai_sdk_tools_serve / _up).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { MODEL, TEST_TIMEOUT_MS, WEATHER_ARGS as ARGS, WEATHER_REASONING as REASONING, WEATHER_TOOLS as TOOLS,
  assertTheWeatherCall as assertTheCall, client, expectApiError, http } from './lib.mjs';

const c = client();
const T = { timeout: TEST_TIMEOUT_MS };
const ASK = [{ role: 'user', content: 'What is the weather in Paris?' }];

test('10a a tool call, non-streaming: message.tool_calls, reasoning_content, finish_reason tool_calls', T, async () => {
  const r = await c.chat.completions.create({ model: MODEL, messages: ASK, tools: TOOLS, temperature: 0 });
  assert.equal(r.choices.length, 1);
  assertTheCall(r.choices[0].message);
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  assert.equal(r.usage.completion_tokens, 7); // six pieces and EOS
});

test('10b a tool call, streamed: the SDK assembles the same message from delta.tool_calls', T, async () => {
  const stream = c.chat.completions.stream({ model: MODEL, messages: ASK, tools: TOOLS, temperature: 0 });
  let reasoning = '';
  let sawToolDelta = false;
  for await (const chunk of stream) {
    const d = chunk.choices[0]?.delta ?? {};
    if (d.reasoning_content) reasoning += d.reasoning_content;
    if (d.tool_calls) {
      sawToolDelta = true;
      for (const tc of d.tool_calls) assert.equal(typeof tc.index, 'number');
    }
  }
  const final = await stream.finalChatCompletion();
  assert.ok(sawToolDelta);
  assert.equal(reasoning, REASONING);
  assert.equal(final.choices[0].finish_reason, 'tool_calls');
  const call = final.choices[0].message.tool_calls[0];
  assert.equal(call.function.name, 'get_weather');
  assert.deepEqual(JSON.parse(call.function.arguments), ARGS);
  assert.ok(!final.choices[0].message.content, `content ${JSON.stringify(final.choices[0].message.content)}`);
});

test('10c the tool result goes back through the template (assistant tool_calls + a tool message)', T, async () => {
  const first = await c.chat.completions.create({ model: MODEL, messages: ASK, tools: TOOLS, temperature: 0 });
  const call = first.choices[0].message.tool_calls[0];
  const history = [
    ...ASK,
    { role: 'assistant', content: null, tool_calls: [call] },
    { role: 'tool', tool_call_id: call.id, content: JSON.stringify({ temperature: 21, sky: 'clear' }) },
  ];
  const r = await c.chat.completions.create({ model: MODEL, messages: history, tools: TOOLS, temperature: 0 });
  assertTheCall(r.choices[0].message); // the script answers the same whatever the prompt
  // The rendered prompt holds the call and the result as the template writes them.
  const tok = await http('POST', '/v1/chat/completions', {
    body: { model: MODEL, messages: history, tools: TOOLS, temperature: 0, max_tokens: 1, logprobs: true },
  });
  assert.equal(tok.status, 200, tok.text);
  assert.ok(tok.json.usage.prompt_tokens > first.usage.prompt_tokens, 'the history did not grow the prompt');
});

test('10d chat_template_kwargs reach the template', T, async () => {
  const off = await http('POST', '/v1/chat/completions', {
    body: { model: MODEL, messages: ASK, temperature: 0, chat_template_kwargs: { enable_thinking: false } },
  });
  const on = await http('POST', '/v1/chat/completions', { body: { model: MODEL, messages: ASK, temperature: 0 } });
  assert.equal(off.status, 200, off.text);
  assert.equal(on.status, 200, on.text);
  // enable_thinking false closes an empty think block in the prompt: a longer prompt.
  assert.ok(off.json.usage.prompt_tokens > on.json.usage.prompt_tokens,
    `prompt tokens ${off.json.usage.prompt_tokens} vs ${on.json.usage.prompt_tokens}`);
});

test('10f tool_choice required / named: the answer is one call, constrained to the tool schema', T, async () => {
  for (const tool_choice of ['required', { type: 'function', function: { name: 'get_weather' } }]) {
    const r = await c.chat.completions.create({ model: MODEL, messages: ASK, tools: TOOLS, tool_choice, temperature: 0 });
    const m = r.choices[0].message;
    assert.equal(r.choices[0].finish_reason, 'tool_calls', JSON.stringify(r));
    assert.equal(m.tool_calls?.length, 1, JSON.stringify(m));
    assert.equal(m.tool_calls[0].function.name, 'get_weather');
    assert.deepEqual(JSON.parse(m.tool_calls[0].function.arguments), ARGS);
    assert.ok(!m.reasoning_content, 'a forced call starts at once (no thinking)');
  }
  await expectApiError(
    c.chat.completions.create({ model: MODEL, messages: ASK, tools: TOOLS, tool_choice: { type: 'function', function: { name: 'nope' } } }),
    400, { param: 'tool_choice' });
  await expectApiError(c.chat.completions.create({ model: MODEL, messages: ASK, tool_choice: 'required' }), 400,
    { param: 'tool_choice' });
});

test('10e without tools in the request a call-shaped answer stays content (as OpenAI, vLLM and llama.cpp)', T, async () => {
  for (const extra of [{}, { tools: [] }]) {
    const r = await c.chat.completions.create({ model: MODEL, messages: ASK, temperature: 0, ...extra });
    const m = r.choices[0].message;
    assert.ok(!m.tool_calls || m.tool_calls.length === 0, `tool_calls ${JSON.stringify(m.tool_calls)}`);
    assert.ok(m.content.includes('<tool_call>') && m.content.includes('get_weather'), `content ${JSON.stringify(m.content)}`);
    assert.equal(r.choices[0].finish_reason, 'stop');
  }
});
