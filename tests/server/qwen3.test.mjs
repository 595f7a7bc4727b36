// The second family behind the same server: rowlm serve on a tiny random
// Qwen 3 model (tests/fixtures/qwen3/chat, ChatML) through the official
// OpenAI SDK. Its text is noise; what is checked is the protocol and that a
// streamed reply is the whole reply.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startRowlm, QWEN3_CHAT } from './harness.mjs';

const NAME = 'qwen3-chat';
let server, client;
before(async () => {
  server = await startRowlm(['--served-model-name', NAME], QWEN3_CHAT);
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'not-needed', maxRetries: 0 });
});
after(async () => {
  assert.deepEqual(await server.stop(), { code: 0, signal: null });
});

test('qwen3: models lists the served name', async () => {
  const list = await client.models.list();
  assert.deepEqual(list.data.map((m) => m.id), [NAME]);
});

test('qwen3: chat completion, whole and streamed, agree (greedy)', async () => {
  const params = { model: NAME, messages: [{ role: 'user', content: 'the cat' }], temperature: 0, max_tokens: 12 };
  const whole = await client.chat.completions.create(params);
  assert.equal(whole.choices.length, 1);
  assert.ok(['stop', 'length'].includes(whole.choices[0].finish_reason));
  // ChatML: <|im_start|>user\nthe cat<|im_end|>\n<|im_start|>assistant\n
  assert.ok(whole.usage.prompt_tokens >= 10, `prompt_tokens ${whole.usage.prompt_tokens}`);
  const stream = await client.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
  let text = '';
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) text += c.delta.content ?? '';
  }
  assert.equal(text, whole.choices[0].message.content);
  assert.equal(usage.prompt_tokens, whole.usage.prompt_tokens);
  assert.equal(usage.completion_tokens, whole.usage.completion_tokens);
  // The second request found the first one's prompt blocks in the prefix cache.
  assert.ok(usage.prompt_tokens_details.cached_tokens > 0);
});

test('qwen3: completions with token ids and logprobs', async () => {
  const r = await client.completions.create({ model: NAME, prompt: [5, 6, 7, 8], max_tokens: 4, temperature: 0, logprobs: 2 });
  assert.equal(r.usage.prompt_tokens, 4);
  assert.equal(r.choices[0].logprobs.tokens.length, r.usage.completion_tokens);
});

test('qwen3: a template without <think> has no thinking mode to turn on', async () => {
  const params = { model: NAME, messages: [{ role: 'user', content: 'the cat' }], max_tokens: 2 };
  await assert.rejects(
    client.chat.completions.create({ ...params, reasoning_effort: 'high' }),
    (e) => e.status === 400 && e.param === 'reasoning_effort' && /no thinking mode/.test(e.message),
  );
  const off = await client.chat.completions.create({ ...params, chat_template_kwargs: { enable_thinking: false } });
  assert.equal(off.choices[0].message.reasoning_content, undefined);
});

test('qwen3: strict tools need <tool_call> as a token, which this vocabulary lacks', async () => {
  const parameters = { type: 'object', properties: { city: { type: 'string' } } };
  await assert.rejects(
    client.chat.completions.create({
      model: NAME, messages: [{ role: 'user', content: 'the cat' }], max_tokens: 2,
      tools: [{ type: 'function', function: { name: 'weather', parameters, strict: true } }],
    }),
    (e) => e.status === 400 && e.param === 'tools[0].function.strict' && /<tool_call>/.test(e.message),
  );
});
