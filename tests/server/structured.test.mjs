// Structured outputs (response_format) through the official OpenAI SDK on
// the bundled model, checked by an independent JSON Schema validator (ajv):
// random schemas from the supported subset, sampled at temperature 1, every
// reply parses and validates; the same seeded requests give the same bytes
// alone and batched (log-probabilities included); greedy speculative
// decoding (n-gram drafts) under a schema gives what plain decoding does.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Ajv from 'ajv';
import { startRowlm, postJson, NAME } from './harness.mjs';

let plain, speculative;
const client = (server) => new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'not-needed', maxRetries: 0 });
before(async () => {
  [plain, speculative] = await Promise.all([startRowlm(), startRowlm(['--draft', 'ngram', '--draft-tokens', '3'])]);
});
after(async () => {
  for (const s of [plain, speculative]) assert.deepEqual(await s.stop(), { code: 0, signal: null });
});

// mulberry32: a small seeded generator, so a failure names a reproducible schema.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// A random schema of the documented subset. Strings and arrays are bounded
// so that every reply completes within max_tokens.
// The root is an object, as OpenAI's json_schema requires.
function randomSchema(r, depth = 0) {
  const pick = (xs) => xs[Math.floor(r() * xs.length)];
  const kinds = ['string', 'integer', 'number', 'boolean', 'null', 'enum', 'const', 'nullable'];
  if (depth < 3) kinds.push('object', 'object', 'array');
  switch (depth === 0 ? 'object' : pick(kinds)) {
    case 'string': {
      const s = { type: 'string', maxLength: 1 + Math.floor(r() * 8) };
      if (r() < 0.3) s.minLength = Math.floor(r() * s.maxLength);
      return s;
    }
    case 'integer':
      return pick([{ type: 'integer' }, { type: 'integer', minimum: -50, maximum: 200 }, { type: 'integer', exclusiveMinimum: 0 },
                   { type: 'integer', minimum: 1000, exclusiveMaximum: 1010 }]);
    case 'number': return { type: 'number', description: 'any number' };
    case 'boolean': return { type: 'boolean' };
    case 'null': return { type: 'null' };
    case 'enum': return { enum: pick([['red', 'green', 'blue'], [1, 2, 3, 10], ['a', 7, null, true], [{ x: 1 }, [1, 2], 'é']]) };
    case 'const': return { const: pick(['river', 42, false, { k: [1] }]) };
    case 'nullable': return pick([{ type: ['string', 'null'], maxLength: 6 }, { type: ['integer', 'null'] }, { type: ['boolean', 'string'], maxLength: 3 }]);
    case 'array': {
      const s = { type: 'array', items: randomSchema(r, depth + 1), maxItems: 1 + Math.floor(r() * 2) };
      if (r() < 0.5) s.minItems = 1;
      return s;
    }
    default: {
      const properties = {};
      const names = ['name', 'age', 'tags', 'ok', 'when', 'a b', 'ü'];
      const n = 1 + Math.floor(r() * (depth === 0 ? 4 : 3));
      while (Object.keys(properties).length < n) properties[pick(names)] = randomSchema(r, depth + 1);
      const keys = Object.keys(properties);
      const s = { type: 'object', properties, required: keys.filter(() => r() < 0.8) };
      if (r() < 0.6) s.additionalProperties = false;
      return s;
    }
  }
}

const ajv = new Ajv({ allowUnionTypes: true, strict: true });

function request(schema, seed, temperature) {
  return {
    model: NAME,
    messages: [{ role: 'user', content: 'Answer with a JSON value.' }],
    response_format: { type: 'json_schema', json_schema: { name: 'answer', schema, strict: true } },
    temperature,
    seed,
    max_tokens: 600,
    logprobs: true,
  };
}

const logprobsOf = (r) => r.choices[0].logprobs.content.map((t) => t.logprob);

function expectValid(schema, reply, what) {
  const choice = reply.choices[0];
  assert.equal(choice.finish_reason, 'stop', `${what}: ${choice.message.content}`);
  let value;
  assert.doesNotThrow(() => (value = JSON.parse(choice.message.content)), `${what}: not JSON: ${choice.message.content}`);
  const validate = ajv.compile(schema);
  assert.ok(validate(value), `${what}: ${JSON.stringify(schema)} rejects ${choice.message.content}: ${ajv.errorsText(validate.errors)}`);
}

test('random schemas at temperature 1: every reply validates, and is the same alone and batched', async () => {
  const r = rng(20);
  const cases = Array.from({ length: 16 }, (_, i) => ({ schema: randomSchema(r), seed: 1000 + i }));
  const c = client(plain);
  // All at once: one continuous batch.
  const batched = await Promise.all(cases.map(({ schema, seed }) => c.chat.completions.create(request(schema, seed, 1))));
  batched.forEach((reply, i) => expectValid(cases[i].schema, reply, `case ${i}`));
  // One at a time.
  for (let i = 0; i < cases.length; i++) {
    const alone = await c.chat.completions.create(request(cases[i].schema, cases[i].seed, 1));
    assert.equal(alone.choices[0].message.content, batched[i].choices[0].message.content, `case ${i}`);
    assert.deepEqual(logprobsOf(alone), logprobsOf(batched[i]), `case ${i}`);
  }
});

test('greedy speculative decoding under a schema gives what plain decoding does', async () => {
  const r = rng(21);
  const schemas = Array.from({ length: 6 }, () => randomSchema(r));
  const [a, b] = [client(plain), client(speculative)];
  const replies = await Promise.all(schemas.map((s) => Promise.all([a, b].map((c) => c.chat.completions.create(request(s, 1, 0))))));
  replies.forEach(([p, s], i) => {
    expectValid(schemas[i], p, `schema ${i}`);
    assert.equal(s.choices[0].message.content, p.choices[0].message.content, `schema ${i}`);
    assert.deepEqual(logprobsOf(s), logprobsOf(p), `schema ${i}`);
  });
  const metrics = await (await fetch(`${speculative.url}/metrics`)).text();
  assert.match(metrics, /rowlm_spec_decode_draft_tokens_total [1-9]/);
});

test('json_object replies are JSON objects; schemas outside the subset are a 400 naming the keyword', async () => {
  const reply = await client(plain).chat.completions.create({
    model: NAME,
    messages: [{ role: 'user', content: 'Give me an object.' }],
    response_format: { type: 'json_object' },
    temperature: 1,
    seed: 5,
    max_tokens: 200,
  });
  if (reply.choices[0].finish_reason === 'stop') {
    const value = JSON.parse(reply.choices[0].message.content);
    assert.equal(typeof value, 'object');
    assert.ok(value !== null && !Array.isArray(value));
  } else {
    assert.match(reply.choices[0].message.content, /^\{/);  // cut off by max_tokens, an object still
  }
  const bad = await postJson(`${plain.url}/v1/chat/completions`, {
    ...request({ type: 'object', properties: { a: { type: 'string', format: 'email' } } }, 1, 0),
  });
  assert.equal(bad.status, 400, bad.text);
  assert.equal(bad.json.error.param, 'response_format.json_schema.schema.properties.a.format');
  assert.match(bad.json.error.message, /'format' is not supported/);
});
