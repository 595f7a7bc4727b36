#pragma once
// The MoE router's arithmetic for one token, shared by every backend so that
// they route alike: softmax over E in f32 (max-subtracted, summed in index
// order), the top_k by probability (ties to the lower index), optionally
// renormalised over the k, times the per-expert scale (HF Gemma4TextRouter;
// Qwen3MoeSparseMoeBlock with norm_topk_prob). `probs` is scratch of E floats.

#include <cstdint>

namespace rowlm {

void route_token(const float* logits, int64_t E, int top_k, bool renormalize, const float* per_expert_scale,
                 float* probs, int32_t* experts, float* weights);

}  // namespace rowlm
