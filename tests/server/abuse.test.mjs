// rowlm serve against hostile or careless clients, on the bundled model:
// chunked bodies past --max-body, a client that hangs up during a whole
// (non-streamed) reply, and 1,000 connections that trickle their headers.
// Each must leave the server serving; each failed before the front door
// (src/server/front_door.h) replaced cpp-httplib's connection threads.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { startRowlm, postJson, metrics, metric, eventually, NAME } from './harness.mjs';

let server, port;
before(async () => {
  server = await startRowlm(['--max-body', '64K', '--header-timeout', '2', '--max-connections-per-client', '300']);
  port = Number(new URL(server.url).port);
});
after(async () => {
  assert.deepEqual(await server.stop(), { code: 0, signal: null });
});

const chat = (extra = {}) => ({
  model: NAME, temperature: 0, max_tokens: 4, messages: [{ role: 'user', content: 'What does river mean?' }], ...extra,
});

// A raw connection from `localAddress` (any of 127.0.0.0/8 is loopback).
function connect(localAddress = '127.0.0.1') {
  return new Promise((resolve, reject) => {
    const s = net.connect({ host: '127.0.0.1', port, localAddress }, () => resolve(s));
    s.on('error', reject);
  });
}

// What the server sends until it closes the connection (or `ms` pass).
function readUntilClosed(s, ms = 10000) {
  return new Promise((resolve) => {
    let got = '';
    const timer = setTimeout(() => resolve({ got, closed: false }), ms);
    s.on('data', (d) => { got += d.toString('latin1'); });
    s.on('error', () => {});
    s.on('close', () => { clearTimeout(timer); resolve({ got, closed: true }); });
  });
}

test('a chunked body past --max-body gets 413 as it arrives, and the connection closes', async () => {
  const s = await connect();
  const reply = readUntilClosed(s);
  s.write('POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n' +
          'Transfer-Encoding: chunked\r\n\r\n');
  const chunk = `4000\r\n${' '.repeat(0x4000)}\r\n`;
  for (let i = 0; i < 64 && !s.destroyed; ++i) s.write(chunk);  // 1 MiB, 16 times the limit
  const { got, closed } = await reply;
  assert.match(got, /^HTTP\/1\.1 413 /);
  assert.match(got, /larger than the limit of 65536 bytes/);
  assert.ok(closed);
  const r = await postJson(`${server.url}/v1/chat/completions`, chat());
  assert.equal(r.status, 200, r.text);
});

test('a client that hangs up during a whole reply cancels every choice at once', async () => {
  const cancelled = async () => metric(await metrics(server.url), 'rowlm_engine_requests_total{outcome="cancelled"}') ?? 0;
  const before = await cancelled();
  const s = await connect();
  s.on('error', () => {});
  const body = JSON.stringify(chat({ n: 8, max_tokens: 3000, ignore_eos: true, temperature: 0.8, seed: 1 }));
  s.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
          `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
  assert.ok(await eventually(async () => metric(await metrics(server.url), 'rowlm_engine_requests_running') === 8));
  s.destroy();
  const hungUp = Date.now();
  // 8 x 3000 tokens would take the tiny model tens of seconds on 2 cores.
  assert.ok(await eventually(async () => (await cancelled()) === before + 8, 5000), 'the 8 choices were not cancelled');
  console.log(`8 choices cancelled within ${Date.now() - hungUp} ms of the hang-up (metrics polled every 50 ms)`);
  assert.equal(metric(await metrics(server.url), 'rowlm_engine_requests_running'), 0);
});

test('1,000 connections trickling their headers leave /health and generation answering, then get 408', async () => {
  const slow = [];
  for (let i = 0; i < 1000; ++i) {
    const s = await connect(`127.0.0.${2 + (i % 4)}`);
    s.write('POST /v1/chat/completions HTTP/1.1\r\n');
    slow.push({ s, result: readUntilClosed(s, 15000) });
  }
  const trickle = setInterval(() => { for (const { s } of slow) if (!s.destroyed) s.write('X-Slow: 1\r\n'); }, 200);
  try {
    let t0 = Date.now();
    const h = await fetch(`${server.url}/health`, { signal: AbortSignal.timeout(5000) });
    const healthMs = Date.now() - t0;
    assert.equal(h.status, 200);
    t0 = Date.now();
    const r = await fetch(`${server.url}/v1/chat/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(chat()),
      signal: AbortSignal.timeout(5000),
    });
    const chatMs = Date.now() - t0;
    assert.equal(r.status, 200, await r.text());
    console.log(`with 1,000 slow connections open: /health in ${healthMs} ms, a chat completion in ${chatMs} ms`);
    const results = await Promise.all(slow.map((x) => x.result));
    const refused = results.filter(({ got, closed }) => closed && got.startsWith('HTTP/1.1 408 ')).length;
    assert.equal(refused, 1000);
  } finally {
    clearInterval(trickle);
    for (const { s } of slow) s.destroy();
  }
});
