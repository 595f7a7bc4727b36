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
matrices in Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0, quantized by gguf-py), and
gemma4_bf16.gguf from tests/fixtures/gemma4/bf16 (per-layer embeddings, KV
sharing, a double-wide MLP, proportional RoPE, softcap; bf16 matrices).
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
    dtypes = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16}  # bf16 kept as its bits
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


# Gemma 4 (conversion/gemma.py's Gemma4Model over Gemma3Model and TextModel).
GEMMA4_LAYER = {
    "input_layernorm.weight": (MT.ATTN_NORM, "weight"),
    "post_attention_layernorm.weight": (MT.ATTN_POST_NORM, "weight"),
    "pre_feedforward_layernorm.weight": (MT.FFN_PRE_NORM, "weight"),
    "post_feedforward_layernorm.weight": (MT.FFN_POST_NORM, "weight"),
    "self_attn.q_proj.weight": (MT.ATTN_Q, "weight"),
    "self_attn.k_proj.weight": (MT.ATTN_K, "weight"),
    "self_attn.v_proj.weight": (MT.ATTN_V, "weight"),
    "self_attn.o_proj.weight": (MT.ATTN_OUT, "weight"),
    "self_attn.q_norm.weight": (MT.ATTN_Q_NORM, "weight"),
    "self_attn.k_norm.weight": (MT.ATTN_K_NORM, "weight"),
    "mlp.gate_proj.weight": (MT.FFN_GATE, "weight"),
    "mlp.up_proj.weight": (MT.FFN_UP, "weight"),
    "mlp.down_proj.weight": (MT.FFN_DOWN, "weight"),
    "layer_scalar": (MT.LAYER_OUT_SCALE, "weight"),  # filter_tensors appends .weight
    "per_layer_input_gate.weight": (MT.PER_LAYER_INP_GATE, "weight"),
    "per_layer_projection.weight": (MT.PER_LAYER_PROJ, "weight"),
    "post_per_layer_input_norm.weight": (MT.PER_LAYER_POST_NORM, "weight"),
}
GEMMA4_GLOBAL = {
    "model.embed_tokens.weight": MT.TOKEN_EMBD,
    "model.norm.weight": MT.OUTPUT_NORM,
    "model.embed_tokens_per_layer.weight": MT.PER_LAYER_TOKEN_EMBD,
    "model.per_layer_model_projection.weight": MT.PER_LAYER_MODEL_PROJ,
    "model.per_layer_projection_norm.weight": MT.PER_LAYER_PROJ_NORM,
}


def gemma4_name(hf):
    if hf in GEMMA4_GLOBAL:
        return gguf.TENSOR_NAMES[GEMMA4_GLOBAL[hf]] + ".weight"
    parts = hf.split(".")
    tensor, suffix = GEMMA4_LAYER[".".join(parts[3:])]
    return gguf.TENSOR_NAMES[tensor].format(bid=int(parts[2])) + "." + suffix


def convert_gemma4(model_dir, out_path):
    """A dense Gemma 4 text model (no tokenizer in these fixtures) as Gemma4Model writes it:
    matrices kept in the checkpoint's dtype, vectors in f32, rope_freqs for proportional RoPE."""
    c = json.load(open(os.path.join(model_dir, "config.json")))
    c = c.get("text_config", c)
    assert not c.get("enable_moe_block") and not c.get("attention_k_eq_v"), "dense, K and V separate only"
    types = c["layer_types"]
    head_dim = c["head_dim"]
    head_dim_full = c.get("global_head_dim") or next(
        v["head_dim"] for k, v in c["per_layer_config"].items() if types[int(k)] == "full_attention")
    n_layers, shared = c["num_hidden_layers"], c["num_kv_shared_layers"]
    w = gguf.GGUFWriter(out_path, arch="gemma4")
    w.add_name(os.path.basename(model_dir))
    w.add_block_count(n_layers)
    w.add_context_length(c["max_position_embeddings"])
    w.add_embedding_length(c["hidden_size"])
    n_ff = c["intermediate_size"]
    if c.get("use_double_wide_mlp"):
        w.add_feed_forward_length([n_ff if il < n_layers - shared else 2 * n_ff for il in range(n_layers)])
    else:
        w.add_feed_forward_length(n_ff)
    w.add_head_count(c["num_attention_heads"])
    w.add_head_count_kv(c["num_key_value_heads"])
    w.add_layer_norm_rms_eps(c["rms_norm_eps"])
    w.add_rope_freq_base(c["rope_parameters"]["full_attention"]["rope_theta"])
    w.add_rope_freq_base_swa(c["rope_parameters"]["sliding_attention"]["rope_theta"])
    if c.get("final_logit_softcapping"):
        w.add_final_logit_softcapping(c["final_logit_softcapping"])
    w.add_sliding_window(c["sliding_window"])
    w.add_shared_kv_layers(shared)
    w.add_embedding_length_per_layer_input(c.get("hidden_size_per_layer_input") or 0)
    w.add_sliding_window_pattern([t == "sliding_attention" for t in types])
    w.add_key_length(head_dim_full)
    w.add_value_length(head_dim_full)
    w.add_key_length_swa(head_dim)
    w.add_value_length_swa(head_dim)
    w.add_rope_dimension_count(head_dim_full)
    w.add_rope_dimension_count_swa(head_dim)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_BF16)
    full = c["rope_parameters"]["full_attention"]
    assert full["rope_type"] == "proportional"
    n_rot = int(head_dim_full * full["partial_rotary_factor"] / 2)
    w.add_tensor(gguf.TENSOR_NAMES[MT.ROPE_FREQS] + ".weight",
                 np.array([1.0] * n_rot + [1e30] * (head_dim_full // 2 - n_rot), dtype=np.float32))
    for hf, value in read_safetensors(os.path.join(model_dir, "model.safetensors")).items():
        if value.dtype == np.uint16 and value.ndim >= 2:
            w.add_tensor(gemma4_name(hf), value, raw_dtype=gguf.GGMLQuantizationType.BF16)
        else:  # vectors and scalars in f32, as the converter keeps them
            f32 = (value.astype(np.uint32) << 16).view(np.float32) if value.dtype == np.uint16 else value
            w.add_tensor(gemma4_name(hf), f32.astype(np.float32))
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
    convert_gemma4(os.path.join(ROOT, "tests", "fixtures", "gemma4", "bf16"), os.path.join(out, "gemma4_bf16.gguf"))


if __name__ == "__main__":
    main()
