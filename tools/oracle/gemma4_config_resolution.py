#!/usr/bin/env python3
"""Records how transformers itself resolves Gemma 4 text configs.

rowlm's config loader (src/model/gemma4_config.cc) must resolve every layer's
attention geometry, KV donor and MLP width exactly as transformers does. This
script builds each case below as Gemma4TextConfig(**fields), keeps the JSON
that save_pretrained would write (transformers >= 5.15 writes
per_layer_config), instantiates Gemma4ForCausalLM on the meta device (no
memory, no weights), and records what the model's modules actually are.
gemma4_config_test.cc compares rowlm's resolution against the result.

Run where transformers (5.17, with gemma4) and torch are installed:

    python3 tools/oracle/gemma4_config_resolution.py tests/fixtures/gemma4_config_resolution.json
"""

import copy
import json
import sys

import torch
import transformers
from transformers import Gemma4ForCausalLM, Gemma4TextConfig

S, F = "sliding_attention", "full_attention"

COMMON = dict(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=96,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    global_head_dim=32,
    sliding_window=4,
    rms_norm_eps=1e-6,
    final_logit_softcapping=30.0,
    tie_word_embeddings=True,
    max_position_embeddings=256,
    hidden_size_per_layer_input=0,
    vocab_size_per_layer_input=128,
    rope_parameters={
        S: {"rope_type": "default", "rope_theta": 10000.0},
        F: {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1e6},
    },
)
MOE = dict(enable_moe_block=True, num_experts=8, top_k_experts=2, moe_intermediate_size=16)

# The fixtures of make_gemma4_fixtures.py, plus the corners of the config semantics.
CASES = {
    "e_series": dict(num_hidden_layers=6, layer_types=[S, S, F, S, S, F], hidden_size_per_layer_input=8,
                     num_kv_shared_layers=3, use_double_wide_mlp=True,
                     num_global_key_value_heads=1),  # ignored: attention_k_eq_v is off
    "e2b_like_mqa": dict(num_hidden_layers=10, layer_types=[S, S, S, S, F] * 2, num_key_value_heads=1,
                         hidden_size_per_layer_input=8, num_kv_shared_layers=5, use_double_wide_mlp=True),
    "dense_keqv": dict(num_hidden_layers=6, layer_types=[S, S, F, S, S, F], attention_k_eq_v=True,
                       num_global_key_value_heads=1),
    "moe_keqv": dict(num_hidden_layers=6, layer_types=[S, S, F, S, S, F], attention_k_eq_v=True,
                     num_global_key_value_heads=2, **MOE),
    "everything": dict(num_hidden_layers=4, layer_types=[S, F, S, F], hidden_size_per_layer_input=8,
                       num_kv_shared_layers=2, use_double_wide_mlp=True, attention_k_eq_v=True,
                       num_global_key_value_heads=1, **MOE),
    "default_pattern": dict(num_hidden_layers=8),  # no layer_types: 5:1, last forced full
    "last_layer_forced_full": dict(num_hidden_layers=3, layer_types=[S, F, S]),
    "global_head_dim_default": dict(num_hidden_layers=2, layer_types=[S, F], global_head_dim=None),
    "per_layer_config_literal": dict(num_hidden_layers=3, layer_types=[S, F, F],
                                     per_layer_config={"1": {"head_dim": 32, "num_key_value_heads": 1},
                                                       "2": {"head_dim": 8}}),
}


def build(fields):
    kwargs = copy.deepcopy(COMMON)
    kwargs.update(copy.deepcopy(fields))
    if kwargs.get("global_head_dim", 0) is None:
        del kwargs["global_head_dim"]
    if "per_layer_config" in kwargs:
        kwargs.pop("global_head_dim", None)
    return Gemma4TextConfig(**kwargs)


def layer_record(cfg, index, layer):
    attn = layer.self_attn
    head_dim = int(attn.head_dim)
    k_proj = getattr(attn, "k_proj", None)
    v_proj = getattr(attn, "v_proj", None)
    if k_proj is not None:
        kv_heads = k_proj.out_features // head_dim
    else:
        kv_heads = cfg.num_attention_heads // int(attn.num_key_value_groups)
    shared = bool(getattr(attn, "is_kv_shared_layer", False))
    source = getattr(attn, "kv_shared_layer_index", None) if shared else index
    mlp = layer.mlp
    return {
        "type": cfg.layer_types[index],
        "head_dim": head_dim,
        "q_heads": attn.q_proj.out_features // head_dim,
        "kv_heads": kv_heads,
        "has_k_proj": k_proj is not None,
        "has_v_proj": v_proj is not None,
        "kv_source": source,
        "intermediate": mlp.gate_proj.out_features,
        "window": int(attn.sliding_window or 0),
    }


def main(out_path):
    cases = []
    for name, fields in CASES.items():
        cfg = build(fields)
        saved = json.loads(cfg.to_json_string())
        try:
            with torch.device("meta"):
                model = Gemma4ForCausalLM(cfg)
        except Exception as e:  # a config transformers itself cannot build: recorded, not compared
            cases.append({"name": name, "config": saved, "transformers_error": f"{type(e).__name__}: {e}"})
            print(name, "transformers cannot build it:", e)
            continue
        layers = [layer_record(cfg, i, layer) for i, layer in enumerate(model.model.layers)]
        cases.append({"name": name, "config": saved, "layers": layers})
        print(name, [(l["type"][0], l["head_dim"], l["kv_heads"], l["kv_source"], l["intermediate"]) for l in layers])
    with open(out_path, "w") as f:
        json.dump({"transformers_version": transformers.__version__, "cases": cases}, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "gemma4_config_resolution.json")
