// Markdown for model replies, built as DOM nodes. Model text only ever
// becomes text nodes (createTextNode / textContent), never markup: nothing
// it contains can run as HTML or script, whatever the parser below gets wrong.
// Covers what chat models write: fenced code blocks (also unterminated, while
// a reply streams), headings, lists, block quotes, paragraphs, inline code,
// bold, italics and http(s) links.
'use strict';

const Markdown = (() => {
  function el(tag, className) {
    const e = document.createElement(tag);
    if (className) e.className = className;
    return e;
  }

  // Inline spans: `code`, **bold**, *italic* / _italic_, [text](http...).
  const INLINE = /`([^`\n]+)`|\*\*(?=\S)([\s\S]+?)\*\*|(?<![\w*])\*(?=\S)([^*\n]+?)\*(?!\w)|(?<!\w)_(?=\S)([^_\n]+?)_(?!\w)|\[([^\]\n]+)\]\((https?:\/\/[^\s)]+)\)/g;

  function inline(parent, text) {
    let last = 0;
    for (const m of text.matchAll(INLINE)) {
      if (m.index > last) parent.append(text.slice(last, m.index));
      if (m[1] !== undefined) {
        const c = el('code');
        c.textContent = m[1];
        parent.append(c);
      } else if (m[2] !== undefined) {
        const s = el('strong');
        inline(s, m[2]);
        parent.append(s);
      } else if (m[3] !== undefined || m[4] !== undefined) {
        const i = el('em');
        inline(i, m[3] ?? m[4]);
        parent.append(i);
      } else {
        const a = el('a');
        a.href = m[6];  // the pattern admits http(s) URLs only: no javascript:
        a.rel = 'noopener noreferrer nofollow';
        a.target = '_blank';
        a.textContent = m[5];
        parent.append(a);
      }
      last = m.index + m[0].length;
    }
    if (last < text.length) parent.append(text.slice(last));
  }

  // Lines of a paragraph joined by <br>, inline spans within.
  function lines(parent, ls) {
    ls.forEach((l, i) => {
      if (i) parent.append(el('br'));
      inline(parent, l);
    });
  }

  const FENCE = /^\s*(```|~~~)\s*([\w+#.-]*)\s*$/;
  const HEADING = /^(#{1,6})\s+(.*)$/;
  const BULLET = /^\s*[-*+]\s+(.*)$/;
  const NUMBERED = /^\s*(\d{1,9})[.)]\s+(.*)$/;
  const QUOTE = /^\s*>\s?(.*)$/;

  // Returns a DocumentFragment holding `text` rendered.
  function render(text) {
    const out = document.createDocumentFragment();
    const ls = text.replace(/\r\n?/g, '\n').split('\n');
    let i = 0;
    while (i < ls.length) {
      const line = ls[i];
      let m;
      if ((m = line.match(FENCE))) {
        const body = [];
        for (++i; i < ls.length && !(ls[i].trim() === m[1]); ++i) body.push(ls[i]);
        ++i;  // the closing fence (or the end of a reply still streaming)
        const pre = el('pre');
        if (m[2]) pre.dataset.lang = m[2];
        const code = el('code');
        code.textContent = body.join('\n');
        pre.append(code);
        out.append(pre);
      } else if ((m = line.match(HEADING))) {
        const h = el('h' + Math.min(6, m[1].length + 2));  // h3..h6: replies sit under the page's own headings
        inline(h, m[2]);
        out.append(h);
        ++i;
      } else if (BULLET.test(line) || NUMBERED.test(line)) {
        const ordered = !BULLET.test(line);
        const pattern = ordered ? NUMBERED : BULLET;
        const list = el(ordered ? 'ol' : 'ul');
        if (ordered) list.start = Number(line.match(NUMBERED)[1]);
        for (; i < ls.length && (m = ls[i].match(pattern)); ++i) {
          const li = el('li');
          inline(li, ordered ? m[2] : m[1]);
          list.append(li);
        }
        out.append(list);
      } else if (QUOTE.test(line)) {
        const q = el('blockquote');
        const body = [];
        for (; i < ls.length && (m = ls[i].match(QUOTE)); ++i) body.push(m[1]);
        q.append(render(body.join('\n')));
        out.append(q);
      } else if (line.trim() === '') {
        ++i;
      } else {
        const p = el('p');
        const body = [];
        for (; i < ls.length && ls[i].trim() !== '' && !FENCE.test(ls[i]) && !HEADING.test(ls[i]) &&
               !BULLET.test(ls[i]) && !NUMBERED.test(ls[i]) && !QUOTE.test(ls[i]); ++i)
          body.push(ls[i]);
        lines(p, body);
        out.append(p);
      }
    }
    return out;
  }

  return { render };
})();
