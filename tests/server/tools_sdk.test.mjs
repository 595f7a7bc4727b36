// The SDKs read the tool calls and the reasoning rowlm parses, whole and
// streamed. The tiny model never learned to call tools or to think, so these
// run against scripted servers: rowlm's HTTP layer whose engine replies with
// Gemma 4 tool calls, or with a Gemma 4 thought channel and an answer.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { startScripted, NAME } from './harness.mjs';

const reply = 'Let me check.<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:2}<tool_call|>' +
  '<|tool_call>call:get_time{zone:<|"|>CET<|"|>}<tool_call|>';
const thinkingReply = '<|channel>thought\nThe capital of France.<channel|>Paris.';
let server, openai, anthropic, thinker, thinkingOpenai, thinkingAnthropic;
before(async () => {
  server = await startScripted(reply);
  openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'x', maxRetries: 0 });
  anthropic = new Anthropic({ baseURL: server.url, apiKey: 'x', maxRetries: 0 });
  thinker = await startScripted(thinkingReply);
  thinkingOpenai = new OpenAI({ baseURL: `${thinker.url}/v1`, apiKey: 'x', maxRetries: 0 });
  thinkingAnthropic = new Anthropic({ baseURL: thinker.url, apiKey: 'x', maxRetries: 0 });
});
after(async () => {
  assert.equal((await server.stop()).code, 0);
  assert.equal((await thinker.stop()).code, 0);
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

test('Responses: function_call items, whole and streamed, and a function_call_output continuing them', async () => {
  const tools = ['get_weather', 'get_time'].map((name) => ({ type: 'function', name, parameters: { type: 'object', properties: {} } }));
  const r = await openai.responses.create({ model: NAME, input: 'Weather in Paris?', tools });
  assert.deepEqual(r.output.map((o) => o.type), ['message', 'function_call', 'function_call']);
  assert.equal(r.output_text, 'Let me check.');
  assert.deepEqual(r.output.slice(1).map((c) => [c.name, JSON.parse(c.arguments)]), expectedCalls);
  for (const c of r.output.slice(1)) assert.match(c.call_id, /^call_/);
  const stream = openai.responses.stream({ model: NAME, input: 'Weather in Paris?', tools });
  const argDeltas = [];
  stream.on('response.function_call_arguments.delta', (e) => argDeltas.push(e.delta));
  const final = await stream.finalResponse();
  assert.deepEqual(final.output.slice(1).map((c) => [c.name, JSON.parse(c.arguments)]), expectedCalls);
  assert.equal(argDeltas.length, 2);
  const next = await openai.responses.create({
    model: NAME, tools, previous_response_id: r.id,
    input: r.output.slice(1).map((c) => ({ type: 'function_call_output', call_id: c.call_id, output: 'sunny' })),
  });
  assert.equal(next.status, 'completed');
  assert.equal(next.previous_response_id, r.id);
});

test('reasoning: reasoning_content in chat completions, whole and streamed', async () => {
  const params = { model: NAME, messages, reasoning_effort: 'high' };
  const r = await thinkingOpenai.chat.completions.create(params);
  assert.equal(r.choices[0].message.reasoning_content, 'The capital of France.');
  assert.equal(r.choices[0].message.content, 'Paris.');
  const stream = await thinkingOpenai.chat.completions.create({ ...params, stream: true });
  let reasoning = '', content = '';
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      reasoning += c.delta.reasoning_content ?? '';
      content += c.delta.content ?? '';
    }
  }
  assert.equal(reasoning, 'The capital of France.');
  assert.equal(content, 'Paris.');
});

test('reasoning: Anthropic thinking blocks, whole and streamed through the SDK', async () => {
  const params = { model: NAME, max_tokens: 100, messages, thinking: { type: 'enabled', budget_tokens: 50 } };
  const m = await thinkingAnthropic.messages.create(params);
  assert.deepEqual(m.content.map((b) => b.type), ['thinking', 'text']);
  assert.equal(m.content[0].thinking, 'The capital of France.');
  assert.equal(m.content[1].text, 'Paris.');
  const stream = thinkingAnthropic.messages.stream(params);
  let thinking = '';
  stream.on('thinking', (delta) => (thinking += delta));
  const final = await stream.finalMessage();
  assert.equal(thinking, 'The capital of France.');
  assert.deepEqual(final.content, m.content);
});

test('reasoning: Responses reasoning items, whole and streamed through the SDK', async () => {
  const params = { model: NAME, input: 'Capital of France?', reasoning: { effort: 'medium' } };
  const r = await thinkingOpenai.responses.create(params);
  assert.deepEqual(r.output.map((o) => o.type), ['reasoning', 'message']);
  assert.equal(r.output[0].content[0].text, 'The capital of France.');
  assert.equal(r.output_text, 'Paris.');
  assert.ok(r.usage.output_tokens_details.reasoning_tokens > 0);
  const stream = thinkingOpenai.responses.stream(params);
  let reasoning = '';
  stream.on('response.reasoning_text.delta', (e) => (reasoning += e.delta));
  const final = await stream.finalResponse();
  assert.equal(reasoning, 'The capital of France.');
  assert.deepEqual(final.output.map((o) => [o.type, o.id]), r.output.map((o) => [o.type, o.id.replace(r.id.slice(5), final.id.slice(5))]));
  assert.equal(final.output[1].content[0].text, 'Paris.');  // (the stream helper's result has no output_text)
});
