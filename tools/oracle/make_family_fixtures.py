#!/usr/bin/env python3
"""Reference fixtures for rowlm's Llama-style and Gemma 3 families, from Hugging Face transformers.

Builds tiny random models of each family with transformers' own classes, every feature rowlm
reads set away from its default in at least one case, saves each in Hugging Face format, and
records fp32 logits computed by transformers' eager implementation:

  <out>/<family>/<case>/config.json, model.safetensors   the model, as save_pretrained writes it
  <out>/<family>/<case>/logits_a.npy, logits_b.npy       [T, vocab] prefill logits of two sequences
  <out>/<family>/<case>/reference.json                   ids, greedy continuation, versions

Cases (H 64, vocab 128; sequences of 20 and 13 tokens, longer than three windows of 5):

  llama/llama3_tied       Llama 3.2-like: llama3 RoPE scaling (factor 8, low/high frequency factors
                          1 and 4, original context 32, so every band occurs), GQA 4/2, tied head
  llama/linear_untied_bias  linear RoPE (factor 2), MHA, untied head, attention_bias (q/k/v/o)
  llama/bf16              the llama3_tied geometry in bf16
  qwen2/sliding_gqa       q/k/v biases, sliding layers from max_window_layers 2 (window 5), untied
  qwen2/mqa_tied          MQA, tied head, no window
  mistral/window          sliding_window 5 on every layer, GQA, head_dim 24 (not hidden / heads)
  mistral/no_window       sliding_window null, untied head
  gemma3/text             gemma3_text: layer_types sliding/full, window 5, full layers' RoPE linear x8
                          at θ 1e6 and sliding θ 1e4, query_pre_attn_scalar 20 (head_dim 16),
                          final softcap 30, untied head; attn_logit_softcapping 50, which
                          transformers' Gemma3Attention does not apply (rowlm neither)
  gemma3/conditional      gemma3 (Gemma3ForConditionalGeneration with a tiny SigLIP tower):
                          the text decoder under text_config, tied head; final_logit_softcapping
                          30 in text_config, which the conditional model does not apply
  gemma3/bf16             the text geometry in bf16 (√64 = 8 is exact in bf16, so transformers'
                          embedding scale in the weights' dtype equals the f32 one here)
  qwen3_moe/norm_topk     6 experts, top 2, norm_topk_prob, mlp_only_layers [2] (a dense layer),
                          head_dim 24, untied head
  qwen3_moe/step2_window  decoder_sparse_step 2 (layers 1 and 3 routed), norm_topk_prob false,
                          use_sliding_window with window 5, tied head

Every weight is random, norms and routers included (norms 1 + 0.3·N, others 0.08·N), so a wrong
formula cannot hide. bf16 cases store bf16 weights; their reference is fp32 arithmetic on those
same bf16-rounded weights.

Run where torch + transformers (>= 5.17) exist, from the repository root:
    python3 tools/oracle/make_family_fixtures.py --out tests/fixtures
(--only llama,gemma3 limits the families.)
"""
import argparse
import copy
import json
import os
import platform

import numpy as np
import torch
import transformers
from fixture_common import greedy, logits_of
from transformers import (Gemma3Config, Gemma3ForCausalLM, Gemma3ForConditionalGeneration, Gemma3TextConfig,
                          LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM)

COMMON = dict(vocab_size=128, hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
              rms_norm_eps=1e-6, max_position_embeddings=256, bos_token_id=None, eos_token_id=1)

LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 32}

GEMMA3_TEXT = dict(
    COMMON, head_dim=16, num_hidden_layers=4, sliding_window=5, query_pre_attn_scalar=20,
    layer_types=["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"],
    rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                     "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0}},
    bos_token_id=2, pad_token_id=0)

# family -> case -> (config class, model class, fields, weights dtype)
CASES = {
    "llama": {
        "llama3_tied": (LlamaConfig, LlamaForCausalLM,
                        dict(COMMON, num_hidden_layers=3, tie_word_embeddings=True, rope_parameters=LLAMA3_ROPE), "f32"),
        "linear_untied_bias": (LlamaConfig, LlamaForCausalLM,
                               dict(COMMON, num_hidden_layers=3, num_key_value_heads=4, tie_word_embeddings=False,
                                    attention_bias=True,
                                    rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}),
                               "f32"),
        "bf16": (LlamaConfig, LlamaForCausalLM,
                 dict(COMMON, num_hidden_layers=3, tie_word_embeddings=True, rope_parameters=LLAMA3_ROPE), "bf16"),
    },
    "qwen2": {
        "sliding_gqa": (Qwen2Config, Qwen2ForCausalLM,
                        dict(COMMON, num_hidden_layers=4, use_sliding_window=True, sliding_window=5,
                             max_window_layers=2, tie_word_embeddings=False,
                             rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}), "f32"),
        "mqa_tied": (Qwen2Config, Qwen2ForCausalLM,
                     dict(COMMON, num_hidden_layers=3, num_key_value_heads=1, tie_word_embeddings=True,
                          rope_parameters={"rope_type": "default", "rope_theta": 10000.0}), "f32"),
    },
    "mistral": {
        "window": (MistralConfig, MistralForCausalLM,
                   dict(COMMON, num_hidden_layers=3, head_dim=24, sliding_window=5, tie_word_embeddings=False,
                        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}), "f32"),
        "no_window": (MistralConfig, MistralForCausalLM,
                      dict(COMMON, num_hidden_layers=3, sliding_window=None, tie_word_embeddings=False,
                           rope_parameters={"rope_type": "default", "rope_theta": 10000.0}), "f32"),
    },
    "gemma3": {
        "text": (Gemma3TextConfig, Gemma3ForCausalLM,
                 dict(GEMMA3_TEXT, tie_word_embeddings=False, attn_logit_softcapping=50.0,
                      final_logit_softcapping=30.0), "f32"),
        "conditional": (Gemma3Config, Gemma3ForConditionalGeneration, None, "f32"),  # built by gemma3_conditional()
        "bf16": (Gemma3TextConfig, Gemma3ForCausalLM, dict(GEMMA3_TEXT, tie_word_embeddings=True), "bf16"),
    },
    "qwen3_moe": {
        "norm_topk": (Qwen3MoeConfig, Qwen3MoeForCausalLM,
                      dict(COMMON, num_hidden_layers=4, head_dim=24, num_experts=6, num_experts_per_tok=2,
                           moe_intermediate_size=32, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[2],
                           tie_word_embeddings=False,
                           rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}), "f32"),
        "step2_window": (Qwen3MoeConfig, Qwen3MoeForCausalLM,
                         dict(COMMON, num_hidden_layers=4, num_experts=6, num_experts_per_tok=2,
                              moe_intermediate_size=32, norm_topk_prob=False, decoder_sparse_step=2,
                              use_sliding_window=True, sliding_window=5, tie_word_embeddings=True,
                              rope_parameters={"rope_type": "default", "rope_theta": 10000.0}), "f32"),
    },
}

# Ids the conditional Gemma 3 case keeps for its image tokens (never fed: the sequences are text).
IMAGE_IDS = dict(boi_token_index=125, eoi_token_index=126, image_token_index=127)

LEN_A, LEN_B = 20, 13          # > 3 windows of 5
PROMPT, GREEDY = 6, 24


def gemma3_conditional():
    text = copy.deepcopy(dict(GEMMA3_TEXT, tie_word_embeddings=True, final_logit_softcapping=30.0))
    vision = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                  image_size=28, patch_size=14)
    return Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4, tie_word_embeddings=True,
                        **IMAGE_IDS)


def randomize(model, gen):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3 + 1.0)
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.08)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, help="the fixtures root (tests/fixtures)")
    ap.add_argument("--seed", type=int, default=2468)
    ap.add_argument("--only", default="", help="comma-separated families (default: all)")
    args = ap.parse_args()
    only = {f for f in args.only.split(",") if f}
    torch.set_num_threads(4)
    case_index = 0
    for family, cases in CASES.items():
        for name, (config_class, model_class, fields, dtype) in cases.items():
            case_index += 1
            if only and family not in only:
                continue
            gen = torch.Generator().manual_seed(args.seed + case_index)
            # A deep copy: config classes update their RoPE dicts in place, and cases share them.
            cfg = gemma3_conditional() if fields is None else config_class(**copy.deepcopy(fields))
            model = model_class._from_config(cfg, attn_implementation="eager").eval()
            randomize(model, gen)
            if dtype == "bf16":
                model = model.to(torch.bfloat16)
            d = os.path.join(args.out, family, name)
            os.makedirs(d, exist_ok=True)
            model.save_pretrained(d, safe_serialization=True)
            keep = {"config.json", "model.safetensors", "logits_a.npy", "logits_b.npy", "reference.json"}
            ref = model_class.from_pretrained(d, dtype=torch.float32, attn_implementation="eager").eval()
            top = 120 if fields is None else cfg.vocab_size  # the conditional case: text tokens only
            ids_a = torch.randint(0, top, (LEN_A,), generator=gen).tolist()
            ids_b = torch.randint(0, top, (LEN_B,), generator=gen).tolist()
            np.save(os.path.join(d, "logits_a.npy"), logits_of(ref, ids_a).astype(np.float32))
            np.save(os.path.join(d, "logits_b.npy"), logits_of(ref, ids_b).astype(np.float32))
            cont, margin = greedy(ref, ids_a[:PROMPT], GREEDY)
            params = sum(p.numel() for p in model.parameters())
            with open(os.path.join(d, "reference.json"), "w") as f:
                json.dump({
                    "ids_a": ids_a, "ids_b": ids_b,
                    "greedy_prompt": ids_a[:PROMPT], "greedy_tokens": cont,
                    "greedy_min_margin": margin,
                    "weights_dtype": dtype, "parameters": params,
                    "transformers": transformers.__version__, "torch": torch.__version__,
                    "python": platform.python_version(), "seed": args.seed,
                }, f, indent=1)
            for fn in os.listdir(d):  # save_pretrained may add generation_config.json
                if fn not in keep:
                    os.remove(os.path.join(d, fn))
            with open(os.path.join(d, "model.safetensors"), "rb") as f:
                header_len = int.from_bytes(f.read(8), "little")
                names = sorted(k for k in json.loads(f.read(header_len)) if k != "__metadata__")
            print(f"{family}/{name}: params={params} greedy_min_margin={margin:.4g} "
                  f"tensors={len(names)} e.g. {[n for n in names if 'experts' in n or 'lm_head' in n][:3]}",
                  flush=True)


if __name__ == "__main__":
    main()
