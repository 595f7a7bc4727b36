// Hugging Face tokenizers' side of the tokenizer benchmark: load time and
// single-thread encoding throughput on a text file, with the same protocol as
// bench/tokenizer_bench.cc (one cold pass, then the best of three).
//
//   node bench.js TOKENIZER_JSON TEXT_FILE [IDS_OUT_JSON]
'use strict';
const fs = require('fs');
const { Tokenizer } = require('@anush008/tokenizers');

async function main() {
  const [file, textFile, idsOut] = process.argv.slice(2);
  let t0 = process.hrtime.bigint();
  const tok = Tokenizer.fromFile(file);
  const loadS = Number(process.hrtime.bigint() - t0) / 1e9;
  const text = fs.readFileSync(textFile, 'utf8');
  const bytes = Buffer.byteLength(text, 'utf8');
  const encode = async () => {
    const t = process.hrtime.bigint();
    const ids = (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
    return [Number(process.hrtime.bigint() - t) / 1e9, ids];
  };
  let [coldS, ids] = await encode();
  let bestS = coldS;
  for (let i = 0; i < 3; ++i) bestS = Math.min(bestS, (await encode())[0]);
  if (idsOut) fs.writeFileSync(idsOut, JSON.stringify(Array.from(ids)));
  console.log(JSON.stringify({
    tokenizer: file, load_s: loadS, text_bytes: bytes, tokens: ids.length, encode_cold_s: coldS,
    encode_best_s: bestS, mb_per_s_cold: bytes / 1e6 / coldS, mb_per_s: bytes / 1e6 / bestS,
  }));
}

main().catch((e) => { console.error(e); process.exit(1); });
