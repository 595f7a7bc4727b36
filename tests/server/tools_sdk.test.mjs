// The SDKs read the tool calls rowlm parses, whole and streamed. The tiny
// model never learned to call tools, so these run against the scripted
// server: rowlm's HTTP layer whose engine replies with a Gemma 4 tool call.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { startScripted, NAME } from './harness.mjs';

const reply = 'Let me check.<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:2}<tool_call|>' +
  '<|tool_call>call:get_time{zone:<|"|>CET<|"|>}<tool_call|>';
let server, openai, anthropic;
before(async () => {
  server = await startScripted(reply);
  openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'x', maxRetries: 0 });
  anthropic = new Anthropic({ baseURL: server.url, apiKey: 'x', maxRetries: 0 });
});
after(async () => {
  assert.equal((await server.stop()).code, 0);
});

const openaiTools = ['get_weather', 'get_time'].map((name) => ({
  type: 'function', function: { name, parameters: { type: 'object', properties: {} } },
}));
const anthropicTools = ['get_weather', 'get_time'].map((name) => ({ name, input_schema: { type: 'object' } }));
const messages = [{ role: 'user', content: 'Weather in Paris?' }];
const expectedCalls = [['get_weather', { city: 'Paris', days: 2 }], ['get_time', { zone: 'CET' }]];

test('OpenAI: tool_calls, whole', async () => {
  const r = await openai.chat.completions.create({ model: NAME, messages, tools: openaiTools });
  const m = r.choices[0].message;
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  assert.equal(m.content, 'Let me check.');
  assert.deepEqual(m.tool_calls.map((c) => [c.function.name, JSON.parse(c.function.arguments)]), expectedCalls);
  for (const c of m.tool_calls) assert.match(c.id, /^call_/);
});

test('OpenAI: tool_calls, streamed through the SDK helper', async () => {
  const runner = openai.chat.completions.stream({ model: NAME, messages, tools: openaiTools });
  const final = await runner.finalChatCompletion();
  const m = final.choices[0].message;
  assert.equal(final.choices[0].finish_reason, 'tool_calls');
  assert.equal(m.content, 'Let me check.');
  assert.deepEqual(m.tool_calls.map((c) => [c.function.name, JSON.parse(c.function.arguments)]), expectedCalls);
});

test('Anthropic: tool_use blocks, whole and streamed', async () => {
  const params = { model: NAME, max_tokens: 100, messages, tools: anthropicTools };
  const m = await anthropic.messages.create(params);
  assert.equal(m.stop_reason, 'tool_use');
  assert.deepEqual(m.content[0], { type: 'text', text: 'Let me check.' });
  assert.deepEqual(m.content.slice(1).map((b) => [b.type, b.name, b.input]), expectedCalls.map(([n, i]) => ['tool_use', n, i]));
  const stream = anthropic.messages.stream(params);
  const jsonDeltas = [];
  stream.on('inputJson', (delta) => jsonDeltas.push(delta));
  const final = await stream.finalMessage();
  assert.equal(final.stop_reason, 'tool_use');
  assert.deepEqual(final.content.map((b) => b.type), ['text', 'tool_use', 'tool_use']);
  assert.deepEqual(final.content.slice(1).map((b) => [b.name, b.input]), expectedCalls);
  assert.equal(jsonDeltas.length, 2);
});

test('without tools the markup is plain text', async () => {
  const r = await openai.chat.completions.create({ model: NAME, messages });
  assert.equal(r.choices[0].message.content, reply);
  assert.equal(r.choices[0].message.tool_calls, undefined);
});
