// Endpoints outside the SDK, with plain fetch: llama.cpp's /tokenize and /detokenize, CORS, and
// /metrics on the API port checked by promtool (spec points 13-15).
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { test } from 'node:test';
import { MODEL, TEST_TIMEOUT_MS, client, http, preflight, userMessage } from './lib.mjs';

const T = { timeout: TEST_TIMEOUT_MS };

// Metric families /metrics must expose; the names are easy to align here. Each entry: what it
// measures, and a regex over the exposition text.
const family = (name) => new RegExp(`^${name}(_bucket|_sum|_count|_created)?(\\{| )`, 'm');
const METRICS = [
  ['prompt tokens', family('zipmoe_prompt_tokens_total')],
  ['generation tokens', family('zipmoe_generation_tokens_total')],
  ['requests running', family('zipmoe_requests_running')],
  ['requests waiting', family('zipmoe_requests_waiting')],
  ['time to first token', family('zipmoe_time_to_first_token_seconds')],
  ['end-to-end latency', family('zipmoe_e2e_request_latency_seconds')],
  ['inter-token latency', family('zipmoe_inter_token_latency_seconds')],
  ['finished requests by finish reason', /^zipmoe_request_success_total\{[^}]*="length"/m],
  ['build info', /^zipmoe_build_info\{/m],
];
const PROMTOOL = process.env.PROMTOOL ?? 'promtool';

test('13a POST /tokenize and /detokenize round-trip (llama.cpp server format)', T, async () => {
  const tok = await http('POST', '/tokenize', { body: { content: 'hello world' } });
  assert.equal(tok.status, 200, tok.text);
  const tokens = tok.json?.tokens;
  assert.ok(Array.isArray(tokens) && tokens.length > 0, `tokens ${JSON.stringify(tokens)}`);
  for (const t of tokens) assert.ok(Number.isInteger(t) && t >= 0, `token ${t}`);
  const detok = await http('POST', '/detokenize', { body: { tokens } });
  assert.equal(detok.status, 200, detok.text);
  assert.equal(detok.json?.content, 'hello world');
});

test('13b POST /tokenize with_pieces: tokens as [{id, piece}]', T, async () => {
  const plain = await http('POST', '/tokenize', { body: { content: 'hello world' } });
  const r = await http('POST', '/tokenize', { body: { content: 'hello world', with_pieces: true } });
  assert.equal(r.status, 200, r.text);
  const tokens = r.json?.tokens;
  assert.ok(Array.isArray(tokens) && tokens.length > 0, `tokens ${JSON.stringify(tokens)}`);
  for (const t of tokens) {
    assert.ok(t && typeof t === 'object', `token ${JSON.stringify(t)}`);
    assert.ok(Number.isInteger(t.id), `id in ${JSON.stringify(t)}`);
    // llama.cpp: the piece as a string, or its bytes when they are not valid UTF-8.
    assert.ok(typeof t.piece === 'string' || Array.isArray(t.piece), `piece in ${JSON.stringify(t)}`);
  }
  assert.deepEqual(
    tokens.map((t) => t.id),
    plain.json?.tokens,
  );
});

test('13c POST /tokenize with_pieces: a character split over byte tokens comes back as its bytes', T, async () => {
  const content = 'héllo 👋 世界';
  const r = await http('POST', '/tokenize', { body: { content, with_pieces: true } });
  assert.equal(r.status, 200, r.text);
  const bytes = [];
  for (const t of r.json.tokens) {
    if (typeof t.piece === 'string') {
      assert.ok(!t.piece.includes('\uFFFD'), `U+FFFD in ${JSON.stringify(t)}`);
      bytes.push(...Buffer.from(t.piece, 'utf8'));
    } else {
      for (const b of t.piece) assert.ok(Number.isInteger(b) && b >= 0 && b < 256, `byte in ${JSON.stringify(t)}`);
      bytes.push(...t.piece);
    }
  }
  // The pieces, as bytes, are the content's UTF-8 bytes (no replacement characters anywhere).
  assert.deepEqual(Buffer.from(bytes), Buffer.from(content, 'utf8'));
  assert.ok(r.json.tokens.some((t) => Array.isArray(t.piece)), 'some piece is part of a character here');
});

test('14a CORS preflight: OPTIONS answers 2xx with Allow-Origin and Allow-Headers incl. authorization', T, async () => {
  const res = await preflight('/v1/chat/completions');
  assert.ok(res.status === 200 || res.status === 204, `HTTP ${res.status}`);
  assert.ok(res.headers.get('access-control-allow-origin'), 'no Access-Control-Allow-Origin');
  const allowHeaders = res.headers.get('access-control-allow-headers') ?? '';
  assert.match(allowHeaders, /authorization/i, `Access-Control-Allow-Headers: ${allowHeaders}`);
});

test('14b CORS: a normal response carries Access-Control-Allow-Origin', T, async () => {
  const r = await http('GET', '/v1/models', { headers: { Origin: 'http://example.com' } });
  assert.equal(r.status, 200);
  assert.ok(r.headers.get('access-control-allow-origin'), 'no Access-Control-Allow-Origin');
  const p = await http('POST', '/v1/completions', {
    body: { model: MODEL, prompt: 'Hi', max_tokens: 2 },
    headers: { Origin: 'http://example.com' },
  });
  assert.equal(p.status, 200, p.text);
  assert.ok(p.headers.get('access-control-allow-origin'), 'no Access-Control-Allow-Origin on POST');
});

async function scrape() {
  // A finished request first, so the counters by finish reason have a "length" sample.
  await client().chat.completions.create({ model: MODEL, messages: userMessage('Hi'), temperature: 0, max_tokens: 3 });
  const r = await http('GET', '/metrics');
  assert.equal(r.status, 200, r.text.slice(0, 300));
  return r;
}

test('15a GET /metrics on the API port: text/plain with the zipmoe_ families', T, async () => {
  const r = await scrape();
  assert.match(r.headers.get('content-type') ?? '', /^text\/plain/);
  const missing = METRICS.filter(([, re]) => !re.test(r.text)).map(([what, re]) => `${what} (${re})`);
  assert.deepEqual(missing, [], `missing metric families:\n${missing.join('\n')}`);
});

test('15b GET /metrics passes promtool check metrics', T, async (t) => {
  const probe = spawnSync(PROMTOOL, ['--version'], { encoding: 'utf8' });
  if (probe.error) {
    t.skip(`promtool not found (${probe.error.code}): install the 'prometheus' package (scripts/install_deps.sh)`);
    return;
  }
  const r = await scrape();
  const check = spawnSync(PROMTOOL, ['check', 'metrics'], { input: r.text, encoding: 'utf8' });
  assert.equal(check.status, 0, `promtool check metrics exited ${check.status}:\n${check.stdout}${check.stderr}`);
});

test('16 a wrong method is a 405 whose Allow header names the methods the path takes (RFC 9110 §15.5.6)', T, async () => {
  for (const [method, path, allow] of [['POST', '/health', 'GET, HEAD'], ['DELETE', '/v1/models', 'GET, HEAD'],
                                       ['GET', '/v1/chat/completions', 'POST'], ['PUT', '/tokenize', 'POST']]) {
    const r = await http(method, path);
    assert.equal(r.status, 405, `${method} ${path}: ${r.text}`);
    assert.equal(r.headers.get('allow'), allow, `${method} ${path}`);
    assert.equal(r.json?.error?.type, 'invalid_request_error');
  }
});
