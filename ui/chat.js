// The chat page of `rowlm serve`: conversations kept in localStorage,
// replies streamed from the server's OpenAI-compatible
// /v1/chat/completions, the served model and device from /v1/models.
// Everything the model or the user wrote reaches the DOM as text
// (textContent, or Markdown.render, which builds text nodes only).
'use strict';

(() => {
  const $ = (id) => document.getElementById(id);
  const STORE = { conversations: 'rowlm.conversations', current: 'rowlm.current', settings: 'rowlm.settings', key: 'rowlm.apiKey' };
  const SETTINGS = ['system', 'temperature', 'top_p', 'top_k', 'max_tokens', 'seed'];

  function load(key, fallback) {
    try {
      const v = JSON.parse(localStorage.getItem(key));
      return v ?? fallback;
    } catch {
      return fallback;  // unreadable storage: start afresh rather than fail
    }
  }
  // A full or disabled localStorage loses what could not be saved, not the page.
  function save(key, value) {
    try {
      localStorage.setItem(key, JSON.stringify(value));
    } catch (e) {
      console.warn(`rowlm: could not save ${key}: ${e}`);
    }
  }

  let conversations = load(STORE.conversations, []).filter((c) => c && Array.isArray(c.messages));
  let current = load(STORE.current, null);
  let apiKey = load(STORE.key, '');
  let modelId = null;
  let streaming = null;  // { controller, conversation } while a reply streams

  const conversation = () => conversations.find((c) => c.id === current);
  const persist = () => {
    save(STORE.conversations, conversations);
    save(STORE.current, current);
  };

  // ---- settings: the sampling fields the API accepts, kept in localStorage
  const settings = load(STORE.settings, {});
  for (const name of SETTINGS) {
    const input = $(name);
    if (settings[name] !== undefined) input.value = settings[name];
    input.addEventListener('input', () => {
      settings[name] = input.value;
      save(STORE.settings, settings);
    });
  }
  $('toggle-settings').addEventListener('click', () => {
    const panel = $('settings');
    panel.hidden = !panel.hidden;
    $('toggle-settings').setAttribute('aria-expanded', String(!panel.hidden));
  });

  // The request's sampling fields: only those set, as numbers.
  function samplingFields() {
    const out = {};
    for (const name of ['temperature', 'top_p', 'top_k', 'max_tokens', 'seed']) {
      const raw = $(name).value.trim();
      if (raw === '') continue;
      const v = Number(raw);
      if (Number.isFinite(v)) out[name] = v;
    }
    return out;
  }

  const headers = () => ({ 'content-type': 'application/json', ...(apiKey ? { authorization: `Bearer ${apiKey}` } : {}) });

  // ---- the served model and device; a 401 asks for the API key
  async function loadModel() {
    let res;
    try {
      res = await fetch('/v1/models', { headers: headers() });
    } catch {
      $('model-name').textContent = 'server unreachable';
      return;
    }
    if (res.status === 401) {
      $('key-form').hidden = false;
      $('key-error').hidden = !apiKey;
      $('model-name').textContent = 'API key needed';
      $('api-key').focus();
      return;
    }
    $('key-form').hidden = true;
    let model;
    try {
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
      model = (await res.json()).data?.[0];
    } catch (e) {
      $('model-name').textContent = `models: ${e.message}`;  // e.g. 503 while the server shuts down
      return;
    }
    modelId = model?.id ?? null;
    $('model-name').textContent = modelId ?? 'no model';
    $('model-device').textContent = model?.device ? `on ${model.device}` : '';
  }
  $('key-form').addEventListener('submit', (e) => {
    e.preventDefault();
    apiKey = $('api-key').value.trim();
    save(STORE.key, apiKey);
    loadModel();
  });

  // ---- rendering
  function renderConversations() {
    const list = $('conversations');
    list.replaceChildren();
    for (const c of [...conversations].sort((a, b) => b.updated - a.updated)) {
      const li = document.createElement('li');
      li.classList.toggle('current', c.id === current);
      const open = document.createElement('button');
      open.type = 'button';
      open.className = 'open';
      open.textContent = c.title || 'New chat';
      open.title = c.title || '';
      open.addEventListener('click', () => {
        current = c.id;
        persist();
        render();
        $('app').classList.remove('sidebar-open');
      });
      const del = document.createElement('button');
      del.type = 'button';
      del.className = 'delete';
      del.textContent = '×';
      del.setAttribute('aria-label', `Delete ${c.title || 'chat'}`);
      del.addEventListener('click', () => {
        if (streaming?.conversation === c) streaming.controller.abort();
        conversations = conversations.filter((x) => x !== c);
        if (current === c.id) current = null;
        persist();
        render();
      });
      li.append(open, del);
      list.append(li);
    }
  }

  function figures(stats) {
    const parts = [];
    if (stats.ttftMs !== undefined) parts.push(`first token ${Math.round(stats.ttftMs)} ms`);
    if (stats.tokensPerSecond !== undefined) parts.push(`${stats.tokensPerSecond.toFixed(1)} tokens/s`);
    if (stats.completionTokens !== undefined) parts.push(`${stats.completionTokens} tokens`);
    if (stats.cachedTokens !== undefined) parts.push(`${stats.cachedTokens} of ${stats.promptTokens} prompt tokens cached`);
    if (stats.finish) parts.push(stats.finish);
    return parts.join(' · ');
  }

  function renderMessage(m, isLast) {
    const div = document.createElement('div');
    div.className = `message ${m.role}`;
    const body = document.createElement('div');
    body.className = 'body';
    if (m.role === 'assistant') body.append(Markdown.render(m.content));
    else body.textContent = m.content;
    div.append(body);
    const meta = document.createElement('div');
    meta.className = 'meta';
    if (m.error) {
      const e = document.createElement('span');
      e.className = 'error';
      e.textContent = m.error;
      meta.append(e);
    }
    if (m.stats) {
      const s = document.createElement('span');
      s.className = 'figures';
      s.textContent = figures(m.stats);
      meta.append(s);
    }
    if (isLast && !streaming) {
      const b = document.createElement('button');
      b.type = 'button';
      if (m.role === 'assistant') {
        b.className = 'regenerate';
        b.textContent = 'Regenerate';
        b.addEventListener('click', regenerate);
      } else {
        b.className = 'edit';
        b.textContent = 'Edit';
        b.addEventListener('click', editLast);
      }
      meta.append(b);
    }
    if (meta.childNodes.length) div.append(meta);
    return div;
  }

  function renderMessages() {
    const box = $('messages');
    const c = conversation();
    const ms = c ? c.messages : [];
    box.replaceChildren();
    ms.forEach((m, i) => {
      // The last turn's buttons: Edit on the last user message, Regenerate on the reply after it.
      const lastUser = m.role === 'user' && ms.slice(i + 1).every((x) => x.role !== 'user');
      const div = renderMessage(m, i === ms.length - 1 || lastUser);
      if (streaming && streaming.message === m) div.classList.add('streaming');
      box.append(div);
    });
    box.scrollTop = box.scrollHeight;
  }

  function render() {
    renderConversations();
    renderMessages();
    $('send').hidden = !!streaming;
    $('stop').hidden = !streaming;
  }

  // Re-renders the streaming reply alone (every token: cheap, and the
  // Markdown is parsed afresh so half-written code blocks close correctly).
  function renderStreaming() {
    const box = $('messages');
    const last = box.lastElementChild;
    if (!last || !streaming) return;
    const body = last.querySelector('.body');
    body.replaceChildren(Markdown.render(streaming.message.content));
    const nearBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 80;
    if (nearBottom) box.scrollTop = box.scrollHeight;
  }

  // ---- talking to the server
  function requestMessages(c) {
    const out = [];
    const system = $('system').value.trim();
    if (system) out.push({ role: 'system', content: system });
    for (const m of c.messages) if (m !== streaming?.message) out.push({ role: m.role, content: m.content });
    return out;
  }

  // Yields the parsed `data:` payloads of an SSE stream until [DONE].
  async function* events(body) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      let end;
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        for (const line of block.split('\n')) {
          if (!line.startsWith('data:')) continue;
          const data = line.slice(5).trim();
          if (data === '[DONE]') return;
          yield JSON.parse(data);
        }
      }
    }
  }

  async function complete(c) {
    if (!modelId) await loadModel();
    const message = { role: 'assistant', content: '', stats: {} };
    const controller = new AbortController();
    const body = {
      model: modelId ?? undefined,
      messages: requestMessages(c),
      stream: true,
      stream_options: { include_usage: true },
      ...samplingFields(),
    };
    c.messages.push(message);
    streaming = { controller, conversation: c, message };
    render();
    const started = performance.now();
    let first = null, last = null, chunks = 0;
    try {
      const res = await fetch('/v1/chat/completions', { method: 'POST', headers: headers(), body: JSON.stringify(body), signal: controller.signal });
      if (!res.ok) {
        let text = `HTTP ${res.status}`;
        try {
          text += `: ${(await res.json()).error?.message ?? ''}`;
        } catch {}
        if (res.status === 401) loadModel();
        throw new Error(text);
      }
      for await (const event of events(res.body)) {
        if (event.error) throw new Error(event.error.message ?? 'the server reported an error');
        const choice = event.choices?.[0];
        const piece = choice?.delta?.content;
        if (piece) {
          const now = performance.now();
          first ??= now;
          last = now;
          ++chunks;
          message.content += piece;
          message.stats.ttftMs = first - started;
          renderStreaming();
        }
        if (choice?.finish_reason) message.stats.finish = choice.finish_reason === 'length' ? 'stopped at max tokens' : '';
        if (event.usage) {
          message.stats.completionTokens = event.usage.completion_tokens;
          message.stats.promptTokens = event.usage.prompt_tokens;
          message.stats.cachedTokens = event.usage.prompt_tokens_details?.cached_tokens ?? 0;
        }
      }
    } catch (e) {
      if (controller.signal.aborted) message.stats.finish = 'stopped';
      else message.error = String(e.message ?? e);
    } finally {
      // Decode speed: the tokens after the first over the time they took.
      const tokens = message.stats.completionTokens ?? chunks;
      if (first !== null && last > first && tokens > 1) message.stats.tokensPerSecond = ((tokens - 1) * 1000) / (last - first);
      c.updated = Date.now();
      streaming = null;
      persist();
      render();
    }
  }

  function send(text) {
    if (streaming || !text.trim()) return;
    let c = conversation();
    if (!c) {
      c = { id: crypto.randomUUID ? crypto.randomUUID() : String(Date.now()) + Math.random(), title: '', messages: [], updated: Date.now() };
      conversations.push(c);
      current = c.id;
    }
    if (!c.title) c.title = text.trim().slice(0, 60);
    c.messages.push({ role: 'user', content: text });
    persist();
    complete(c);
  }

  function regenerate() {
    const c = conversation();
    if (streaming || !c || c.messages.at(-1)?.role !== 'assistant') return;
    c.messages.pop();
    complete(c);
  }

  // Puts the last user message back in the composer, dropping it and its reply.
  function editLast() {
    const c = conversation();
    if (streaming || !c) return;
    const i = c.messages.findLastIndex((m) => m.role === 'user');
    if (i < 0) return;
    $('prompt').value = c.messages[i].content;
    c.messages.splice(i);
    persist();
    render();
    $('prompt').focus();
  }

  $('composer').addEventListener('submit', (e) => {
    e.preventDefault();
    const text = $('prompt').value;
    if (streaming || !text.trim()) return;
    $('prompt').value = '';
    send(text);
  });
  $('prompt').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      $('composer').requestSubmit();
    }
  });
  $('stop').addEventListener('click', () => streaming?.controller.abort());
  $('new-chat').addEventListener('click', () => {
    current = null;
    persist();
    render();
    $('app').classList.remove('sidebar-open');
    $('prompt').focus();
  });
  $('toggle-sidebar').addEventListener('click', () => $('app').classList.toggle('sidebar-open'));
  // On a phone the conversations cover the chat; a tap beside them closes them.
  document.querySelector('main').addEventListener('click', (e) => {
    if (!e.target.closest('#toggle-sidebar')) $('app').classList.remove('sidebar-open');
  });

  render();
  loadModel();
})();
