// The official Anthropic SDK against rowlm serve on the bundled model.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { startRowlm, NAME } from './harness.mjs';

let server, client;
before(async () => {
  server = await startRowlm();
  client = new Anthropic({ baseURL: server.url, apiKey: 'not-needed', maxRetries: 0 });
});
after(async () => {
  assert.deepEqual(await server.stop(), { code: 0, signal: null });
});

const base = { model: NAME, max_tokens: 32, temperature: 0, messages: [{ role: 'user', content: 'What does river mean?' }] };

test('messages.create', async () => {
  const m = await client.messages.create({ ...base, system: 'Answer in one line.' });
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.equal(m.model, NAME);
  assert.equal(m.content[0].type, 'text');
  assert.ok(m.content[0].text.length > 0);
  assert.ok(['end_turn', 'max_tokens'].includes(m.stop_reason));
  assert.ok(m.usage.input_tokens > 5 && m.usage.output_tokens >= 1);
});

test('a streamed message says what the whole message says (greedy)', async () => {
  const whole = await client.messages.create(base);
  const stream = client.messages.stream(base);
  let text = '';
  const events = [];
  stream.on('text', (t) => (text += t));
  stream.on('streamEvent', (e) => events.push(e.type));
  const final = await stream.finalMessage();
  assert.equal(text, whole.content[0].text);
  assert.deepEqual(final.content, whole.content);
  assert.equal(final.stop_reason, whole.stop_reason);
  assert.equal(final.usage.output_tokens, whole.usage.output_tokens);
  assert.equal(events[0], 'message_start');
  assert.equal(events.at(-1), 'message_stop');
});

test('stop_sequences end the message before the sequence', async () => {
  const whole = await client.messages.create({ ...base, max_tokens: 40 });
  const text = whole.content[0].text;
  const words = text.split(' ').filter((w) => w.length > 2);
  assert.ok(words.length >= 2, text);
  const stop = ' ' + words[1];
  const m = await client.messages.create({ ...base, max_tokens: 40, stop_sequences: [stop] });
  assert.equal(m.stop_reason, 'stop_sequence');
  assert.equal(m.stop_sequence, stop);
  assert.equal(m.content[0].text, text.slice(0, text.indexOf(stop)));
});

test('tools and a tool exchange in the history reach the model', async () => {
  const tools = [{ name: 'get_weather', description: 'Weather', input_schema: { type: 'object', properties: { city: { type: 'string' } } } }];
  const plain = await client.messages.create(base);
  const m = await client.messages.create({
    ...base, tools,
    messages: [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'sunny' }] },
    ],
  });
  assert.ok(m.usage.input_tokens > plain.usage.input_tokens);
  assert.ok(m.content.length >= 1);
});

test('bad requests become SDK errors in Anthropic\'s shape', async () => {
  await assert.rejects(client.messages.create({ ...base, temperature: 3 }), (e) =>
    e instanceof Anthropic.BadRequestError && e.error?.type === 'error' && e.error?.error?.type === 'invalid_request_error' &&
    /temperature/.test(e.message));
  await assert.rejects(client.messages.create({ ...base, model: 'claude-opus-4' }), (e) => e instanceof Anthropic.NotFoundError);
});
