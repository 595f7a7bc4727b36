#!/usr/bin/env python3
"""GGUF model fixtures for the tests, made on the development machine with
llama.cpp's gguf-py (no torch): rowlm's transformers fixtures
(tests/fixtures/qwen3/*) written as llama.cpp's convert_hf_to_gguf.py writes
a Qwen 3 model (conversion/qwen.py's Qwen3Model, base.py's TextModel and
_set_vocab_gpt2), with names and keys taken from gguf-py's own constants
(TENSOR_NAMES, the GGUFWriter add_* methods, SpecialVocab), so the file's
layout is llama.cpp's and not rowlm's idea of it.

The weights are the fixture's f32 values unchanged, so rowlm must give the
logits it gives on the safetensors directory, bit for bit, and the
transformers logits committed beside it.

    PYTHONPATH=/tmp/llama.cpp/gguf-py /usr/bin/python3 tools/gguf/make_model_fixtures.py
(see make_block_fixtures.py for getting gguf-py). Writes
tests/fixtures/gguf/qwen3_chat_f32.gguf and qwen3_chat_mixed.gguf (its
matrices in Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0, quantized by gguf-py).
"""
import json
import os
import sys

import numpy as np

try:
    import gguf
    from gguf import MODEL_TENSOR as MT
except ImportError:
    sys.exit("gguf-py not found: set PYTHONPATH to llama.cpp's gguf-py (see make_block_fixtures.py)")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def read_safetensors(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    dtypes = {"F32": np.float32, "F16": np.float16}
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        out[name] = np.frombuffer(data[b:end], dtype=dtypes[e["dtype"]]).reshape(e["shape"])
    return out


# Hugging Face name (under model.layers.N.) -> llama.cpp tensor, as
# gguf-py's tensor_mapping.py maps them for Qwen 3.
LAYER = {
    "input_layernorm.weight": (MT.ATTN_NORM, "weight"),
    "post_attention_layernorm.weight": (MT.FFN_NORM, "weight"),
    "self_attn.q_proj.weight": (MT.ATTN_Q, "weight"),
    "self_attn.k_proj.weight": (MT.ATTN_K, "weight"),
    "self_attn.v_proj.weight": (MT.ATTN_V, "weight"),
    "self_attn.o_proj.weight": (MT.ATTN_OUT, "weight"),
    "self_attn.q_norm.weight": (MT.ATTN_Q_NORM, "weight"),
    "self_attn.k_norm.weight": (MT.ATTN_K_NORM, "weight"),
    "mlp.gate_proj.weight": (MT.FFN_GATE, "weight"),
    "mlp.up_proj.weight": (MT.FFN_UP, "weight"),
    "mlp.down_proj.weight": (MT.FFN_DOWN, "weight"),
}
GLOBAL = {
    "model.embed_tokens.weight": MT.TOKEN_EMBD,
    "model.norm.weight": MT.OUTPUT_NORM,
    "lm_head.weight": MT.OUTPUT,
}


def gguf_name(hf):
    if hf in GLOBAL:
        return gguf.TENSOR_NAMES[GLOBAL[hf]] + ".weight"
    parts = hf.split(".")
    assert parts[0] == "model" and parts[1] == "layers", hf
    bid, rest = int(parts[2]), ".".join(parts[3:])
    tensor, suffix = LAYER[rest]
    return gguf.TENSOR_NAMES[tensor].format(bid=bid) + "." + suffix


def add_vocab(writer, model_dir, vocab_size):
    """_set_vocab_gpt2 without transformers: the tokenizer.json's vocab and
    added tokens by id (missing ids as [PAD<i>] UNUSED), special added tokens
    CONTROL, then SpecialVocab (merges, special ids, add_bos, template)."""
    tok = json.load(open(os.path.join(model_dir, "tokenizer.json"), encoding="utf-8"))
    by_id = {i: t for t, i in tok["model"]["vocab"].items()}
    added = {a["id"]: a for a in tok["added_tokens"]}
    tokens, types = [], []
    for i in range(vocab_size):
        if i in added:
            tokens.append(added[i]["content"])
            types.append(gguf.TokenType.CONTROL if added[i]["special"] else gguf.TokenType.USER_DEFINED)
        elif i in by_id:
            tokens.append(by_id[i])
            types.append(gguf.TokenType.NORMAL)
        else:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
    writer.add_tokenizer_model("gpt2")
    # A ByteLevel pre-tokenizer with use_regex: GPT-2's split, llama.cpp's "gpt-2".
    pre = tok["pre_tokenizer"]
    assert pre["type"] == "ByteLevel" and pre["use_regex"], pre
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    gguf.SpecialVocab(model_dir, load_merges=True).add_to_gguf(writer)


Q = gguf.GGMLQuantizationType
# A mix of every type gguf-py can quantize, as llama-quantize's _M/_S mixes
# give different tensors different types (K-quants need rows of 256, more
# than these models have; tests/fixtures/gguf/blocks.gguf covers them).
MIXED = {
    MT.TOKEN_EMBD: Q.Q8_0, MT.ATTN_Q: Q.Q4_0, MT.ATTN_K: Q.Q4_1, MT.ATTN_V: Q.Q5_0,
    MT.ATTN_OUT: Q.Q5_1, MT.FFN_GATE: Q.Q4_0, MT.FFN_UP: Q.Q8_0, MT.FFN_DOWN: Q.Q5_1,
}


def tensor_kind(hf):
    if hf in GLOBAL:
        return GLOBAL[hf]
    return LAYER[".".join(hf.split(".")[3:])][0]


def convert_qwen3(model_dir, out_path, types=None):
    """types: MODEL_TENSOR -> quantization type for matrices (None: all f32)."""
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    assert not cfg.get("attention_bias") and not cfg.get("use_sliding_window"), "llama.cpp's qwen3 has neither"
    w = gguf.GGUFWriter(out_path, arch="qwen3")
    w.add_name(os.path.basename(model_dir))
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_rope_freq_base(cfg["rope_parameters"]["rope_theta"])
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_key_length(cfg["head_dim"])
    w.add_value_length(cfg["head_dim"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32 if types is None else gguf.LlamaFileType.MOSTLY_Q4_0)
    add_vocab(w, model_dir, cfg["vocab_size"])
    for hf, value in read_safetensors(os.path.join(model_dir, "model.safetensors")).items():
        value = value.astype(np.float32)
        qtype = (types or {}).get(tensor_kind(hf))
        if value.ndim == 2 and qtype is not None:  # llama.cpp keeps 1-D tensors in f32
            w.add_tensor(gguf_name(hf), gguf.quants.quantize(value, qtype), raw_dtype=qtype)
        else:
            w.add_tensor(gguf_name(hf), value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print("wrote", out_path, os.path.getsize(out_path), "bytes")


def main():
    out = os.path.join(ROOT, "tests", "fixtures", "gguf")
    os.makedirs(out, exist_ok=True)
    chat = os.path.join(ROOT, "tests", "fixtures", "qwen3", "chat")
    convert_qwen3(chat, os.path.join(out, "qwen3_chat_f32.gguf"))
    convert_qwen3(chat, os.path.join(out, "qwen3_chat_mixed.gguf"), MIXED)


if __name__ == "__main__":
    main()
