#!/usr/bin/env python3
"""Trains the bundled models' tokenizer with HF `tokenizers`, in Gemma's shape.

The result has the same pipeline as Gemma 3/4's tokenizer.json: normalizer Replace(" " -> "▁"),
pre-tokenizer Split(" ", MergedWithPrevious), a BPE model with byte_fallback and fuse_unk,
a TemplateProcessing post-processor that writes <bos>, and the decoder Replace("▁" -> " ") +
ByteFallback + Fuse. Gemma 4's special tokens sit at their usual ids (<pad> 0, <eos> 1, <bos> 2,
<unk> 3, <mask> 4, tool markers 46-52, <|think|> 98, channel markers 100/101, <|turn> 105,
<turn|> 106), "\n" is 107, the 256 byte-fallback pieces follow, then the learned pieces.

Training splits words at "▁" (kept with the following word) and isolates "\n", so no learned
merge crosses a word boundary; applying the merges to a whole unsplit string (what Gemma's
pipeline does) therefore gives the same pieces. The script checks that on held-out text.

    python3 tools/train_tiny/train_tokenizer.py --corpus build/train_tiny/corpus --out DIR
"""
import argparse
import json
import os

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

VOCAB_SIZE = 8192
SPECIAL = {0: "<pad>", 1: "<eos>", 2: "<bos>", 3: "<unk>", 4: "<mask>",
           46: "<|tool>", 47: "<tool|>", 48: "<|tool_call>", 49: "<tool_call|>",
           50: "<|tool_response>", 51: "<tool_response|>", 52: '<|"|>', 98: "<|think|>",
           100: "<|channel>", 101: "<channel|>", 105: "<|turn>", 106: "<turn|>"}
NEWLINE_ID = 107
# Gemma 4's plain-text turn format (docs/design/families.md, chat formats), without tools or thinking.
CHAT_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<|turn>"
                 "{{ 'model' if m['role'] == 'assistant' else m['role'] }}\n"
                 "{{ m['content'] | trim }}<turn|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|turn>model\n{% endif %}")
BYTES_START = 108


def documents(path):
    with open(path) as f:
        for line in f:
            yield json.loads(line)["text"]


def strip_specials(text):
    for tok in SPECIAL.values():
        text = text.replace(tok, " ")
    return text


def gemma_shaped(vocab, merges):
    added = []
    for i in range(BYTES_START - 1):
        content = SPECIAL.get(i, f"<unused{i}>")
        added.append({"id": i, "content": content, "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": i in SPECIAL})
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
        "pre_tokenizer": {"type": "Split", "pattern": {"String": " "},
                          "behavior": "MergedWithPrevious", "invert": False},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<bos>", "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<bos>", "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "<bos>", "type_id": 1}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<bos>": {"id": "<bos>", "ids": [2], "tokens": ["<bos>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>",
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    trainer_tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    trainer_tok.normalizer = normalizers.Replace(" ", "\u2581")
    trainer_tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split("\u2581", behavior="merged_with_next"),
        pre_tokenizers.Split("\n", behavior="isolated")])
    learned_budget = VOCAB_SIZE - BYTES_START - 256
    trainer = trainers.BpeTrainer(vocab_size=learned_budget + 8, limit_alphabet=160,
                                  special_tokens=[], show_progress=False)
    trainer_tok.train_from_iterator((strip_specials(t) for t in documents(
        os.path.join(args.corpus, "train.jsonl"))), trainer=trainer)

    trained = json.loads(trainer_tok.to_str())["model"]
    pieces = sorted(trained["vocab"].items(), key=lambda kv: kv[1])
    vocab = {tok: i for i, tok in SPECIAL.items()}
    for i in range(BYTES_START - 1):
        if i not in SPECIAL:
            vocab[f"<unused{i}>"] = i
    vocab["\n"] = NEWLINE_ID
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = BYTES_START + b
    for tok, _ in pieces:
        if len(vocab) == VOCAB_SIZE:
            break
        if tok not in vocab:
            vocab[tok] = len(vocab)
    merges = [m if isinstance(m, list) else m.split(" ") for m in trained["merges"]]
    merges = [m for m in merges if m[0] + m[1] in vocab and m[0] in vocab and m[1] in vocab]
    assert sorted(vocab.values()) == list(range(VOCAB_SIZE))

    final = gemma_shaped(vocab, merges)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "tokenizer.json")
    with open(path, "w") as f:
        json.dump(final, f, ensure_ascii=False)
    tok = Tokenizer.from_file(path)
    with open(os.path.join(args.out, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "GemmaTokenizer", "bos_token": "<bos>", "eos_token": "<eos>",
                   "unk_token": "<unk>", "pad_token": "<pad>", "add_bos_token": True,
                   "add_eos_token": False, "model_max_length": 4096, "padding_side": "left",
                   "chat_template": CHAT_TEMPLATE}, f, indent=1)

    # The Gemma-shaped pipeline (no word splitting) must cut held-out text exactly as the same
    # merges do with the training-time word splitting: no merge crosses a word boundary.
    split_words = dict(final, pre_tokenizer={"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"String": "\u2581"}, "behavior": "MergedWithNext", "invert": False},
        {"type": "Split", "pattern": {"String": "\n"}, "behavior": "Isolated", "invert": False}]})
    check = Tokenizer.from_str(json.dumps(split_words))
    checked = 0
    for text in documents(os.path.join(args.corpus, "heldout.jsonl")):
        text = strip_specials(text)
        a = tok.encode(text, add_special_tokens=False).ids
        b = check.encode(text, add_special_tokens=False).ids
        assert a == b, (text[:200], a[:40], b[:40])
        checked += 1
    sample = "<bos><|turn>user\nHello, world!<turn|>\n"
    print(f"tokenizer: vocab={tok.get_vocab_size()} merges={len(merges)} "
          f"checked_docs={checked} sample={tok.encode(sample, add_special_tokens=False).ids}")


if __name__ == "__main__":
    main()
