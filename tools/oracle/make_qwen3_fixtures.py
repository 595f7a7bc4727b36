#!/usr/bin/env python3
"""Reference fixtures for rowlm's Qwen 3 (dense) forward pass, from Hugging Face transformers.

Builds tiny random Qwen3ForCausalLM models covering the family's features (q/k RMS norms, GQA
and MQA, head_dim independent of hidden/heads, tied and untied heads, RoPE theta from the
config, attention biases, sliding-window layers, bf16 weights), saves each in Hugging Face
format, and records fp32 logits computed by transformers' eager implementation:

  <out>/<case>/config.json, model.safetensors      the model, as save_pretrained writes it
  <out>/<case>/logits_a.npy, logits_b.npy          [T, vocab] prefill logits of two sequences
  <out>/<case>/reference.json                      ids, greedy continuation, versions

The `chat` case also has a small byte-level BPE tokenizer.json (ChatML special tokens) so that
every rowlm command, the server included, can run on it.

Every weight is random, norms included, so a wrong formula cannot hide. Sequences are longer
than three sliding windows. The `bf16` case stores bf16 weights; its reference is fp32
arithmetic on those same bf16-rounded weights.

Run where torch + transformers (>= 5.17) exist:
    python3 tools/oracle/make_qwen3_fixtures.py --out tests/fixtures/qwen3
"""
import argparse
import json
import os
import platform

import numpy as np
import torch
import transformers
from fixture_common import greedy, logits_of
from transformers import Qwen3Config, Qwen3ForCausalLM

COMMON = dict(
    vocab_size=128, hidden_size=64, intermediate_size=96, num_attention_heads=4,
    num_key_value_heads=2, head_dim=24, rms_norm_eps=1e-6, max_position_embeddings=256,
    tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
    bos_token_id=None, eos_token_id=1,
)

CASES = {
    # GQA 4/2 with head_dim 24 (hidden / heads would be 16), tied head, theta 1e6.
    "gqa_tied": dict(num_hidden_layers=3),
    # MQA, untied head, theta 10000.
    "mqa_untied": dict(num_hidden_layers=3, num_key_value_heads=1, head_dim=16, tie_word_embeddings=False,
                       rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
    # Sliding-window layers from layer 2 on (window 5), with q/k/v/o biases.
    "sliding_bias": dict(num_hidden_layers=4, use_sliding_window=True, sliding_window=5, max_window_layers=2,
                         attention_bias=True),
    # bf16 weights on the gqa_tied geometry.
    "bf16": dict(num_hidden_layers=3),
    # With a tokenizer: the CLI, batch and server tests run on it.
    "chat": dict(num_hidden_layers=2, vocab_size=288, eos_token_id=[286, 284]),
}

LEN_A, LEN_B = 20, 13          # > 3 windows of 5
PROMPT, GREEDY = 6, 24


def randomize(model, gen):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3 + 1.0)
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.08)


def byte_level_char(b):
    """The character byte-level BPE writes for byte b: printable Latin-1 bytes stand for
    themselves, the others are moved to 256 + their rank among the unprintable ones."""
    printable = [c for c in range(256) if 33 <= c <= 126 or 161 <= c <= 172 or 174 <= c <= 255]
    if b in printable:
        return chr(b)
    return chr(256 + [c for c in range(256) if c not in printable].index(b))


def write_tokenizer(d, vocab_size):
    """A byte-level BPE like Qwen's: 256 byte tokens, a few merges, ChatML specials."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    byte_chars = [byte_level_char(b) for b in range(256)]
    vocab = {c: i for i, c in enumerate(byte_chars)}
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    merges = [("t", "h"), ("th", "e"), ("Ġ", "the"), ("i", "n"), ("a", "n"), ("e", "r"), ("o", "n"),
              ("Ġ", "a"), ("e", "n"), ("r", "e"), ("Ġ", "t"), ("Ġ", "s"), ("a", "t"), ("o", "r"),
              ("Ġ", "w"), ("e", "s"), ("Ġ", "o"), ("i", "t"), ("Ġ", "c"), ("a", "l"), ("i", "s"),
              ("l", "l"), ("Ġ", "b"), ("Ġ", "f"), ("Ġ", "m"), ("Ġ", "p"), ("o", "u"), ("e", "d")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    # As in Qwen's tokenizer.json, the specials are added tokens after the BPE vocabulary:
    # <|endoftext|> 284, <|im_start|> 285, <|im_end|> 286.
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    assert tok.token_to_id("<|im_end|>") == 286, tok.token_to_id("<|im_end|>")
    assert tok.get_vocab_size() <= vocab_size, tok.get_vocab_size()
    tok.save(os.path.join(d, "tokenizer.json"))
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None}, f, indent=1)
    return tok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=4321)
    args = ap.parse_args()
    torch.set_num_threads(4)
    for case_index, (name, fields) in enumerate(CASES.items()):
        gen = torch.Generator().manual_seed(args.seed + case_index)
        cfg = Qwen3Config(**{**COMMON, **fields})
        model = Qwen3ForCausalLM._from_config(cfg, attn_implementation="eager").eval()
        randomize(model, gen)
        if name == "bf16":
            model = model.to(torch.bfloat16)
        d = os.path.join(args.out, name)
        os.makedirs(d, exist_ok=True)
        model.save_pretrained(d, safe_serialization=True)
        keep = {"config.json", "model.safetensors", "logits_a.npy", "logits_b.npy", "reference.json"}
        extra = {}
        if name == "chat":
            tok = write_tokenizer(d, cfg.vocab_size)
            keep |= {"tokenizer.json", "tokenizer_config.json"}
            text = "the cat sat on the mat"
            extra["tokenizer_sample"] = {"text": text, "ids": tok.encode(text).ids}
        ref = Qwen3ForCausalLM.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
        top = 284 if name == "chat" else cfg.vocab_size  # chat: ordinary tokens only, no specials
        ids_a = torch.randint(0, top, (LEN_A,), generator=gen).tolist()
        ids_b = torch.randint(0, top, (LEN_B,), generator=gen).tolist()
        np.save(os.path.join(d, "logits_a.npy"), logits_of(ref, ids_a).astype(np.float32))
        np.save(os.path.join(d, "logits_b.npy"), logits_of(ref, ids_b).astype(np.float32))
        cont, margin = greedy(ref, ids_a[:PROMPT], GREEDY)
        with open(os.path.join(d, "reference.json"), "w") as f:
            json.dump({
                "ids_a": ids_a, "ids_b": ids_b,
                "greedy_prompt": ids_a[:PROMPT], "greedy_tokens": cont,
                "greedy_min_margin": margin,
                "weights_dtype": "bf16" if name == "bf16" else "f32",
                "transformers": transformers.__version__, "torch": torch.__version__,
                "python": platform.python_version(), "seed": args.seed, **extra,
            }, f, indent=1)
        for fn in os.listdir(d):  # save_pretrained may add generation_config.json
            if fn not in keep:
                os.remove(os.path.join(d, fn))
        print(f"{name}: params={sum(p.numel() for p in model.parameters())} "
              f"greedy_min_margin={margin:.4g}", flush=True)


if __name__ == "__main__":
    main()
