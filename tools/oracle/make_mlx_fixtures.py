#!/usr/bin/env python3
"""Reference fixtures for rowlm's mlx-community (MLX affine) checkpoints, from transformers.

Builds tiny random Gemma 4 and Qwen 3 models (transformers 5.17), quantizes them into the
mlx-community layout with MLX's affine quantizer written here in numpy (independently of
rowlm's C++ codec), and records transformers' fp32 logits computed on the DEQUANTIZED weights:

  <out>/<case>/config.json         the transformers config + mlx-lm's "quantization" and
                                   "quantization_config" entries (defaults, per-module
                                   {bits, group_size} or false)
  <out>/<case>/model.safetensors   MLX names and layout: a quantized module <p> is <p>.weight
                                   (u32 codes), <p>.scales and <p>.biases (the model dtype);
                                   Gemma 4 under language_model.model., experts as
                                   switch_glu.{gate,up,down}_proj, no lm_head when tied
  <out>/<case>/logits_a.npy, logits_b.npy, reference.json   as the other fixture scripts

MLX's affine quantization (mlx/backend/cpu/quantized.cpp; docs: mlx.core.quantize), per group
of `group_size` consecutive inputs, in float32 with n = 2^bits - 1:
  scale = max((max - min) / n, 1e-7); the edge is min if |min| > |max| (else max, and the
  scale is negated); q0 = rint(edge / scale); if q0 != 0: scale = edge / q0, bias = edge,
  else bias = 0; q = clip(rint((w - bias) / scale), 0, n). Scales and biases are stored in the
  model dtype; the dequantized weight is scale * q + bias (f32, two roundings) with the stored
  values. Codes of a row form one little-endian bit stream (code i at bits [i*bits, (i+1)*bits)),
  read as uint32 words; MLX's 3-, 5- and 6-bit byte packs are this stream.

As mlx-lm does, a module is quantized when its input width is a whole number of groups (and
32-bit words), a Gemma 4 router gets 8 bits in groups of 64, norms and scalars never. A Gemma 4
per-layer embedding table is quantized only when each layer's part of a row is whole groups
(rowlm reads the table per layer).

Run where torch + transformers (>= 5.17) exist, from the repository root:
    python3 tools/oracle/make_mlx_fixtures.py --out tests/fixtures/mlx
"""
import argparse
import json
import os
import platform
import struct

import numpy as np
import torch
import transformers
from fixture_common import greedy, logits_of
from transformers import Gemma4ForCausalLM, Gemma4TextConfig, Qwen3Config, Qwen3ForCausalLM

import make_gemma4_fixtures as g4
import make_qwen3_fixtures as q3

S, F = "sliding_attention", "full_attention"

# Small enough for a few hundred KB per case; widths that take every group size somewhere:
# hidden 64, MLP 128, per-layer inputs 32, experts' MLP 32.
GEMMA = dict(g4.COMMON, hidden_size=64, intermediate_size=128, hidden_size_per_layer_input=0)
GEMMA_PLE = dict(num_hidden_layers=4, layer_types=[S, F, S, F], hidden_size_per_layer_input=32,
                 num_kv_shared_layers=2, use_double_wide_mlp=True)
GEMMA_MOE = dict(num_hidden_layers=4, layer_types=[S, F, S, F], hidden_size_per_layer_input=32,
                 num_kv_shared_layers=2, use_double_wide_mlp=True, attention_k_eq_v=True,
                 num_global_key_value_heads=1, enable_moe_block=True, num_experts=4, top_k_experts=2,
                 moe_intermediate_size=32)
QWEN = dict(q3.COMMON, hidden_size=64, intermediate_size=128, head_dim=16)

# name: (family, config fields, model dtype, (bits, group) defaults, overrides). An override is
# (substring of the module path, (bits, group) or None for "not quantized"); later ones win.
CASES = {
    "gemma4_q4": ("gemma4", GEMMA_PLE, torch.bfloat16, (4, 32), []),
    "gemma4_q8": ("gemma4", GEMMA_PLE, torch.float16, (8, 64), []),
    "gemma4_mixed": ("gemma4", GEMMA_PLE, torch.bfloat16, (4, 64), [
        ("self_attn.q_proj", (8, 32)), ("mlp.down_proj", (6, 128)), ("self_attn.o_proj", (3, 32)),
        ("per_layer", (5, 32)), ("embed_tokens.", (2, 16)), ("layers.1.mlp.up_proj", None)]),
    "gemma4_moe": ("gemma4", GEMMA_MOE, torch.bfloat16, (4, 32), []),
    "qwen3_q4": ("qwen3", dict(num_hidden_layers=3, tie_word_embeddings=False), torch.bfloat16, (4, 64), []),
    "qwen3_mixed": ("qwen3", dict(num_hidden_layers=3), torch.bfloat16, (8, 32), [
        ("mlp.", (3, 64)), ("self_attn.k_proj", (5, 16)), ("self_attn.v_proj", (2, 32)),
        ("layers.0.mlp.gate_proj", None)]),
}

LEN_A, LEN_B = 20, 13
PROMPT, GREEDY = 6, 24


# ------------------------------------------------------------------ MLX's quantizer, in numpy --

def quantize(w, bits, group):
    """w: float32 [rows, cols]. Returns uint32 codes [rows, cols*bits/32] and float32 scales,
    biases [rows, cols/group] before storage rounding."""
    rows, cols = w.shape
    n = np.float32(2 ** bits - 1)
    g = w.reshape(rows, cols // group, group).astype(np.float32)
    w_max = g.max(axis=2)
    w_min = g.min(axis=2)
    scale = np.maximum((w_max - w_min) / n, np.float32(1e-7)).astype(np.float32)
    side = np.abs(w_min) > np.abs(w_max)
    scale = np.where(side, scale, -scale).astype(np.float32)
    edge = np.where(side, w_min, w_max).astype(np.float32)
    q0 = np.rint(edge / scale).astype(np.float32)
    nonzero = q0 != 0
    scale = np.where(nonzero, edge / np.where(nonzero, q0, np.float32(1)), scale).astype(np.float32)
    bias = np.where(nonzero, edge, np.float32(0)).astype(np.float32)
    q = np.clip(np.rint((g - bias[:, :, None]) / scale[:, :, None]), 0, n).astype(np.uint64)
    q = q.reshape(rows, cols)
    # The little-endian bit stream of each row: bit b of code i is stream bit i*bits + b.
    bit_matrix = ((q[:, :, None] >> np.arange(bits, dtype=np.uint64)) & 1).astype(np.uint8)
    stream = bit_matrix.reshape(rows, cols * bits)
    packed = np.packbits(stream, axis=1, bitorder="little")  # bytes, low bit first
    codes = packed.view("<u4").reshape(rows, cols * bits // 32)
    return codes, scale, bias


def stored(x, dtype):
    """float32 numpy values rounded to the model dtype (torch's round-to-nearest-even)."""
    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32)).to(dtype)


def dequantize(codes, scales, biases, bits, group):
    """codes uint32 [rows, words]; scales, biases float32 (the stored values) [rows, groups]."""
    rows, words = codes.shape
    cols = words * 32 // bits
    stream = np.unpackbits(np.ascontiguousarray(codes).view(np.uint8), axis=1, bitorder="little")
    weights = (np.uint64(1) << np.arange(bits, dtype=np.uint64))
    q = (stream.reshape(rows, cols, bits).astype(np.uint64) * weights).sum(axis=2).astype(np.float32)
    s = np.repeat(scales, group, axis=1).astype(np.float32)
    b = np.repeat(biases, group, axis=1).astype(np.float32)
    scaled = (s * q).astype(np.float32)  # two roundings, as MLX and rowlm
    return (scaled + b).astype(np.float32)


# ------------------------------------------------------------------------- safetensors file --

ST_DTYPE = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}


def tensor_bytes(t):
    """(safetensors dtype, shape, little-endian bytes) of a torch tensor or a numpy uint32 array."""
    if isinstance(t, np.ndarray):
        assert t.dtype == np.dtype("<u4"), t.dtype
        return "U32", list(t.shape), np.ascontiguousarray(t).tobytes()
    t = t.contiguous()
    raw = t.view(torch.int16) if t.dtype in (torch.bfloat16, torch.float16) else t
    return ST_DTYPE[t.dtype], list(t.shape), raw.numpy().tobytes()


def write_safetensors(path, tensors):
    header, blobs, offset = {"__metadata__": {"format": "mlx"}}, [], 0
    for name in sorted(tensors):
        dtype, shape, data = tensor_bytes(tensors[name])
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


# ------------------------------------------------------------------------------ the cases --

def spec_for(name, default, overrides):
    """The spec of the matrix stored as `name` (its MLX tensor name, ".weight" included)."""
    spec = default
    if name.endswith("router.proj.weight"):
        spec = (8, 64)  # mlx-lm's Gemma 4 predicate
    for pattern, s in overrides:
        if pattern in name:
            spec = s
    return spec


def mlx_tensors(family, sd, cfg):
    """(MLX name, HF name, value, role) for every stored tensor: role 'matrix' for the
    quantizable ones, 'gate'/'up' for the halves of a fused expert stack, None otherwise."""
    out = []
    for name, t in sd.items():
        if name == "lm_head.weight" and cfg.tie_word_embeddings:
            continue
        mlx = "language_model." + name if family == "gemma4" else name  # model.X -> language_model.model.X
        if mlx.endswith(".weight") and "experts." in mlx and t.dim() == 3:
            mlx = mlx[: -len(".weight")]  # transformers may name the stacks with or without .weight
        if mlx.endswith("experts.gate_up_proj"):
            base = mlx[: -len("gate_up_proj")] + "switch_glu."
            half = t.shape[1] // 2
            out.append((base + "gate_proj.weight", name, t[:, :half], "gate"))
            out.append((base + "up_proj.weight", name, t[:, half:], "up"))
        elif mlx.endswith("experts.down_proj"):
            out.append((mlx[: -len("down_proj")] + "switch_glu.down_proj.weight", name, t, "matrix"))
        elif name.endswith(".weight") and t.dim() == 2 and "norm" not in name:
            out.append((mlx, name, t, "matrix"))
        else:
            out.append((mlx, name, t, None))
    return out


def build(name, family, fields, dtype, default, overrides, seed):
    gen = torch.Generator().manual_seed(seed)
    if family == "gemma4":
        cfg = Gemma4TextConfig(**{**GEMMA, **fields})
        model = Gemma4ForCausalLM._from_config(cfg, attn_implementation="eager").eval()
        g4.randomize(model, gen)
    else:
        cfg = Qwen3Config(**{**QWEN, **fields})
        model = Qwen3ForCausalLM._from_config(cfg, attn_implementation="eager").eval()
        q3.randomize(model, gen)
    ple_width = getattr(cfg, "hidden_size_per_layer_input", 0) or 0
    sd = {k: v.detach().float().clone() for k, v in model.state_dict().items()}
    stored_tensors, reference, modules = {}, {}, {}
    gate_up = {}  # HF name -> {"gate": f32, "up": f32} dequantized halves
    for mlx, hf, t, role in mlx_tensors(family, sd, cfg):
        # The checkpoint's values: the model dtype, as mlx-lm reads a bf16/f16 model.
        values = t.to(dtype)
        if role is None:
            stored_tensors[mlx] = values
            reference[hf] = values.float()
            continue
        stem = mlx[: -len(".weight")]
        spec = spec_for(mlx, default, overrides)
        cols = t.shape[-1]
        part = ple_width if stem.endswith("embed_tokens_per_layer") else cols
        ok = spec is not None and cols % spec[1] == 0 and cols * spec[0] % 32 == 0 and \
            part % spec[1] == 0 and part * spec[0] % 32 == 0
        if not ok:
            modules[stem] = False
            stored_tensors[mlx] = values
            deq = values.float()
        else:
            bits, group = spec
            flat = values.float().reshape(-1, cols).numpy()
            codes, scales, biases = quantize(flat, bits, group)
            s, b = stored(scales, dtype), stored(biases, dtype)
            lead = list(t.shape[:-1])
            stored_tensors[mlx] = codes.reshape(lead + [codes.shape[1]])
            stored_tensors[stem + ".scales"] = s.reshape(lead + [s.shape[1]])
            stored_tensors[stem + ".biases"] = b.reshape(lead + [b.shape[1]])
            deq = torch.from_numpy(dequantize(codes, s.float().numpy(), b.float().numpy(), bits, group))
            deq = deq.reshape(t.shape)
            if spec != default:
                modules[stem] = {"group_size": group, "bits": bits}
        if role in ("gate", "up"):
            gate_up.setdefault(hf, {})[role] = deq
        else:
            reference[hf] = deq
    for hf, halves in gate_up.items():
        reference[hf] = torch.cat([halves["gate"], halves["up"]], dim=1)
    # transformers' fp32 model on exactly those values.
    with torch.no_grad():
        own = model.state_dict()
        for hf, value in reference.items():
            own[hf].copy_(value)
        if getattr(cfg, "tie_word_embeddings", False) and "lm_head.weight" in own:
            assert torch.equal(own["lm_head.weight"], own["model.embed_tokens.weight"])
    q = {"group_size": default[1], "bits": default[0], "mode": "affine", **modules}
    config = json.loads(cfg.to_json_string())
    config["dtype"] = {torch.bfloat16: "bfloat16", torch.float16: "float16"}[dtype]
    config["quantization"] = q
    config["quantization_config"] = q
    return model, cfg, config, stored_tensors, gen


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=2468)
    args = ap.parse_args()
    torch.set_num_threads(4)
    for case_index, (name, (family, fields, dtype, default, overrides)) in enumerate(CASES.items()):
        model, cfg, config, tensors, gen = build(name, family, fields, dtype, default, overrides,
                                                 args.seed + case_index)
        d = os.path.join(args.out, name)
        os.makedirs(d, exist_ok=True)
        write_safetensors(os.path.join(d, "model.safetensors"), tensors)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(config, f, indent=1)
        ids_a = torch.randint(0, cfg.vocab_size, (LEN_A,), generator=gen).tolist()
        ids_b = torch.randint(0, cfg.vocab_size, (LEN_B,), generator=gen).tolist()
        np.save(os.path.join(d, "logits_a.npy"), logits_of(model, ids_a).astype(np.float32))
        np.save(os.path.join(d, "logits_b.npy"), logits_of(model, ids_b).astype(np.float32))
        cont, margin = greedy(model, ids_a[:PROMPT], GREEDY)
        quantized = sum(1 for k in tensors if k.endswith(".scales"))
        with open(os.path.join(d, "reference.json"), "w") as f:
            json.dump({
                "ids_a": ids_a, "ids_b": ids_b,
                "greedy_prompt": ids_a[:PROMPT], "greedy_tokens": cont,
                "greedy_min_margin": margin, "quantized_modules": quantized,
                "weights": "MLX affine, reference on the dequantized values in fp32",
                "transformers": transformers.__version__, "torch": torch.__version__,
                "python": platform.python_version(), "seed": args.seed,
            }, f, indent=1)
        size = os.path.getsize(os.path.join(d, "model.safetensors"))
        print(f"{name}: {quantized} quantized modules, {size} bytes, greedy_min_margin={margin:.4g}",
              flush=True)


if __name__ == "__main__":
    main()
