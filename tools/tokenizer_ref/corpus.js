// The strings rowlm's tokenizer is checked on: hand-picked cases for each
// hard area, plus deterministic random mixes of them.
'use strict';

const handPicked = [
  // empty and whitespace
  '', ' ', '  ', '   ', '\t', '\n', '\r\n', '\n\n', '\n\n\n\n', ' \n ', '\t\t\tx', 'a  b', 'a   b    c',
  ' leading', 'trailing ', '  both  ', ' '.repeat(17), ' '.repeat(40) + 'x', 'x' + ' '.repeat(33),
  '\t \t \n\r\n  \u000b\u000c', 'line1\nline2\r\nline3\rline4', 'a\n\n\nb', 'tab\tseparated\tvalues\n1\t2\t3',
  '\u00a0non-breaking\u00a0space', 'ideographic\u3000space', 'em\u2003space\u2009thin', 'nel\u0085next',
  'zero\u200bwidth', 'line\u2028sep\u2029para',
  // English, contractions, case
  'Hello world', 'Hello, world!', 'The quick brown fox jumps over the lazy dog.',
  "I'm sure you'll see they've done it, haven't they? We'd know.", "DON'T SHOUT, IT'S LOUD", "she'S o'clock 'tis",
  'CamelCaseIdentifier and snake_case_identifier', 'e-mail: someone@example.com, url: https://example.com/a?b=c&d=e#f',
  'Mr. Smith paid $1,234.56 on 2024-03-15 at 10:45pm (UTC+1).', '3.14159265358979323846', '1234567890',
  '12 345 678', '00000000000000000000', 'v1.2.3-rc.4+build.5', '¼ ½ ¾ ² ³ ⅕', '١٢٣ ۴۵۶ ७८९ ๑๒๓',
  'İstanbul ıi ſtraße Kelvin: \u212a', 'ΣΊΣΥΦΟΣ σίσυφος', 'ß ẞ ﬁ ﬂ ﬀ', 'Ǆ ǅ ǆ', 'Ⅻ ⓐⓑⓒ',
  // code
  'def f(x):\n    return x ** 2  # square\n', 'for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}',
  '#include <vector>\nstd::vector<int> v{1, 2, 3};', '{"key": "value", "n": [1, 2.5, -3e10, null, true]}',
  '<html><body><table><tr><td>cell</td></tr></table></body></html>', 'SELECT * FROM t WHERE a >= 10 AND b <> \'x\';',
  'if [ -f "$HOME/.bashrc" ]; then . ~/.bashrc; fi', 'x=>x*2; a?.b ?? c; `template ${literal}`',
  '    indented four\n        eight\n\t\ttabs', 'fn main() { println!("{}", 1 + 1); }', '!!!???...,,,;;;:::',
  '=====\n-----\n*****', '/* comment */ // another', '0x1F 0b1010 0o17 1e-9', '```python\nprint("hi")\n```',
  // emoji
  '👍', '👍🏽', '👍🏿👍🏻', '👨‍👩‍👧‍👦', '👩🏾‍💻', '🏳️‍🌈', '❤️', '❤️‍🔥', '🇯🇵🇫🇷🇺🇸', '1️⃣#️⃣', '🧑‍🤝‍🧑',
  'I ❤️ NY 🗽 and 🍕!', '😀😃😄😁😆😅🤣😂', '🫠🫡🫶 new emoji', '⌚⌛⏩ ☀☁☂',
  // CJK
  '你好，世界！', '我们今天去公园散步吧。', '東京都渋谷区', 'こんにちは、世界。カタカナとひらがな。', '한국어 텍스트입니다.',
  '中文English混合mixed文本', '𠮷野家 𩸽', '「引用」『二重』【括弧】',
  // right-to-left
  'مرحبا بالعالم', 'اَلْعَرَبِيَّةُ', 'שלום עולם', 'עִבְרִית', 'Hello مرحبا שלום world', '123 مرحبا 456',
  'فارسی: سلام دنیا', '\u202eRTL override\u202c text',
  // combining marks and other scripts
  'e\u0301 vs \u00e9', 'a\u0300\u0301\u0302\u0303\u0304', 'Z\u0335\u0321\u0322a\u0336\u0317l\u0334\u031cg\u0338o\u0337',
  'Tiếng Việt có dấu', 'नमस्ते दुनिया', 'ภาษาไทยไม่มีช่องว่าง', 'ಕನ್ನಡ தமிழ் తెలుగు', 'Ελληνικά Русский язык',
  'ქართული Հայերեն', 'ᚠᚢᚦᚨᚱᚲ', 'Å\u030a Å', '\u1100\u1161\u11a8 한',
  // code points that need byte fallback or are rare
  '\u0000', '\u0001\u0002\u0003', '\u007f', '\ufffd', '\ufeffBOM', '\ue000\uf8ff', '\u{f0000}\u{10ffff}',
  '𐀀𐀁 Linear B', '𝄞 music', '𓀀𓀁 hieroglyphs', '\u{1d400}\u{1d401} math bold', 'a\u0000b', '\u{e0001}\u{e0041}tags',
  '\u2581 lower block', '\u2581\u2581\u2581', 'Ġ Ċ ĉ', '<0x41>', '<0xZZ>', '<0x+A>',
  // special-token strings
  '<bos>', '<eos>', '<bos>Hello', 'Hello<eos>', '<bos><bos>', ' <bos> ', '<<bos>>', '<bo', 'bos>', '<BOS>',
  '<start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\n', '<unused0><unused99>', '<mask> masked',
  '<|begin_of_text|>Hello<|end_of_text|>', '<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>',
  '<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>', '<think>\nhmm\n</think>\n\nanswer',
  '<|endoftext|>', '<|im_start|><|im_start|>', 'text<|im_end|>text', '<table><tr>', '\n\n<td>x</td>\t\t',
  '<image_soft_token>', '[multimodal]', '<|reserved_special_token_5|>', '<tool_call>{"a":1}</tool_call>',
  // very long words
  'a'.repeat(300), 'supercalifragilisticexpialidocious'.repeat(12), 'ab'.repeat(400), '9'.repeat(257),
  '!'.repeat(100), '漢'.repeat(200), '😀'.repeat(50), 'xyzzy'.repeat(60) + ' end', '\u2581'.repeat(64),
  'Pneumonoultramicroscopicsilicovolcanoconiosis', 'Donaudampfschifffahrtselektrizitätenhauptbetriebswerkbauunterbeamtengesellschaft',
];

// A small deterministic generator (mulberry32) for the random mixes.
function rng(seed) {
  return () => {
    seed |= 0;
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const pools = [
  'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ', '0123456789', '  \t\n\r', ".,;:!?'\"()[]{}<>-_=+*/\\|@#$%^&~`",
  'éèêëàâäôöûüçñßøåæœ', '你好世界中文字符漢', 'こんにちはカタカナ', 'مرحباשלום', '\u0301\u0308\u0327\u200d\ufe0f',
  '👍🏽😀❤🇯🇵👨', '\u2581', '\u{10ffff}\u{f0000}\ue000\u0000\u0007',
];
const words = ['<bos>', '<eos>', '<|im_end|>', '<|begin_of_text|>', '<think>', ' the', ' and', "'s", "'ll", '\n\n',
  '<start_of_turn>', '<td>', '    ', 'http://', '1000', 'ing'];

function randomMixes(count, seed) {
  const r = rng(seed);
  const out = [];
  for (let i = 0; i < count; ++i) {
    const len = 1 + Math.floor(r() * 60);
    let s = '';
    for (let k = 0; k < len; ++k) {
      if (r() < 0.1) {
        s += words[Math.floor(r() * words.length)];
        continue;
      }
      const pool = Array.from(pools[Math.floor(r() * pools.length)]);
      s += pool[Math.floor(r() * pool.length)];
    }
    out.push(s);
  }
  return out;
}

module.exports = { corpus: () => handPicked.concat(randomMixes(80, 20240601)) };
