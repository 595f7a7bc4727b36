#!/usr/bin/env python3
"""Reference fixtures for rowlm's Gemma 4 forward pass, from Hugging Face transformers.

Builds tiny random Gemma4ForCausalLM models that together cover every text-model feature
(docs/design/families.md, Gemma 4: PLE, KV sharing with both donor types, double-wide MLP,
MQA, attention_k_eq_v, MoE), saves each in Hugging Face format, and records fp32 logits
computed by transformers' eager implementation:

  <out>/<case>/config.json, model.safetensors      the model, as save_pretrained writes it
  <out>/<case>/logits_a.npy, logits_b.npy          [T, vocab] prefill logits of two sequences
  <out>/<case>/reference.json                      ids, greedy continuation, versions

Every weight is random, including those HF initialises to 1 (norms, layer_scalar, router
scales), so a wrong formula cannot hide. Sequences are longer than three sliding windows.
The `bf16` case stores bf16 weights; its reference is fp32 arithmetic on those same
bf16-rounded weights.

Run where torch + transformers (>= 5.17, with Gemma 4) exist:
    python3 tools/oracle/make_gemma4_fixtures.py --out tests/fixtures/gemma4
"""
import argparse
import json
import os
import platform

import numpy as np
import torch
import transformers
from fixture_common import greedy, logits_of
from transformers import Gemma4ForCausalLM, Gemma4TextConfig

COMMON = dict(
    vocab_size=128, hidden_size=64, intermediate_size=96, num_attention_heads=4,
    num_key_value_heads=2, head_dim=16, global_head_dim=32, sliding_window=4,
    rms_norm_eps=1e-6, final_logit_softcapping=30.0, tie_word_embeddings=True,
    max_position_embeddings=256, vocab_size_per_layer_input=128,
    hidden_size_per_layer_input=0,
    rope_parameters={
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                           "rope_theta": 1000000.0},
    },
)
S, F = "sliding_attention", "full_attention"
MOE = dict(enable_moe_block=True, num_experts=8, top_k_experts=2, moe_intermediate_size=16)

CASES = {
    "e_series": dict(num_hidden_layers=6, layer_types=[S, S, F, S, S, F],
                     hidden_size_per_layer_input=8, num_kv_shared_layers=3,
                     use_double_wide_mlp=True),
    "e2b_like_mqa": dict(num_hidden_layers=10, layer_types=[S, S, S, S, F] * 2,
                         num_key_value_heads=1, hidden_size_per_layer_input=8,
                         num_kv_shared_layers=5, use_double_wide_mlp=True),
    "dense_keqv": dict(num_hidden_layers=6, layer_types=[S, S, F, S, S, F],
                       attention_k_eq_v=True, num_global_key_value_heads=1),
    "moe_keqv": dict(num_hidden_layers=6, layer_types=[S, S, F, S, S, F],
                     attention_k_eq_v=True, num_global_key_value_heads=2, **MOE),
    "everything": dict(num_hidden_layers=4, layer_types=[S, F, S, F],
                       hidden_size_per_layer_input=8, num_kv_shared_layers=2,
                       use_double_wide_mlp=True, attention_k_eq_v=True,
                       num_global_key_value_heads=1, **MOE),
    # bf16 weights (stored as bf16) on the e_series geometry.
    "bf16": dict(num_hidden_layers=6, layer_types=[S, S, F, S, S, F],
                 hidden_size_per_layer_input=8, num_kv_shared_layers=3,
                 use_double_wide_mlp=True),
}

LEN_A, LEN_B = 20, 13          # > 3 windows of 4
PROMPT, GREEDY = 6, 24


def randomize(model, gen):
    def normal(t, std, mean=0.0):
        t.copy_(torch.randn(t.shape, generator=gen) * std + mean)

    def uniform(t, lo, hi):
        t.copy_(torch.rand(t.shape, generator=gen) * (hi - lo) + lo)

    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("per_expert_scale"):
                uniform(p, 0.5, 1.5)
            elif name.endswith("router.scale") or "norm" in name:
                normal(p, 0.3, 1.0)
            else:
                normal(p, 0.08)
        for name, b in model.named_buffers():
            if name.endswith("layer_scalar"):
                uniform(b, 0.5, 1.5)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    torch.set_num_threads(4)
    for case_index, (name, fields) in enumerate(CASES.items()):
        gen = torch.Generator().manual_seed(args.seed + case_index)
        cfg = Gemma4TextConfig(**{**COMMON, **fields})
        model = Gemma4ForCausalLM._from_config(cfg, attn_implementation="eager").eval()
        randomize(model, gen)
        if name == "bf16":
            model = model.to(torch.bfloat16)
        d = os.path.join(args.out, name)
        os.makedirs(d, exist_ok=True)
        model.save_pretrained(d, safe_serialization=True)
        # fp32 arithmetic on the stored weights: reload the checkpoint as an fp32 model, so the
        # non-persistent buffers (RoPE frequencies, embedding scales) are fp32 again rather than
        # bf16-rounded copies left over from the cast above.
        ref = Gemma4ForCausalLM.from_pretrained(d, dtype=torch.float32,
                                                attn_implementation="eager").eval()
        ids_a = torch.randint(0, cfg.vocab_size, (LEN_A,), generator=gen).tolist()
        ids_b = torch.randint(0, cfg.vocab_size, (LEN_B,), generator=gen).tolist()
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
                "python": platform.python_version(), "seed": args.seed,
            }, f, indent=1)
        for fn in os.listdir(d):  # save_pretrained may add generation_config.json
            if fn not in ("config.json", "model.safetensors", "logits_a.npy", "logits_b.npy",
                          "reference.json"):
                os.remove(os.path.join(d, fn))
        print(f"{name}: params={sum(p.numel() for p in model.parameters())} "
              f"greedy_min_margin={margin:.4g}", flush=True)


if __name__ == "__main__":
    main()
