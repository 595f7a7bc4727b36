#!/usr/bin/env python3
"""Writes a random bf16 Gemma 4 checkpoint with a released size's geometry.

    tools/measure/make_random_checkpoint.py --shape e2b --layers 4 --out /tmp/e2b-4

The layer geometry is `rowlm bench --shape ... --layers ...`'s (the same
config.json fields: E2B hidden 1536, MQA, head_dim 256/512, double-wide MLP in
KV-shared layers, per-layer embeddings, the full 262,144-token vocabulary and a
tied head), so `rowlm generate/batch/serve DIR` can be timed against the
forward `rowlm bench` measures on the same shapes. The weights are random
(magnitudes 2^-7..2^-6, random signs; norms 1), the tokenizer is the bundled
model's with its vocabulary padded to 262,144 word-like entries ("▁w123"), so
every generated id detokenizes to text. Nothing here is meant to write
English: it exists to make the per-token cost outside the forward measurable.
With --tokenizer DIR the checkpoint takes DIR's tokenizer.json and
tokenizer_config.json instead, and a vocabulary of that tokenizer's size
(Gemma 3's: 262,145 ids), so llama.cpp's converter can read it
(tools/peer/compare_gpu.sh).

Standard library only (no numpy): bytes come from os.urandom and are shaped
into bf16 with bytes.translate, about 1.7 GB for E2B with 4 layers.
"""

import argparse
import json
import os
import struct
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "models" / "rowlm-tiny"

SHAPES = {
    # hidden, intermediate, heads, kv heads, double-wide MLP, full-attention period, layers, KV-shared layers
    "e2b": dict(hidden=1536, intermediate=6144, heads=8, kv_heads=1, double_wide=True, full_every=5, total=35, shared=20),
    "e4b": dict(hidden=2560, intermediate=10240, heads=8, kv_heads=2, double_wide=False, full_every=6, total=42, shared=18),
}
VOCAB = 262144
PER_LAYER = 256
HEAD_DIM, GLOBAL_HEAD_DIM = 256, 512


def layer_plan(s, layers):
    """Layer types and the number of KV-shared layers, as rowlm bench's shape_config."""
    types = ["sliding_attention" if (i + 1) % s["full_every"] else "full_attention" for i in range(layers)]
    types[-1] = "full_attention"
    n_shared = s["shared"] * layers // s["total"]
    while n_shared > 0:
        donors = set(types[: layers - n_shared])
        if donors == {"sliding_attention", "full_attention"}:
            break
        n_shared -= 1
    return types, n_shared


def config_for(shape, layers, vocab=VOCAB):
    s = SHAPES[shape]
    types, n_shared = layer_plan(s, layers)
    return {
        "architectures": ["Gemma4ForCausalLM"], "model_type": "gemma4_text", "dtype": "bfloat16",
        "hidden_size": s["hidden"], "intermediate_size": s["intermediate"],
        "num_attention_heads": s["heads"], "num_key_value_heads": s["kv_heads"],
        "use_double_wide_mlp": s["double_wide"], "vocab_size": vocab, "num_hidden_layers": layers,
        "layer_types": types, "head_dim": HEAD_DIM, "global_head_dim": GLOBAL_HEAD_DIM, "sliding_window": 512,
        "hidden_size_per_layer_input": PER_LAYER, "vocab_size_per_layer_input": vocab,
        "num_kv_shared_layers": n_shared, "final_logit_softcapping": 30.0, "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True, "max_position_embeddings": 131072,
        "bos_token_id": 2, "eos_token_id": [1, 106], "pad_token_id": 0,
    }


def tensor_shapes(c):
    H, L, P, V = c["hidden_size"], c["num_hidden_layers"], PER_LAYER, c["vocab_size"]
    out = {
        "model.embed_tokens.weight": [V, H],
        "model.embed_tokens_per_layer.weight": [V, L * P],
        "model.per_layer_model_projection.weight": [L * P, H],
        "model.per_layer_projection_norm.weight": [P],
        "model.norm.weight": [H],
    }
    first_shared = L - c["num_kv_shared_layers"]
    for i, kind in enumerate(c["layer_types"]):
        hd = GLOBAL_HEAD_DIM if kind == "full_attention" else HEAD_DIM
        shared = i >= first_shared
        inter = c["intermediate_size"] * (2 if shared and c["use_double_wide_mlp"] else 1)
        p = f"model.layers.{i}."
        for norm in ["input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                     "post_feedforward_layernorm", "post_per_layer_input_norm"]:
            out[p + norm + ".weight"] = [H]
        out[p + "layer_scalar"] = [1]
        out[p + "per_layer_input_gate.weight"] = [P, H]
        out[p + "per_layer_projection.weight"] = [H, P]
        out[p + "self_attn.q_proj.weight"] = [c["num_attention_heads"] * hd, H]
        out[p + "self_attn.q_norm.weight"] = [hd]
        out[p + "self_attn.o_proj.weight"] = [H, c["num_attention_heads"] * hd]
        if not shared:  # KV-shared layers read a donor's K/V and have no projections of their own
            out[p + "self_attn.k_proj.weight"] = [c["num_key_value_heads"] * hd, H]
            out[p + "self_attn.v_proj.weight"] = [c["num_key_value_heads"] * hd, H]
            out[p + "self_attn.k_norm.weight"] = [hd]
        out[p + "mlp.gate_proj.weight"] = [inter, H]
        out[p + "mlp.up_proj.weight"] = [inter, H]
        out[p + "mlp.down_proj.weight"] = [H, inter]
    return out


# A bf16's high byte is its sign and top 7 exponent bits: map any random byte
# to exponent 2^-7 (0x3c) with the byte's top bit as the sign.
HIGH = bytes((0xBC if b & 0x80 else 0x3C) for b in range(256))
ONE_BF16 = struct.pack("<H", 0x3F80)


def random_bf16(count):
    low = os.urandom(count)
    high = os.urandom(count).translate(HIGH)
    buf = bytearray(2 * count)
    buf[0::2] = low
    buf[1::2] = high
    return bytes(buf)


def is_norm(name):
    return name.endswith("norm.weight") or name.endswith("layer_scalar")


def write_safetensors(path, shapes):
    header, offset = {}, 0
    for name, shape in shapes.items():
        n = 1
        for d in shape:
            n *= d
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + 2 * n]}
        offset += 2 * n
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    chunk = 1 << 25  # elements per write
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name, shape in shapes.items():
            n = header[name]["data_offsets"][1] // 2 - header[name]["data_offsets"][0] // 2
            if is_norm(name):
                f.write(ONE_BF16 * n)
                continue
            for start in range(0, n, chunk):
                f.write(random_bf16(min(chunk, n - start)))


def write_tokenizer(out):
    tok = json.loads((TINY / "tokenizer.json").read_text())
    vocab = tok["model"]["vocab"]
    start = len(vocab)
    for i in range(start, VOCAB):
        vocab[f"\u2581w{i}"] = i
    (out / "tokenizer.json").write_text(json.dumps(tok, ensure_ascii=False))
    for name in ["tokenizer_config.json", "generation_config.json"]:
        (out / name).write_text((TINY / name).read_text())


def tokenizer_size(tok_dir):
    """Ids of a tokenizer.json: its BPE vocabulary and added tokens."""
    tok = json.loads((tok_dir / "tokenizer.json").read_text())
    ids = list(tok["model"]["vocab"].values()) + [t["id"] for t in tok.get("added_tokens", [])]
    return max(ids) + 1


def copy_tokenizer(tok_dir, out):
    for name in ["tokenizer.json", "tokenizer_config.json"]:
        (out / name).write_bytes((tok_dir / name).read_bytes())
    (out / "generation_config.json").write_text((TINY / "generation_config.json").read_text())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="e2b")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer", help="a directory with tokenizer.json and tokenizer_config.json to use instead")
    a = ap.parse_args()
    if not 1 <= a.layers <= SHAPES[a.shape]["total"]:
        ap.error(f"--layers must be 1..{SHAPES[a.shape]['total']} for {a.shape}")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.tokenizer:
        config = config_for(a.shape, a.layers, tokenizer_size(Path(a.tokenizer)))
        copy_tokenizer(Path(a.tokenizer), out)
    else:
        config = config_for(a.shape, a.layers)
        write_tokenizer(out)
    (out / "config.json").write_text(json.dumps(config, indent=2))
    write_safetensors(out / "model.safetensors", tensor_shapes(config))
    print(out)


if __name__ == "__main__":
    main()
