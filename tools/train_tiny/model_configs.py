"""The bundled models' architectures (Gemma4ForCausalLM configs)."""

S, F = "sliding_attention", "full_attention"
ROPE = {
    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
    "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                       "rope_theta": 1000000.0},
}
COMMON = dict(vocab_size=8192, vocab_size_per_layer_input=8192, rms_norm_eps=1e-6,
              final_logit_softcapping=30.0, tie_word_embeddings=True,
              max_position_embeddings=4096, rope_parameters=ROPE,
              bos_token_id=2, eos_token_id=[1, 106], pad_token_id=0)

# E2B-style: 4:1 sliding/full, MQA, proportional RoPE on full layers, per-layer embeddings,
# the last 4 layers share the KV of layers 4 (full) and 5 (sliding), double-wide MLP there.
TARGET = dict(COMMON, hidden_size=256, intermediate_size=1024, num_hidden_layers=10,
              layer_types=[S, S, S, S, F] * 2, num_attention_heads=4, num_key_value_heads=1,
              head_dim=64, global_head_dim=128, sliding_window=64,
              hidden_size_per_layer_input=32, num_kv_shared_layers=4, use_double_wide_mlp=True)

# A much smaller draft for speculative decoding: same tokenizer, no PLE, no sharing.
DRAFT = dict(COMMON, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
             layer_types=[S, S, S, F], num_attention_heads=2, num_key_value_heads=1,
             head_dim=64, global_head_dim=128, sliding_window=64,
             hidden_size_per_layer_input=0, num_kv_shared_layers=0)

CONFIGS = {"target": TARGET, "draft": DRAFT}
