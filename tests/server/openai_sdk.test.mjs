// The official OpenAI SDK against rowlm serve on the bundled model.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startRowlm, NAME } from './harness.mjs';

let server, client;
before(async () => {
  server = await startRowlm();
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'not-needed', maxRetries: 0 });
});
after(async () => {
  assert.deepEqual(await server.stop(), { code: 0, signal: null });
});

const question = [{ role: 'user', content: 'What does river mean?' }];

test('chat completion', async () => {
  const r = await client.chat.completions.create({ model: NAME, messages: question, temperature: 0, max_tokens: 24 });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.model, NAME);
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.ok(r.choices[0].message.content.length > 0);
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 5);
  assert.ok(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 24);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
});

test('a streamed chat says what the whole reply says (greedy)', async () => {
  const params = { model: NAME, messages: question, temperature: 0, max_tokens: 40 };
  const whole = await client.chat.completions.create(params);
  const stream = await client.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
  let text = '';
  let finish = null;
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.delta.content ?? '';
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.ok(chunks > 3);
  assert.equal(text, whole.choices[0].message.content);
  assert.equal(finish, whole.choices[0].finish_reason);
  assert.deepEqual(usage, whole.usage);
});

test('the SDK stream helper assembles the same message', async () => {
  const params = { model: NAME, messages: question, temperature: 0, max_tokens: 30 };
  const whole = await client.chat.completions.create(params);
  const runner = client.chat.completions.stream(params);
  let deltas = '';
  runner.on('content', (delta) => (deltas += delta));
  const final = await runner.finalChatCompletion();
  assert.equal(final.choices[0].message.content, whole.choices[0].message.content);
  assert.equal(deltas, whole.choices[0].message.content);
});

test('completions, whole and streamed, with log-probabilities', async () => {
  const params = { model: NAME, prompt: 'In the beginning', temperature: 0, max_tokens: 20, logprobs: 2 };
  const whole = await client.completions.create(params);
  const c = whole.choices[0];
  assert.equal(whole.object, 'text_completion');
  assert.equal(c.finish_reason, 'length');
  assert.equal(c.logprobs.tokens.length, 20);
  assert.equal(c.logprobs.token_logprobs.length, 20);
  for (const lp of c.logprobs.token_logprobs) assert.ok(lp <= 0);
  for (const top of c.logprobs.top_logprobs) assert.ok(Object.keys(top).length >= 1 && Object.keys(top).length <= 2);
  let text = '';
  for await (const chunk of await client.completions.create({ ...params, stream: true })) text += chunk.choices[0]?.text ?? '';
  assert.equal(text, c.text);
  const echoed = await client.completions.create({ ...params, logprobs: undefined, echo: true });
  assert.equal(echoed.choices[0].text, 'In the beginning' + c.text);
});

test('chat log-probabilities', async () => {
  const r = await client.chat.completions.create({
    model: NAME, messages: question, temperature: 0, max_tokens: 10, logprobs: true, top_logprobs: 3,
  });
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, r.usage.completion_tokens);
  for (const e of content) {
    assert.ok(e.logprob <= 0);
    assert.equal(e.top_logprobs.length, 3);
    assert.deepEqual(e.bytes, [...Buffer.from(e.token)]);
    // Greedy: the chosen token is the most likely one.
    assert.ok(e.logprob >= e.top_logprobs[0].logprob - 1e-6);
  }
});

test('n choices with a seed repeat exactly', async () => {
  const params = { model: NAME, messages: question, temperature: 1, max_tokens: 16, n: 3, seed: 1234 };
  const a = await client.chat.completions.create(params);
  const b = await client.chat.completions.create(params);
  assert.equal(a.choices.length, 3);
  assert.deepEqual(a.choices.map((c) => c.index), [0, 1, 2]);
  assert.deepEqual(a.choices.map((c) => c.message.content), b.choices.map((c) => c.message.content));
  assert.equal(a.usage.completion_tokens, a.choices.length && b.usage.completion_tokens);
});

const weatherTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};

// The tiny model never learned tool calls (the scripted-server tests check
// parsing); here the real model gets the declarations, a named choice that
// forces the call's opening, and a tool exchange in its history.
test('tools: declarations, a forced call and tool history reach the model', async () => {
  const plain = await client.chat.completions.create({ model: NAME, messages: question, temperature: 0, max_tokens: 8 });
  const named = await client.chat.completions.create({
    model: NAME, messages: question, temperature: 0, max_tokens: 8, tools: [weatherTool],
    tool_choice: { type: 'function', function: { name: 'get_weather' } },
  });
  assert.ok(named.usage.prompt_tokens > plain.usage.prompt_tokens + 10, 'the declaration is in the prompt');
  const m = named.choices[0].message;
  // Either the model completed a call, or its reply shows the forced opening.
  assert.ok(m.tool_calls?.length === 1 || m.content.startsWith('<|tool_call>call:get_weather{'), JSON.stringify(m));
  const history = await client.chat.completions.create({
    model: NAME, temperature: 0, max_tokens: 8, tools: [weatherTool],
    messages: [
      ...question,
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: 'sunny' },
    ],
  });
  assert.equal(history.choices.length, 1);
  assert.ok(history.usage.prompt_tokens > named.usage.prompt_tokens);
});

test('bad requests become SDK errors naming the field', async () => {
  await assert.rejects(
    client.chat.completions.create({ model: NAME, messages: question, temperature: 7 }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'temperature' && /temperature/.test(e.message),
  );
  await assert.rejects(
    client.chat.completions.create({ model: 'gpt-4o', messages: question }),
    (e) => e instanceof OpenAI.NotFoundError && e.param === 'model',
  );
  await assert.rejects(
    client.chat.completions.create({ model: NAME, messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:,' } }] }] }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'messages[0].content[0].type',
  );
});

test('responses.create: plain, and streamed through the SDK helper, agree (greedy)', async () => {
  const params = { model: NAME, input: 'What does river mean?', instructions: 'Answer briefly.', temperature: 0, max_output_tokens: 24 };
  const whole = await client.responses.create(params);
  assert.equal(whole.object, 'response');
  assert.match(whole.id, /^resp_/);
  assert.ok(['completed', 'incomplete'].includes(whole.status));
  assert.equal(whole.instructions, 'Answer briefly.');
  assert.ok(whole.output_text.length > 0);  // the SDK's join of the message's text
  assert.equal(whole.output[0].type, 'message');
  assert.ok(whole.usage.input_tokens > 5);
  assert.ok(whole.usage.output_tokens >= 1 && whole.usage.output_tokens <= 24);
  assert.equal(whole.usage.total_tokens, whole.usage.input_tokens + whole.usage.output_tokens);
  const stream = client.responses.stream({ ...params, store: false });
  let deltas = '';
  const types = [];
  stream.on('response.output_text.delta', (e) => (deltas += e.delta));
  stream.on('event', (e) => types.push(e.type));
  const final = await stream.finalResponse();
  assert.equal(final.output[0].content[0].text, whole.output_text);  // (the stream helper's result has no output_text)
  assert.equal(deltas, whole.output_text);
  assert.equal(types[0], 'response.created');
  assert.equal(types.at(-1), whole.status === 'completed' ? 'response.completed' : 'response.incomplete');
  for (const t of ['response.in_progress', 'response.output_item.added', 'response.content_part.added',
    'response.output_text.done', 'response.output_item.done']) assert.ok(types.includes(t), t);
  // Raw iteration (stream: true) yields the same events, numbered in order.
  const raw = await client.responses.create({ ...params, stream: true, store: false });
  let n = 0;
  for await (const e of raw) assert.equal(e.sequence_number, n++);
  assert.equal(n, types.length);
});

test('responses: previous_response_id continues the stored conversation from the prefix cache', async () => {
  const first = await client.responses.create({ model: NAME, input: 'What does river mean?', temperature: 0, max_output_tokens: 16 });
  const second = await client.responses.create({
    model: NAME, input: 'And mountain?', previous_response_id: first.id, temperature: 0, max_output_tokens: 16,
  });
  assert.equal(second.previous_response_id, first.id);
  // The second prompt holds the first prompt, its reply and the new turn ...
  assert.ok(second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens);
  // ... and the KV of the first prompt (block-aligned) came from the prefix cache.
  assert.ok(second.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens - 16,
    JSON.stringify([first.usage, second.usage]));
  // Stored responses read back; deleted ones are gone.
  assert.deepEqual((await client.responses.retrieve(first.id)).output, first.output);
  await client.responses.delete(first.id);
  await assert.rejects(client.responses.retrieve(first.id), (e) => e instanceof OpenAI.NotFoundError);
  await assert.rejects(
    client.responses.create({ model: NAME, input: 'x', previous_response_id: first.id }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'previous_response_id' && e.code === 'previous_response_not_found',
  );
  // text.format holds the reply to JSON (structured outputs): a finished reply is a JSON object.
  const held = await client.responses.create({ model: NAME, input: 'x', text: { format: { type: 'json_object' } },
                                               max_output_tokens: 200 });
  assert.ok(['completed', 'incomplete'].includes(held.status), held.status);
  if (held.status === 'completed') {
    const value = JSON.parse(held.output_text);
    assert.ok(value !== null && typeof value === 'object' && !Array.isArray(value), held.output_text);
  }
  await assert.rejects(
    client.responses.create({ model: NAME, input: 'x', reasoning: { effort: 'high' }, max_output_tokens: 0 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'max_output_tokens',
  );
});

test('models.list', async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  assert.deepEqual(ids, [NAME]);
  assert.equal((await client.models.retrieve(NAME)).id, NAME);
});
