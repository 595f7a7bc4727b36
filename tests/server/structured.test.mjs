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

// Strict tools: once a call opens, its name is a declared tool's and its
// arguments valid for that tool's parameters, in Gemma 4's argument syntax,
// which the server parses into the JSON the client reads. The bundled model
// never learned to call tools: tool_choice 'required' opens the call in the
// prompt (the model writes the name and arguments), and a logit bias on
// <|tool_response>, the token Gemma 4 writes after a call (a stop token
// here), ends the reply once the call is closed.
const OPEN = 48, TOOL_RESPONSE = 50;  // <|tool_call>, <|tool_response> in the bundled vocabulary
function strictRequest(schemas, seed, temperature, extra = {}) {
  return {
    model: NAME,
    messages: [{ role: 'user', content: 'Call a tool.' }],
    tools: schemas.map((parameters, i) => ({ type: 'function', function: { name: `tool_${i}`, parameters, strict: true } })),
    tool_choice: 'required',
    logit_bias: { [TOOL_RESPONSE]: 40 },
    temperature,
    seed,
    max_tokens: 300,
    logprobs: true,
    ...extra,
  };
}

function expectValidCalls(schemas, reply, what, { atLeast = 1 } = {}) {
  const calls = reply.choices[0].message.tool_calls ?? [];
  assert.ok(calls.length >= atLeast, `${what}: ${JSON.stringify(reply.choices[0].message)}`);
  for (const call of calls) {
    const m = /^tool_(\d+)$/.exec(call.function.name);
    assert.ok(m && +m[1] < schemas.length, `${what}: called ${call.function.name}`);
    const schema = schemas[+m[1]];
    const args = JSON.parse(call.function.arguments);
    const validate = ajv.compile(schema);
    assert.ok(validate(args), `${what}: ${JSON.stringify(schema)} rejects ${call.function.arguments}: ${ajv.errorsText(validate.errors)}`);
  }
  return calls;
}
const callsOf = (r) => (r.choices[0].message.tool_calls ?? []).map((c) => [c.function.name, c.function.arguments]);

test('strict tools at temperature 1: every call validates, and is the same alone and batched', async () => {
  const r = rng(22);
  const cases = Array.from({ length: 8 }, (_, i) => ({ schemas: [randomSchema(r), randomSchema(r)], seed: 2000 + i }));
  const c = client(plain);
  const batched = await Promise.all(cases.map(({ schemas, seed }) => c.chat.completions.create(strictRequest(schemas, seed, 1))));
  const names = new Set();
  batched.forEach((reply, i) => {
    assert.equal(reply.choices[0].finish_reason, 'tool_calls', `case ${i}`);
    for (const call of expectValidCalls(cases[i].schemas, reply, `case ${i}`)) names.add(call.function.name);
  });
  assert.equal(names.size, 2);  // both tools were chosen somewhere
  for (let i = 0; i < cases.length; i++) {
    const alone = await c.chat.completions.create(strictRequest(cases[i].schemas, cases[i].seed, 1));
    assert.deepEqual(callsOf(alone), callsOf(batched[i]), `case ${i}`);
    assert.equal(alone.choices[0].message.content, batched[i].choices[0].message.content, `case ${i}`);
    assert.deepEqual(logprobsOf(alone), logprobsOf(batched[i]), `case ${i}`);
  }
});

test('strict tools: calls the model opens itself are held too, and greedy speculation gives what plain decoding does', async () => {
  const r = rng(23);
  const cases = Array.from({ length: 4 }, () => [randomSchema(r), randomSchema(r)]);
  // tool_choice auto, the opening token favoured: text, then call after call.
  const auto = (schemas) => strictRequest(schemas, 1, 0, { tool_choice: 'auto', logit_bias: { [OPEN]: 40 }, max_tokens: 400 });
  const [a, b] = [client(plain), client(speculative)];
  const replies = await Promise.all(cases.map((s) => Promise.all([a, b].map((c) => c.chat.completions.create(auto(s))))));
  replies.forEach(([p, s], i) => {
    expectValidCalls(cases[i], p, `schemas ${i}`);
    assert.deepEqual(callsOf(s), callsOf(p), `schemas ${i}`);
    assert.equal(s.choices[0].message.content, p.choices[0].message.content, `schemas ${i}`);
    assert.deepEqual(logprobsOf(s), logprobsOf(p), `schemas ${i}`);
  });
});

test('strict tools through Responses and Anthropic; a schema outside the subset is a 400 naming the keyword', async () => {
  const r = rng(24);
  const schema = randomSchema(r);
  const validate = ajv.compile(schema);
  const response = await client(plain).responses.create({
    model: NAME, input: 'Call a tool.', temperature: 1, seed: 3, max_output_tokens: 300,
    tools: [{ type: 'function', name: 'lookup', parameters: schema, strict: true }], tool_choice: 'required',
  });
  const call = response.output.find((o) => o.type === 'function_call');
  assert.ok(call, JSON.stringify(response.output));
  assert.ok(validate(JSON.parse(call.arguments)), `${call.arguments}: ${ajv.errorsText(validate.errors)}`);
  const anthropic = await postJson(`${plain.url}/v1/messages`, {
    model: NAME, max_tokens: 300, temperature: 1, messages: [{ role: 'user', content: 'Call a tool.' }],
    tools: [{ name: 'lookup', input_schema: schema, strict: true }], tool_choice: { type: 'any' },
  });
  assert.equal(anthropic.status, 200, anthropic.text);
  const use = anthropic.json.content.find((b) => b.type === 'tool_use');
  assert.ok(use, anthropic.text);
  assert.ok(validate(use.input), `${JSON.stringify(use.input)}: ${ajv.errorsText(validate.errors)}`);
  const bad = await postJson(`${plain.url}/v1/chat/completions`,
    strictRequest([{ type: 'object', properties: { when: { type: 'string', format: 'date' } } }], 1, 0));
  assert.equal(bad.status, 400, bad.text);
  assert.equal(bad.json.error.param, 'tools[0].function.parameters.properties.when.format');
});
