// Starting and stopping the servers under test, and small HTTP helpers.
import { spawn } from 'node:child_process';

export const MODEL = process.env.ROWLM_MODEL;
export const ROWLM = process.env.ROWLM_BIN;
export const SCRIPTED = process.env.ROWLM_SCRIPTED_BIN;
export const NAME = 'rowlm-tiny';

// Starts `bin args...`, waits for the address it prints on stderr.
async function start(bin, args) {
  if (!bin || !MODEL) throw new Error('run through run.sh (ROWLM_BIN, ROWLM_SCRIPTED_BIN, ROWLM_MODEL)');
  const proc = spawn(bin, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${bin} did not start in 60 s: ${stderr}`)), 60000);
    proc.stderr.on('data', (d) => {
      stderr += d;
      const m = stderr.match(/http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) {
        clearTimeout(timer);
        resolve(`http://127.0.0.1:${m[1]}`);
      }
    });
    exited.then(({ code }) => reject(new Error(`${bin} exited (${code}) before serving: ${stderr}`)));
  });
  return {
    url,
    proc,
    exited,
    stderr: () => stderr,
    // Sends `signal` and resolves with the exit { code, signal }.
    async stop(signal = 'SIGTERM') {
      proc.kill(signal);
      return exited;
    },
  };
}

// rowlm serve on the bundled model, on a free port. One engine thread: the
// tests' clients need the other core of a 2-core CI machine, and a lone
// thread does not stall when a core is taken away.
export function startRowlm(flags = [], model = MODEL) {
  return start(ROWLM, ['serve', model, '--port', '0', '--quiet', '--threads', '1', ...flags]);
}

// The Qwen 3 fixture with a tokenizer (tests/fixtures/qwen3/chat), beside the bundled model.
export const QWEN3_CHAT = new URL('../fixtures/qwen3/chat', import.meta.url).pathname;

// The scripted server: every reply is `reply`.
export function startScripted(reply) {
  return start(SCRIPTED, [MODEL, reply]);
}

export async function postJson(url, body, headers = {}) {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {}
  return { status: res.status, headers: res.headers, text, json };
}

// The value of a Prometheus sample, e.g. metric(text, 'rowlm_engine_requests_running').
export function metric(text, key) {
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue;
    const sp = line.lastIndexOf(' ');
    if (line.slice(0, sp) === key) return Number(line.slice(sp + 1));
  }
  return undefined;
}

export async function metrics(url) {
  return (await fetch(`${url}/metrics`)).text();
}

// Polls `pred` (async) until true or `ms` pass.
export async function eventually(pred, ms = 15000) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await pred()) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return pred();
}

// Splits an event stream into events: { event, data } (data lines joined).
export function parseSse(body) {
  const events = [];
  const blocks = body.split('\n\n');
  const rest = blocks.pop();
  if (rest !== '') throw new Error(`stream does not end with a blank line: ${JSON.stringify(rest.slice(0, 80))}`);
  for (const block of blocks) {
    const e = { event: '', data: [] };
    for (const line of block.split('\n')) {
      const colon = line.indexOf(': ');
      if (colon < 0) throw new Error(`not a field line: ${JSON.stringify(line)}`);
      const [field, value] = [line.slice(0, colon), line.slice(colon + 2)];
      if (field === 'event') e.event = value;
      else if (field === 'data') e.data.push(value);
      else throw new Error(`unexpected field ${field}`);
    }
    events.push({ event: e.event, data: e.data.join('\n') });
  }
  return events;
}
