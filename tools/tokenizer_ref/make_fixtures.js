// Writes tests/tokenizers/fixtures/*.json: for every configuration in
// variants.js and every string in corpus.js, the ids Hugging Face tokenizers
// (the Rust library, through @anush008/tokenizers) gives with and without
// special tokens, and its decodings of those ids.
//
//   cd tools/tokenizer_ref && npm ci && node make_fixtures.js
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const { execFileSync } = require('child_process');
const { Tokenizer } = require('@anush008/tokenizers');
const { corpus } = require('./corpus.js');
const variants = require('./variants.js');

const root = path.resolve(__dirname, '../..');
const cache = path.join(root, 'tests/.cache/tokenizers');
const outDir = path.join(root, 'tests/tokenizers/fixtures');

async function main() {
  execFileSync(path.join(root, 'tests/tokenizers/fetch.sh'), { stdio: 'inherit' });
  fs.mkdirSync(outDir, { recursive: true });
  const texts = corpus();
  fs.writeFileSync(path.join(outDir, 'corpus.json'), JSON.stringify(texts, null, 0) + '\n');
  const bases = {};
  for (const v of variants) {
    const basePath = path.join(cache, v.base, 'tokenizer.json');
    bases[v.base] = bases[v.base] || JSON.parse(fs.readFileSync(basePath, 'utf8'));
    const overrides = v.overrides ? v.overrides(bases[v.base]) : null;
    let file = basePath;
    if (overrides) {
      const doc = JSON.parse(JSON.stringify(bases[v.base]));
      for (const [k, val] of Object.entries(overrides)) {
        if (k === 'model') Object.assign(doc.model, val);
        else doc[k] = val;
      }
      file = path.join(os.tmpdir(), `rowlm-${v.name}.json`);
      fs.writeFileSync(file, JSON.stringify(doc));
    }
    const tok = Tokenizer.fromFile(file);
    const cases = [];
    for (const text of texts) {
      const ids = Array.from((await tok.encode(text, null, { addSpecialTokens: true })).getIds());
      const plain = Array.from((await tok.encode(text, null, { addSpecialTokens: false })).getIds());
      cases.push({
        ids, plain,
        decoded: await tok.decode(ids, false),
        skipped: await tok.decode(ids, true),
      });
    }
    const fixture = { name: v.name, base: v.base, reference: '@anush008/tokenizers@0.6.0', overrides, cases };
    fs.writeFileSync(path.join(outDir, `${v.name}.json`), JSON.stringify(fixture) + '\n');
    console.log(`${v.name}: ${cases.length} cases`);
  }
}

main().catch((e) => { console.error(e); process.exit(1); });
