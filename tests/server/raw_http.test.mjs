// rowlm serve over raw HTTP: SSE framing as curl sees it, the malformed-input
// suite, mid-stream disconnects, concurrent streams, the bounded queue, the
// API key and graceful shutdown. After each abuse the server still serves.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import net from 'node:net';
import { promisify } from 'node:util';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startRowlm, postJson, metrics, metric, eventually, parseSse, NAME } from './harness.mjs';

const run = promisify(execFile);
let server;
before(async () => {
  server = await startRowlm(['--max-body', '64K']);
});
after(async () => {
  assert.deepEqual(await server.stop(), { code: 0, signal: null });
});

const chat = (extra = {}) => ({
  model: NAME, temperature: 0, max_tokens: 16, messages: [{ role: 'user', content: 'What does river mean?' }], ...extra,
});

async function healthy() {
  const h = await fetch(`${server.url}/health`);
  assert.equal(h.status, 200);
  const r = await postJson(`${server.url}/v1/chat/completions`, chat({ max_tokens: 4 }));
  assert.equal(r.status, 200, r.text);
}

// curl -N prints the body as it arrives; the framing must be exactly SSE.
async function curlStream(path, body) {
  const { stdout } = await run('curl', ['-sS', '-N', '-D', '-', '-H', 'content-type: application/json',
    '--data-binary', JSON.stringify(body), `${server.url}${path}`], { maxBuffer: 1 << 24 });
  const split = stdout.indexOf('\r\n\r\n');
  return { head: stdout.slice(0, split), body: stdout.slice(split + 4) };
}

test('OpenAI streams are data-only SSE events ending in [DONE]', async () => {
  for (const [path, body] of [['/v1/chat/completions', chat({ stream: true })],
    ['/v1/completions', { model: NAME, prompt: 'In the beginning', max_tokens: 12, temperature: 0, stream: true }]]) {
    const { head, body: raw } = await curlStream(path, body);
    assert.match(head, /^HTTP\/1\.1 200/);
    assert.match(head, /\r\ncontent-type: text\/event-stream/i);
    assert.match(head, /\r\ntransfer-encoding: chunked/i);
    assert.ok(raw.endsWith('data: [DONE]\n\n'), JSON.stringify(raw.slice(-60)));
    const events = parseSse(raw);
    assert.ok(events.length > 3);
    for (const e of events.slice(0, -1)) {
      assert.equal(e.event, '');
      assert.ok(!e.data.includes('\n'));
      const j = JSON.parse(e.data);
      assert.equal(j.object, path.includes('chat') ? 'chat.completion.chunk' : 'text_completion');
    }
    assert.equal(events.at(-1).data, '[DONE]');
  }
});

test('Anthropic streams name every event and follow its sequence', async () => {
  const { head, body } = await curlStream('/v1/messages', {
    model: NAME, max_tokens: 12, temperature: 0, stream: true, messages: [{ role: 'user', content: 'Hi' }],
  });
  assert.match(head, /^HTTP\/1\.1 200/);
  const events = parseSse(body);
  const names = events.map((e) => e.event);
  for (const e of events) assert.equal(JSON.parse(e.data).type, e.event);
  assert.deepEqual(names.slice(0, 3), ['message_start', 'ping', 'content_block_start']);
  assert.deepEqual(names.slice(-3), ['content_block_stop', 'message_delta', 'message_stop']);
  assert.ok(names.slice(3, -3).every((n) => n === 'content_block_delta'));
});

// Each bad request: its status, and the field its error names.
const malformed = [
  ['/v1/chat/completions', '{"model": "rowlm-tiny", "messages": [', 400, 'body'],
  ['/v1/chat/completions', '[]', 400, 'body'],
  ['/v1/chat/completions', '{"model":"rowlm-tiny","messages":"hi"}', 400, 'messages'],
  ['/v1/chat/completions', '{"model":"rowlm-tiny","messages":[{"role":"user"}]}', 400, 'messages[0].content'],
  ['/v1/chat/completions', '{"model":"rowlm-tiny","messages":[{"role":"wizard","content":"x"}]}', 400, 'messages[0].role'],
  ['/v1/chat/completions', '{"model":"rowlm-tiny","messages":[{"role":"user","content":"x"}],"max_tokens":"9"}', 400, 'max_tokens'],
  ['/v1/chat/completions', '{"model":"rowlm-tiny","messages":[{"role":"user","content":"x"}],"max_tokens":100000}', 400, 'max_tokens'],
  ['/v1/chat/completions', '{"model":"rowlm-tiny","messages":[{"role":"user","content":"x"}],"top_p":0}', 400, 'top_p'],
  ['/v1/chat/completions', '{"model":"rowlm-tiny","messages":[{"role":"user","content":"x"}],"n":1000}', 400, 'n'],
  ['/v1/chat/completions', '{"model":"rowlm-tiny","messages":[{"role":"user","content":"x"}],"logit_bias":{"999999":5}}', 400, 'logit_bias.999999'],
  ['/v1/chat/completions', '{"model":"rowlm-tiny","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema"}}', 400, 'response_format.json_schema'],
  ['/v1/chat/completions', '{"model":"rowlm-tiny","messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"string","pattern":"a+"}}}}', 400, 'response_format.json_schema.schema.pattern'],
  ['/v1/chat/completions', '{"model":"rowlm-tiny","messages":[{"role":"user","content":"x"}],"tool_choice":"required"}', 400, 'tool_choice'],
  ['/v1/chat/completions', JSON.stringify(chat({ messages: [{ role: 'user', content: 'word '.repeat(5000) }] })), 400, 'messages'],
  ['/v1/chat/completions', '{"model":"rowlm-tiny","messages":[{"role":"user","content":"x"}],"tools":' +
    '['.repeat(20000) + ']'.repeat(20000) + '}', 400, 'body'],
  ['/v1/completions', '{"model":"rowlm-tiny","prompt":[1,2,99999]}', 400, 'prompt[2]'],
  ['/v1/completions', '{"model":"rowlm-tiny","prompt":"x","suffix":"y"}', 400, 'suffix'],
  ['/v1/completions', '{"model":"rowlm-tiny"}', 400, 'prompt'],
  ['/v1/chat/completions', '{"model":"nope","messages":[{"role":"user","content":"x"}]}', 404, 'model'],
  ['/v1/does-not-exist', '{}', 404, null],
];

test('Responses streams name every event, number them, and end with response.completed', async () => {
  const { head, body } = await curlStream('/v1/responses', {
    model: NAME, input: 'What does river mean?', temperature: 0, max_output_tokens: 12, stream: true,
  });
  assert.match(head, /^HTTP\/1\.1 200/);
  assert.match(head, /content-type: text\/event-stream/i);
  const events = parseSse(body);
  const data = events.map((e) => JSON.parse(e.data));
  events.forEach((e, i) => {
    assert.equal(e.event, data[i].type);
    assert.equal(data[i].sequence_number, i);
  });
  assert.deepEqual(data.slice(0, 4).map((d) => d.type),
    ['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added']);
  const last = data.at(-1);
  assert.ok(['response.completed', 'response.incomplete'].includes(last.type));
  const text = data.filter((d) => d.type === 'response.output_text.delta').map((d) => d.delta).join('');
  assert.equal(last.response.output[0].content[0].text, text);
  assert.equal(last.response.usage.output_tokens <= 12, true);
  // A bad field: OpenAI's error shape, naming it.
  const bad = await postJson(`${server.url}/v1/responses`, { model: NAME, input: [{ type: 'function_call_output', call_id: 'c', output: 'x' }] });
  assert.equal(bad.status, 400);
  assert.equal(bad.json.error.param, 'input[0].call_id');
  assert.equal(bad.json.error.type, 'invalid_request_error');
});

test('malformed input gets a 4xx JSON error naming the field; the server keeps serving', async () => {
  for (const [path, body, status, param] of malformed) {
    const r = await postJson(`${server.url}${path}`, body);
    assert.equal(r.status, status, `${body.slice(0, 80)} -> ${r.text}`);
    assert.equal(typeof r.json?.error?.message, 'string', r.text);
    if (param) assert.equal(r.json.error.param, param, r.text);
  }
  // Anthropic's endpoint answers in Anthropic's shape.
  const a = await postJson(`${server.url}/v1/messages`, { model: NAME, messages: [{ role: 'user', content: 'x' }] });
  assert.equal(a.status, 400);
  assert.equal(a.json.type, 'error');
  assert.equal(a.json.error.type, 'invalid_request_error');
  assert.match(a.json.error.message, /max_tokens/);
  await healthy();
});

test('oversized bodies get 413', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'rowlm-413-'));
  const file = join(dir, 'body.json');
  await writeFile(file, JSON.stringify(chat({ messages: [{ role: 'user', content: 'x'.repeat(100 * 1024) }] })));
  try {
    const { stdout } = await run('curl', ['-sS', '-o', '-', '-w', '\n%{http_code}', '-H', 'content-type: application/json',
      '--data-binary', `@${file}`, `${server.url}/v1/chat/completions`]);
    const cut = stdout.lastIndexOf('\n');
    assert.equal(stdout.slice(cut + 1), '413', stdout);
    assert.match(JSON.parse(stdout.slice(0, cut)).error.message, /larger than the limit/);
  } finally {
    await rm(dir, { recursive: true });
  }
  await healthy();
});

// Hanging up mid-stream cancels the request: the engine's running count
// drops to zero and its cancelled count rises, with nothing else to do.
// The clients are raw sockets the test closes once three events have
// arrived. With fetch() and an AbortController, two CI runs under load saw
// the HTTP layer count all 6 hang-ups and the engine fewer cancellations
// (4 in one) with nothing left running: the other requests had finished
// before their sockets closed, so the
// aborted fetch() had kept its connection open for seconds (a client still
// connected is served on, until --write-timeout drops one that reads nothing).
test('clients that disconnect mid-stream cancel their requests', async () => {
  const port = Number(new URL(server.url).port);
  const counts = (m) => ['cancelled', 'finished', 'failed']
    .map((o) => `${o} ${metric(m, `rowlm_engine_requests_total{outcome="${o}"}`)}`).join(', ');
  const before = metric(await metrics(server.url), 'rowlm_engine_requests_total{outcome="cancelled"}');
  const streams = Array.from({ length: 6 }, (_, i) => new Promise((resolve, reject) => {
    const body = JSON.stringify(chat({ stream: true, max_tokens: 2000, ignore_eos: true, seed: i, temperature: 1 }));
    const s = net.connect({ host: '127.0.0.1', port }, () => {
      s.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
              `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
    });
    let got = '';
    s.on('data', (d) => {
      got += d.toString('latin1');
      if ((got.match(/^data: /gm) ?? []).length >= 3) {
        s.destroy();
        resolve(got);
      }
    });
    s.on('error', reject);
    s.on('close', () => reject(new Error(`the server closed stream ${i} first: ${got.slice(0, 300)}`)));
  }));
  for (const got of await Promise.all(streams)) assert.match(got, /^HTTP\/1\.1 200 /);
  const hungUp = Date.now();
  assert.ok(await eventually(async () => {
    const m = await metrics(server.url);
    return metric(m, 'rowlm_engine_requests_running') === 0 && metric(m, 'rowlm_engine_requests_waiting') === 0 &&
      metric(m, 'rowlm_engine_requests_total{outcome="cancelled"}') >= before + 6;
  }), await (async () => {
    const m = await metrics(server.url);
    return `cancelled before: ${before}; now ${counts(m)}; running ${metric(m, 'rowlm_engine_requests_running')}, ` +
      `waiting ${metric(m, 'rowlm_engine_requests_waiting')}`;
  })());
  console.log(`6 streams cancelled within ${Date.now() - hungUp} ms of the hang-ups (metrics polled every 50 ms)`);
  const m = await metrics(server.url);
  assert.ok(metric(m, 'rowlm_http_requests_total{endpoint="chat_completions",outcome="cancelled"}') >= 6);
  // Only cached prefixes keep KV once nothing runs.
  assert.ok(metric(m, 'rowlm_kv_used_bytes') <= metric(m, 'rowlm_prefix_cache_bytes'), m);
  await healthy();
});

// Streams served side by side in one batch give each what it gets alone.
test('concurrent streams each equal the same request served alone', async () => {
  const prompts = ['What does river mean?', 'What does king mean?', 'In the beginning', 'What does light mean?'];
  const solo = [];
  for (const p of prompts) {
    const r = await postJson(`${server.url}/v1/chat/completions`, chat({ max_tokens: 24, messages: [{ role: 'user', content: p }] }));
    solo.push(r.json.choices[0].message.content);
  }
  const together = await Promise.all(prompts.concat(prompts).map(async (p) => {
    const { body } = await curlStream('/v1/chat/completions', chat({ stream: true, max_tokens: 24, messages: [{ role: 'user', content: p }] }));
    return parseSse(body).slice(0, -1).map((e) => JSON.parse(e.data).choices[0]?.delta.content ?? '').join('');
  }));
  assert.deepEqual(together, solo.concat(solo));
});

test('past the queue bound: 429 with Retry-After, and serving resumes', async () => {
  const small = await startRowlm(['--max-running', '1', '--max-waiting', '1']);
  try {
    const body = { model: NAME, prompt: 'In the beginning', max_tokens: 100, ignore_eos: true, temperature: 0 };
    const results = await Promise.all(Array.from({ length: 4 }, () => postJson(`${small.url}/v1/completions`, body)));
    const statuses = results.map((r) => r.status).sort();
    assert.ok(statuses.includes(429), statuses.join());
    assert.ok(statuses.includes(200), statuses.join());
    for (const r of results.filter((x) => x.status === 429)) {
      assert.equal(r.headers.get('retry-after'), '1');
      assert.equal(r.json.error.type, 'rate_limit_error');
    }
    const m = await metrics(small.url);
    assert.ok(metric(m, 'rowlm_http_requests_total{endpoint="completions",outcome="rejected"}') >= 1, m);
    assert.equal((await postJson(`${small.url}/v1/completions`, { ...body, max_tokens: 4 })).status, 200);
  } finally {
    assert.equal((await small.stop()).code, 0);
  }
});

test('with --api-key, /v1 needs the key; probes do not', async () => {
  const keyed = await startRowlm(['--api-key', 'sekrit']);
  try {
    const url = `${keyed.url}/v1/chat/completions`;
    const none = await postJson(url, chat());
    assert.equal(none.status, 401);
    assert.equal(none.json.error.code, 'invalid_api_key');
    assert.equal((await postJson(url, chat(), { authorization: 'Bearer wrong' })).status, 401);
    assert.equal((await postJson(url, chat(), { authorization: 'Bearer sekrit' })).status, 200);
    assert.equal((await postJson(url, chat(), { 'x-api-key': 'sekrit' })).status, 200);
    const anthropic = await postJson(`${keyed.url}/v1/messages`, {});
    assert.equal(anthropic.status, 401);
    assert.equal(anthropic.json.error.type, 'authentication_error');
    assert.equal((await fetch(`${keyed.url}/health`)).status, 200);
  } finally {
    await keyed.stop();
  }
});

async function firstChunkThenRest(url, body) {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let text = decoder.decode((await reader.read()).value);
  return {
    first: text,
    rest: (async () => {
      try {
        for (;;) {
          const { value, done } = await reader.read();
          if (done) return text;
          text += decoder.decode(value);
        }
      } catch {
        return text;  // the connection closed under us
      }
    })(),
  };
}

test('SIGTERM: running streams finish, new connections are refused, exit 0', async () => {
  const s = await startRowlm();
  const body = { model: NAME, prompt: 'In the beginning', max_tokens: 60, ignore_eos: true, temperature: 0, stream: true };
  const { rest } = await firstChunkThenRest(`${s.url}/v1/completions`, body);
  s.proc.kill('SIGTERM');
  await eventually(async () => /not accepting/.test(s.stderr()));
  await assert.rejects(fetch(`${s.url}/health`));
  const text = await rest;
  assert.ok(text.endsWith('data: [DONE]\n\n'), text.slice(-200));
  const chunks = parseSse(text).slice(0, -1).map((e) => JSON.parse(e.data));
  assert.ok(chunks.every((c) => c.choices), 'no error event');
  assert.equal(chunks.at(-1).choices[0].finish_reason, 'length');
  assert.deepEqual(await s.exited, { code: 0, signal: null });
});

test('SIGTERM with no grace: running streams are cancelled, exit 0', async () => {
  const s = await startRowlm(['--shutdown-grace', '0']);
  const body = { model: NAME, prompt: 'In the beginning', max_tokens: 3000, ignore_eos: true, temperature: 0, stream: true };
  const { rest } = await firstChunkThenRest(`${s.url}/v1/completions`, body);
  s.proc.kill('SIGTERM');
  const text = await rest;
  // The stream ends early, with an error event naming the shutdown.
  assert.match(text, /shutting down/);
  assert.deepEqual(await s.exited, { code: 0, signal: null });
});
