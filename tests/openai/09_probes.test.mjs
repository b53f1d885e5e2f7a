// Hostile-client regressions with raw TCP sockets and fetch (spec point 17). Runs last: the
// abandoned requests may keep the server busy if it does not notice the client went away.
import assert from 'node:assert/strict';
import net from 'node:net';
import { test } from 'node:test';
import { API_KEY, BASE_URL, MODEL, OpenAI, TEST_TIMEOUT_MS, client, sleep, userMessage } from './lib.mjs';

const T = { timeout: TEST_TIMEOUT_MS };
const { hostname: HOST, port: PORT_TEXT } = new URL(BASE_URL);
const PORT = Number(PORT_TEXT);
// --max-batch of the server (run.sh): every batch slot gets an abandoned request.
const MAX_BATCH = Number(process.env.ZIPMOE_MAX_BATCH ?? 4);

// Writes `payload` on a fresh connection and collects what comes back until the server closes
// the connection, `done(text)` holds, or `timeoutMs` passes. Never rejects on a reset.
function exchange(payload, { timeoutMs = 10_000, done = () => false } = {}) {
  return new Promise((resolve) => {
    const chunks = [];
    let settled = false;
    const sock = net.connect({ host: HOST, port: PORT });
    const finish = (why) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      sock.destroy();
      resolve({ text: Buffer.concat(chunks).toString('latin1'), why });
    };
    const timer = setTimeout(() => finish('timeout'), timeoutMs);
    sock.on('connect', () => sock.write(payload));
    sock.on('data', (d) => {
      chunks.push(d);
      if (done(Buffer.concat(chunks).toString('latin1'))) finish('done');
    });
    sock.on('end', () => finish('end'));
    sock.on('close', () => finish('close'));
    sock.on('error', (e) => finish(`error ${e.code}`));
  });
}

// Status lines anywhere: a response body (e.g. {"status":"ok"}) ends without a newline, so the
// next response's status line does not start a line.
const statusLines = (text) => [...text.matchAll(/HTTP\/1\.[01] (\d{3}) /g)].map((m) => Number(m[1]));

test('17a 201 pipelined GET /health on one connection get 201 responses', T, async () => {
  const N = 201;
  const one = `GET /health HTTP/1.1\r\nHost: ${HOST}:${PORT}\r\n\r\n`;
  const last = `GET /health HTTP/1.1\r\nHost: ${HOST}:${PORT}\r\nConnection: close\r\n\r\n`;
  const r = await exchange(one.repeat(N - 1) + last, {
    timeoutMs: 20_000,
    done: (text) => statusLines(text).length >= N,
  });
  const codes = statusLines(r.text);
  assert.equal(codes.length, N, `${codes.length} responses (connection: ${r.why})`);
  assert.ok(
    codes.every((s) => s === 200),
    `statuses ${[...new Set(codes)]}`,
  );
});

test('17b POST /v1/completions with Content-Length: -5 is a 400', T, async () => {
  const req =
    `POST /v1/completions HTTP/1.1\r\nHost: ${HOST}:${PORT}\r\nAuthorization: Bearer ${API_KEY}\r\n` +
    `Content-Type: application/json\r\nContent-Length: -5\r\nConnection: close\r\n\r\n{"prompt":"Hi"}`;
  const r = await exchange(req, { timeoutMs: 10_000, done: (text) => /\r\n\r\n/.test(text) });
  const codes = statusLines(r.text);
  assert.ok(codes.length >= 1, `no HTTP response (connection: ${r.why}): ${JSON.stringify(r.text.slice(0, 200))}`);
  assert.equal(codes[0], 400, r.text.split('\r\n')[0]);
});

test('17c with 32 idle TCP connections open, GET /health answers within 2 s', T, async () => {
  const idle = [];
  try {
    await Promise.all(
      Array.from(
        { length: 32 },
        () =>
          new Promise((resolve, reject) => {
            const s = net.connect({ host: HOST, port: PORT }, () => resolve());
            s.on('error', reject);
            idle.push(s);
          }),
      ),
    );
    await sleep(300); // the server has accepted them by now
    const t0 = performance.now();
    const res = await fetch(`${BASE_URL}/health`, { signal: AbortSignal.timeout(2_000) }).catch((e) => e);
    const ms = performance.now() - t0;
    assert.ok(!(res instanceof Error), `GET /health failed after ${ms.toFixed(0)} ms: ${res}`);
    assert.equal(res.status, 200);
    await res.arrayBuffer();
    assert.ok(ms < 2_000, `GET /health took ${ms.toFixed(0)} ms`);
  } finally {
    for (const s of idle) s.destroy();
  }
});

test(`17d after ${MAX_BATCH} abandoned non-streaming requests, a new request completes within 15 s`, T, async () => {
  const c = client();
  const abandoned = [];
  for (let i = 0; i < MAX_BATCH; ++i) {
    const ctl = new AbortController();
    // No max_tokens: the default is the whole context left, thousands of tokens; ignore_eos (vLLM's
    // extension, passed through by the SDK) so that an early EOS cannot end them.
    const body = { model: MODEL, temperature: 1, ignore_eos: true };
    const p =
      i % 2 === 0
        ? c.completions.create({ ...body, prompt: `Tell me everything, part ${i}` }, { signal: ctl.signal })
        : c.chat.completions.create({ ...body, messages: userMessage(`Tell me everything, part ${i}`) }, { signal: ctl.signal });
    abandoned.push(p.then(() => 'completed', (e) => e));
    setTimeout(() => ctl.abort(), 500);
  }
  const outcomes = await Promise.all(abandoned);
  for (const o of outcomes) {
    // A request that finished within 0.5 s is fine too (then nothing was abandoned).
    assert.ok(o === 'completed' || o instanceof OpenAI.APIUserAbortError, `abandoned request: ${o}`);
  }
  const t0 = performance.now();
  const r = await client({ timeout: 15_000 }).completions.create({ model: MODEL, prompt: 'Hi', max_tokens: 4 });
  const s = (performance.now() - t0) / 1000;
  assert.equal(r.choices.length, 1);
  assert.ok(s < 15, `took ${s.toFixed(1)} s`);
});
