// Tokenizer configurations the fixtures cover: four real tokenizer.json
// files as shipped, and variants of them whose pipeline parts are replaced
// (through the same "overrides" rowlm's loader accepts) so that every
// supported normalizer, pre-tokenizer, post-processor, decoder and
// added-token option is compared with the reference somewhere.
'use strict';

const S = (s) => ({ String: s });
const R = (r) => ({ Regex: r });
const M = '\u2581';

function firstAddedTokens(base, count, edit) {
  return base.added_tokens.slice(0, count).map((t) => ({ ...t, ...(edit[t.content] || {}) }));
}

module.exports = [
  { name: 'gemma3', base: 'gemma3', overrides: null },
  { name: 'llama3', base: 'llama3', overrides: null },
  { name: 'qwen3', base: 'qwen3', overrides: null },
  { name: 'llama2', base: 'llama2', overrides: null },
  {
    name: 'gemma3_metaspace_first', base: 'gemma3',
    overrides: () => ({
      normalizer: null,
      pre_tokenizer: { type: 'Metaspace', replacement: M, prepend_scheme: 'first', split: true },
      decoder: { type: 'Metaspace', replacement: M, prepend_scheme: 'first', split: true },
      post_processor: {
        type: 'TemplateProcessing',
        single: [{ SpecialToken: { id: '<bos>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } },
          { SpecialToken: { id: '<eos>', type_id: 0 } }],
        pair: [{ Sequence: { id: 'A', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } }],
        special_tokens: { '<bos>': { id: '<bos>', ids: [2], tokens: ['<bos>'] },
          '<eos>': { id: '<eos>', ids: [1], tokens: ['<eos>'] } },
      },
    }),
  },
  {
    name: 'gemma3_metaspace_always', base: 'gemma3',
    overrides: () => ({
      normalizer: { type: 'Sequence', normalizers: [{ type: 'Strip', strip_left: true, strip_right: false }] },
      pre_tokenizer: { type: 'Metaspace', replacement: M, prepend_scheme: 'always', split: false },
      decoder: { type: 'Sequence', decoders: [
        { type: 'Metaspace', replacement: M, prepend_scheme: 'always', split: false }, { type: 'ByteFallback' }] },
    }),
  },
  {
    name: 'gemma3_normalizers', base: 'gemma3',
    overrides: (base) => ({
      normalizer: { type: 'Sequence', normalizers: [
        { type: 'Strip', strip_left: true, strip_right: true }, { type: 'NFKC' }, { type: 'Lowercase' },
        { type: 'Replace', pattern: R('\\s+'), content: ' ' }, { type: 'Prepend', prepend: M },
        { type: 'Replace', pattern: S(' '), content: M }] },
      pre_tokenizer: { type: 'Sequence', pretokenizers: [
        { type: 'Digits', individual_digits: true }, { type: 'Split', pattern: S(M), behavior: 'MergedWithNext', invert: false }] },
      decoder: { type: 'Sequence', decoders: [
        { type: 'Replace', pattern: S(M), content: ' ' }, { type: 'ByteFallback' }, { type: 'Fuse' },
        { type: 'Strip', content: ' ', start: 1, stop: 0 }] },
      added_tokens: firstAddedTokens(base, 108, {
        '<start_of_turn>': { lstrip: true, rstrip: true },
        '<end_of_turn>': { single_word: true },
        '<mask>': { normalized: true, special: false },
        '<table>': { normalized: true, single_word: true },
        '\n\n': { rstrip: true },
      }),
    }),
  },
  {
    name: 'qwen3_splits', base: 'qwen3',
    overrides: (base) => ({
      normalizer: { type: 'Sequence', normalizers: [{ type: 'NFD' }, { type: 'Lowercase' }] },
      pre_tokenizer: { type: 'Sequence', pretokenizers: [
        { type: 'Split', pattern: R('\\s+'), behavior: 'MergedWithPrevious', invert: false },
        { type: 'Split', pattern: R('[0-9]'), behavior: 'Contiguous', invert: false },
        { type: 'Split', pattern: S('e'), behavior: 'Removed', invert: false },
        { type: 'Split', pattern: R('\\p{P}+'), behavior: 'MergedWithNext', invert: true },
        { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true }] },
      decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
      added_tokens: base.added_tokens.map((t) => ({
        ...t,
        ...({ '<|im_start|>': { lstrip: true }, '<|im_end|>': { rstrip: true }, '<think>': { single_word: true },
          '</think>': { normalized: true } }[t.content] || {}),
      })).concat([{ id: 14990, content: 'hello', single_word: false, lstrip: false, rstrip: false,
        normalized: true, special: false }]),
    }),
  },
  {
    name: 'llama3_whitespace', base: 'llama3',
    overrides: () => ({
      normalizer: { type: 'Sequence', normalizers: [{ type: 'NFKC' }, { type: 'Strip', strip_left: false, strip_right: true }] },
      pre_tokenizer: { type: 'Sequence', pretokenizers: [
        { type: 'Whitespace' }, { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: false }] },
      post_processor: { type: 'Sequence', processors: [
        { type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true },
        { type: 'TemplateProcessing',
          single: [{ SpecialToken: { id: '<|begin_of_text|>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } },
            { SpecialToken: { id: '<|end_of_text|>', type_id: 0 } }],
          pair: [{ Sequence: { id: 'A', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } }],
          special_tokens: {
            '<|begin_of_text|>': { id: '<|begin_of_text|>', ids: [128000], tokens: ['<|begin_of_text|>'] },
            '<|end_of_text|>': { id: '<|end_of_text|>', ids: [128001], tokens: ['<|end_of_text|>'] } } }] },
    }),
  },
  {
    name: 'llama3_wsplit_digits', base: 'llama3',
    overrides: () => ({
      model: { ignore_merges: false },
      normalizer: { type: 'NFKD' },
      pre_tokenizer: { type: 'Sequence', pretokenizers: [
        { type: 'WhitespaceSplit' }, { type: 'Digits', individual_digits: false },
        { type: 'Split', pattern: R("(?i:'s|'t)|[a-z]+"), behavior: 'Isolated', invert: true },
        { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true }] },
    }),
  },
];
