// The chat page (GET /, ui/) in headless Chromium (Debian's chromium, driven
// by playwright-core) against rowlm serve on the bundled model: streaming,
// stop (cancelled on the server), regenerate, edit, reload, the API key,
// a phone-sized screen, and model output full of markup shown as text.
// Screenshots go to $ROWLM_SCREENSHOTS (CTest: build/tests/server/chat_page_screenshots).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { chromium } from 'playwright-core';
import { startRowlm, startScripted, postJson, metrics, metric, NAME } from '../harness.mjs';

const CHROMIUM = '/usr/bin/chromium';
const SHOTS = process.env.ROWLM_SCREENSHOTS || join(tmpdir(), 'rowlm-chat-page-screenshots');
const SYSTEM = 'You are a helpful assistant who answers briefly and clearly, in plain words, to every question you get from the user.';
const CANCELLED = 'rowlm_http_requests_total{endpoint="chat_completions",outcome="cancelled"}';

let browser;
before(async () => {
  if (!existsSync(CHROMIUM)) throw new Error(`${CHROMIUM} is missing: scripts/setup.sh installs Debian's chromium`);
  mkdirSync(SHOTS, { recursive: true });
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
  });
});
after(() => browser?.close());

// A fresh browser context (its own localStorage) with one page, recording
// script errors and console errors (CSP violations among them).
async function openPage(url, options = {}) {
  const context = await browser.newContext({ viewport: { width: 1100, height: 720 }, ...options });
  const page = await context.newPage();
  const problems = [];
  page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
  page.on('console', (m) => m.type() === 'error' && problems.push(`console: ${m.text()}`));
  await page.goto(url);
  return { context, page, problems };
}

const stored = (page) => page.evaluate(() => JSON.parse(localStorage.getItem('rowlm.conversations')));
const shot = (page, name) => page.screenshot({ path: join(SHOTS, name) });

// Waits until the page has no reply streaming (Send is back).
async function idle(page) {
  await page.locator('#send').waitFor({ state: 'visible' });
  await page.locator('#stop').waitFor({ state: 'hidden' });
}

async function setSettings(page, fields) {
  await page.click('#toggle-settings');
  for (const [id, value] of Object.entries(fields)) await page.fill(`#${id}`, String(value));
  await page.click('#toggle-settings');
}

test('GET / is the page with its Content-Security-Policy; --no-ui turns it off', async () => {
  const server = await startRowlm();
  const noUi = await startRowlm(['--no-ui']);
  try {
    const res = await fetch(`${server.url}/`);
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('content-type'), 'text/html; charset=utf-8');
    assert.match(res.headers.get('content-security-policy'), /script-src 'sha256-[A-Za-z0-9+/]{43}='/);
    const html = await res.text();
    assert.match(html, /^<!doctype html>/);
    assert.ok(html.length < 64 * 1024, `the page is ${html.length} bytes`);
    assert.ok(!/\b(src|href)=["']?(https?:)?\/\//.test(html), 'the page loads nothing from elsewhere');
    assert.equal((await fetch(`${noUi.url}/`)).status, 404);
    assert.equal((await fetch(`${noUi.url}/v1/models`)).status, 200);
  } finally {
    await Promise.all([server.stop(), noUi.stop()]);
  }
});

test('stream, regenerate, edit, reload, stop (cancelled on the server), phone', async () => {
  const server = await startRowlm(['--stream-interval', '0']);
  const { context, page, problems } = await openPage(server.url);
  try {
    await page.locator('#model-name', { hasText: NAME }).waitFor();
    assert.match(await page.textContent('#model-device'), /^on cpu/);
    await setSettings(page, { system: SYSTEM, temperature: 0, max_tokens: 40, seed: 7 });
    let finished = 0;
    page.on('requestfinished', (r) => r.url().endsWith('/v1/chat/completions') && ++finished);

    // Every change of the reply's text while it streams, as its length.
    await page.evaluate(() => {
      window.lengths = [];
      new MutationObserver(() => {
        const body = document.querySelector('.message.assistant:last-child .body');
        if (body) window.lengths.push(body.textContent.length);
      }).observe(document.getElementById('messages'), { childList: true, subtree: true, characterData: true });
    });
    await page.fill('#prompt', 'Tell me a story');
    await page.press('#prompt', 'Enter');
    await idle(page);
    await page.locator('.message.assistant .regenerate').waitFor();

    // The oracle: the same request, not streamed, straight to the API.
    const oracle = await postJson(`${server.url}/v1/chat/completions`, {
      model: NAME, temperature: 0, max_tokens: 40, seed: 7,
      messages: [{ role: 'system', content: SYSTEM }, { role: 'user', content: 'Tell me a story' }],
    });
    assert.equal(oracle.status, 200, oracle.text);
    const expected = oracle.json.choices[0].message.content;
    let [conv] = await stored(page);
    assert.equal(conv.title, 'Tell me a story');
    assert.deepEqual(conv.messages.map((m) => m.role), ['user', 'assistant']);
    assert.equal(conv.messages[1].content, expected);
    const lengths = [...new Set(await page.evaluate(() => window.lengths))];
    assert.ok(lengths.length >= 5, `the reply appeared in ${lengths.length} steps: ${lengths}`);
    assert.ok(lengths.every((n, i) => i === 0 || n > lengths[i - 1]), `the reply only grew: ${lengths}`);
    const figures = await page.textContent('.message.assistant .figures');
    const { completion_tokens, prompt_tokens } = oracle.json.usage;
    assert.match(figures, new RegExp(`^first token \\d+ ms · [\\d.]+ tokens/s · ${completion_tokens} tokens · 0 of ${prompt_tokens} prompt tokens cached`));
    await shot(page, 'reply.png');

    // Regenerate: the same request again; temperature 0 gives the same text,
    // now mostly from the prefix cache.
    await page.click('.message.assistant .regenerate');
    while (finished < 2) await page.waitForTimeout(20);
    await idle(page);
    [conv] = await stored(page);
    assert.deepEqual(conv.messages.map((m) => m.role), ['user', 'assistant']);
    assert.equal(conv.messages[1].content, expected);
    assert.ok(conv.messages[1].stats.cachedTokens > 0, JSON.stringify(conv.messages[1].stats));
    const shown = await page.textContent('.message.assistant .body');

    // Reload: the conversation is still there, as it was.
    await page.reload();
    await page.locator('.message.assistant .body').waitFor();
    assert.equal(await page.locator('#conversations li').count(), 1);
    assert.equal(await page.textContent('#conversations li.current .open'), 'Tell me a story');
    assert.equal(await page.textContent('.message.user .body'), 'Tell me a story');
    assert.equal(await page.textContent('.message.assistant .body'), shown);

    // Edit the last turn: its text goes back to the composer; sending it anew
    // replaces the turn.
    await page.click('.message.user .edit');
    assert.equal(await page.inputValue('#prompt'), 'Tell me a story');
    assert.equal(await page.locator('.message').count(), 0);
    await page.fill('#prompt', 'Tell me a story about a cat');
    await page.press('#prompt', 'Enter');
    while (finished < 3) await page.waitForTimeout(20);
    await idle(page);
    [conv] = await stored(page);
    assert.deepEqual(conv.messages.map((m) => [m.role, m.role === 'user' ? m.content : typeof m.content]),
                     [['user', 'Tell me a story about a cat'], ['assistant', 'string']]);

    // Stop mid-stream: a reply that would run for thousands of tokens (the
    // test bans the end-of-text and end-of-turn tokens, which the page does
    // not); the server counts the request cancelled and frees its row.
    const before = metric(await metrics(server.url), CANCELLED) ?? 0;
    await page.evaluate(() => {
      const fetch = window.fetch;
      window.fetch = (url, init) => {
        if (!String(url).endsWith('/v1/chat/completions')) return fetch(url, init);
        return fetch(url, { ...init, body: JSON.stringify({ ...JSON.parse(init.body), max_tokens: 3000, logit_bias: { 1: -100, 106: -100 } }) });
      };
    });
    await page.click('#new-chat');
    await page.fill('#prompt', 'Count to a thousand');
    await page.press('#prompt', 'Enter');
    await page.waitForFunction(() => (document.querySelector('.message.assistant .body')?.textContent.length ?? 0) > 40);
    await page.click('#stop');
    await idle(page);
    const deadline = Date.now() + 10000;
    let m;
    while ((m = await metrics(server.url)) && (metric(m, CANCELLED) !== before + 1 || metric(m, 'rowlm_engine_requests_running') !== 0)) {
      assert.ok(Date.now() < deadline, `the server did not cancel the request:\n${m}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.ok(metric(m, 'rowlm_engine_requests_total{outcome="cancelled"}') >= 1);
    const convs = await stored(page);
    const stopped = convs.find((c) => c.title === 'Count to a thousand').messages[1];
    assert.equal(stopped.stats.finish, 'stopped');
    assert.ok(stopped.content.length > 40);
    assert.match(await page.textContent('.message.assistant .figures'), /stopped$/);
    await shot(page, 'stopped.png');
    assert.deepEqual(problems, []);

    // A phone: nothing wider than the screen; the conversations open from a button.
    const phone = await openPage(server.url, { viewport: { width: 390, height: 760 }, isMobile: true, hasTouch: true });
    await phone.page.locator('#model-name', { hasText: NAME }).waitFor();
    await phone.page.fill('#prompt', 'Hello');
    await phone.page.click('#send');
    await phone.page.locator('.message.assistant .regenerate').waitFor();
    assert.ok(await phone.page.evaluate(() => document.documentElement.scrollWidth <= innerWidth));
    assert.ok(!(await phone.page.locator('#new-chat').isVisible()) || (await phone.page.locator('#new-chat').boundingBox()).x < 0);
    await shot(phone.page, 'phone.png');
    await phone.page.click('#toggle-sidebar');
    await phone.page.locator('#conversations li', { hasText: 'Hello' }).waitFor();
    await phone.page.waitForTimeout(300);  // the slide-in transition
    assert.ok((await phone.page.locator('#new-chat').boundingBox()).x >= 0);
    await shot(phone.page, 'phone-conversations.png');
    await phone.page.mouse.click(370, 400);  // beside the conversations: they close
    await phone.page.waitForTimeout(300);
    assert.ok((await phone.page.locator('#new-chat').boundingBox()).x < 0);
    assert.deepEqual(phone.problems, []);
    await phone.context.close();
  } finally {
    await context.close();
    await server.stop();
  }
});

test('model output with HTML and script markup is shown as text, never run', async () => {
  const reply = [
    'Look: <script>window.pwned = 1</script> and <img src=x onerror="window.pwned = 2"> and **bold** `<b>code</b>`',
    '',
    '```html',
    '<script>window.pwned = 3</script>',
    '```',
    '[a link](javascript:window.pwned=4) and [a real one](https://example.com/)',
    '## Steps <i>now</i>',
    '- one',
    '- *two*',
    '3. third',
    '> quoted <u>text</u>',
    '```',
    'a block the reply never closes',
  ].join('\n');
  const server = await startScripted(reply);
  const { context, page, problems } = await openPage(server.url);
  try {
    await page.fill('#prompt', 'Show me some markup');
    await page.press('#prompt', 'Enter');
    await page.locator('.message.assistant .regenerate').waitFor();
    const [conv] = await stored(page);
    assert.equal(conv.messages[1].content, reply);
    assert.equal(await page.evaluate(() => window.pwned), undefined);
    assert.equal(await page.locator('#messages script, #messages img, #messages b, #messages iframe').count(), 0);
    const body = page.locator('.message.assistant .body');
    const text = await body.textContent();
    assert.ok(text.includes('<script>window.pwned = 1</script>'), text);
    assert.ok(text.includes('<img src=x onerror="window.pwned = 2">'), text);
    assert.equal(await body.locator('strong').textContent(), 'bold');
    assert.equal(await body.locator('p code').textContent(), '<b>code</b>');
    assert.equal(await body.locator('pre code').first().textContent(), '<script>window.pwned = 3</script>');
    assert.equal(await body.locator('pre').first().getAttribute('data-lang'), 'html');
    const links = await body.locator('a').evaluateAll((as) => as.map((a) => a.href));
    assert.deepEqual(links, ['https://example.com/']);
    assert.equal(await body.locator('h4').textContent(), 'Steps <i>now</i>');
    assert.deepEqual(await body.locator('ul li').allTextContents(), ['one', 'two']);
    assert.equal(await body.locator('ul li em').textContent(), 'two');
    assert.equal(await body.locator('ol').getAttribute('start'), '3');
    assert.equal(await body.locator('blockquote').textContent(), 'quoted <u>text</u>');
    assert.equal(await body.locator('pre code').nth(1).textContent(), 'a block the reply never closes');
    assert.equal(await page.locator('#messages i, #messages u').count(), 0);
    await shot(page, 'markup.png');
    assert.deepEqual(problems, []);
  } finally {
    await context.close();
    await server.stop();
  }
});

test('with --api-key the page asks for the key and sends it', async () => {
  const server = await startRowlm(['--api-key', 'sekrit']);
  const { context, page, problems } = await openPage(server.url);
  try {
    await page.locator('#key-form').waitFor();
    await page.fill('#api-key', 'wrong');
    await page.press('#api-key', 'Enter');
    await page.locator('#key-error').waitFor();
    await shot(page, 'api-key.png');
    await page.fill('#api-key', 'sekrit');
    await page.press('#api-key', 'Enter');
    await page.locator('#model-name', { hasText: NAME }).waitFor();
    assert.ok(await page.locator('#key-form').isHidden());
    await setSettings(page, { max_tokens: 8 });
    await page.fill('#prompt', 'Hello');
    await page.press('#prompt', 'Enter');
    await page.locator('.message.assistant .regenerate').waitFor();
    const [conv] = await stored(page);
    assert.equal(conv.messages[1].error, undefined);
    assert.ok(conv.messages[1].stats.completionTokens > 0);
    // The two 401s of the wrong key and the first load are the only errors.
    assert.ok(problems.every((p) => p.includes('401')), problems.join('\n'));
  } finally {
    await context.close();
    await server.stop();
  }
});
