#!/usr/bin/env python3
"""Reference fixtures for rowlm's Gemma 4 assistant drafter, from Hugging Face transformers.

Builds pairs of a tiny random target (Gemma4ForCausalLM) and a tiny random assistant
(Gemma4AssistantForCausalLM: a small Gemma 4 text stack whose layers all read the target's
KV, pre_projection from [target embedding(token) ; target hidden], post_projection back to the
target's width, optionally the ordered embedding with centroids), saves both checkpoints, and
records the assistant's greedy drafts computed by transformers:

  <out>/<case>/target/{config.json,model.safetensors}      the target, as save_pretrained writes
  <out>/<case>/assistant/{config.json,model.safetensors}   the assistant, likewise
  <out>/<case>/draft_logits.npy      [rounds, K, vocab] fp32 logits of every draft step
  <out>/<case>/reference.json        the rounds (committed tokens, drafts, margins), the
                                     wiring found in transformers' own assisted generation,
                                     the tensors of both checkpoints, versions

A round is one speculative step of greedy decoding, as transformers'
SinglePositionMultiTokenCandidateGenerator runs it: with the row's committed tokens c[0..L-1]
(the target has KV for c[0..L-2]; its hidden state at L-2 predicted c[L-1]), draft step 0 feeds
cat(target_embed(c[L-1]), target_hidden[L-2]) at position L-1 against the target's shared KV
(the last layer of each attention type) over positions 0..L-2; step j>0 feeds
cat(target_embed(draft_j), assistant.last_hidden_state of step j-1), same position, same KV.
The target then verifies; the committed tokens grow by the accepted drafts and the target's
next token (so they are always the target's greedy continuation).

These rounds are computed by direct calls of the assistant's forward, on the target's KV and
hidden states from a cache-free forward over the verified tokens. (transformers' own assisted
generation differs after its first round: its shared KV is the verification forward's, cropped
to the committed length, so it still holds the slot of the position being drafted from, which
verification filled with a rejected draft's KV, and its sliding entries are the cache's last
ones. The direct calls give the assistant only the verified tokens' KV, which is what rowlm
does; "hf_generate" records where and how the two differ: kv_lens, state_seen.) Which target embedding
(scaled or raw) and which hidden state (final norm or last layer's output) they use is read off
transformers' own assisted generation (target.generate(assistant_model=...)), whose assistant
calls are recorded too and compared with the direct calls (reference.json "hf_generate"); if
that generation fails or cannot be matched, the defaults below are used and the reason is
recorded.

Every weight is random (make_gemma4_fixtures.randomize), including norms and layer scalars;
the ordered embedding's token_ordering is a random permutation. Sequences run past three
sliding windows.

Needs only torch, transformers (>= 5.17, with gemma4_assistant), safetensors and numpy. Run
from the repository root:
    python3 tools/oracle/make_assistant_fixtures.py --out tests/fixtures/gemma4_assistant
"""
import argparse
import json
import os
import platform
import traceback

import numpy as np
import torch
import transformers
from safetensors import safe_open
from transformers import Gemma4ForCausalLM, Gemma4TextConfig

import make_gemma4_fixtures as g4

try:  # the module's own path, whatever transformers exports at the top level
    from transformers.models.gemma4_assistant import Gemma4AssistantConfig, Gemma4AssistantForCausalLM
except ImportError:  # pragma: no cover
    from transformers import Gemma4AssistantConfig, Gemma4AssistantForCausalLM

S, F = "sliding_attention", "full_attention"

# Widths small enough for a few hundred KB per pair. Head sizes and KV heads are the target's:
# the assistant's queries read the target's keys and values.
TARGET = dict(g4.COMMON, hidden_size=32, intermediate_size=64, num_attention_heads=2,
              num_key_value_heads=2, head_dim=16, global_head_dim=32,
              hidden_size_per_layer_input=0, vocab_size_per_layer_input=128)
ASSISTANT = dict(vocab_size=128, hidden_size=24, intermediate_size=48, num_attention_heads=2,
                 num_key_value_heads=2, head_dim=16, global_head_dim=32,
                 sliding_window=TARGET["sliding_window"], rms_norm_eps=1e-6, tie_word_embeddings=True,
                 max_position_embeddings=256, rope_parameters=TARGET["rope_parameters"],
                 hidden_size_per_layer_input=0, vocab_size_per_layer_input=0,
                 enable_moe_block=False, use_double_wide_mlp=False,
                 num_hidden_layers=3, layer_types=[S, S, F], num_kv_shared_layers=3)

# name: (target fields, assistant text fields, assistant config fields)
CASES = {
    # No KV sharing in the target: the assistant reads layers 3 (sliding) and 4 (full).
    "plain": (dict(num_hidden_layers=5, layer_types=[S, S, F, S, F]), {},
              dict(use_ordered_embeddings=False)),
    # E-series target (per-layer inputs, KV sharing: its last layers read donors' KV) and the
    # ordered embedding (4 of 8 centroids of 16 tokens each are scored per draft).
    "e_series_ordered": (dict(num_hidden_layers=4, layer_types=[S, F, S, F],
                              hidden_size_per_layer_input=8, num_kv_shared_layers=2,
                              use_double_wide_mlp=True), {},
                         dict(use_ordered_embeddings=True, num_centroids=8,
                              centroid_intermediate_top_k=4)),
    # K = V on the full layers of both (one global KV head).
    "keqv": (dict(num_hidden_layers=4, layer_types=[S, F, S, F], attention_k_eq_v=True,
                  num_global_key_value_heads=1),
             dict(attention_k_eq_v=True, num_global_key_value_heads=1),
             dict(use_ordered_embeddings=False)),
}

PROMPTS = (3, 6, 11)   # prompt lengths; generation runs past 3 windows of 4
NEW_TOKENS = 12        # committed tokens generated after each prompt
DRAFTS = 4             # draft steps per round (num_assistant_tokens)

# Used when transformers' assisted generation cannot tell (reference.json says why).
DEFAULT_WIRING = {"embedding": "scaled", "hidden": "final_norm"}


def randomize_assistant(model, gen):
    g4.randomize(model, gen)
    with torch.no_grad():
        for name, b in model.named_buffers():
            if name.endswith("token_ordering"):
                b.copy_(torch.randperm(b.numel(), generator=gen).to(b.dtype))


def clean_dir(d, keep):
    for fn in os.listdir(d):  # save_pretrained may add generation_config.json
        if fn not in keep:
            os.remove(os.path.join(d, fn))


def tensors_of(path):
    with safe_open(path, framework="pt") as f:
        return {k: [str(f.get_slice(k).get_dtype()), list(f.get_slice(k).get_shape())] for k in f.keys()}


class TargetPass:
    """One cache-free target forward over `ids`: logits, the candidate hidden states, shared KV."""

    @torch.no_grad()
    def __init__(self, target, ids):
        captured = {}
        layer = target.model.layers[-1]
        hook = layer.register_forward_hook(
            lambda m, a, o: captured.__setitem__("last_layer", o[0] if isinstance(o, tuple) else o))
        try:
            out = target.model(input_ids=torch.tensor([ids]), use_cache=False,
                               output_hidden_states=True, return_shared_kv_states=True)
        finally:
            hook.remove()
        self.shared = getattr(out, "shared_kv_states", None)
        if not self.shared:  # some versions fill it only with a cache
            out = target.model(input_ids=torch.tensor([ids]), use_cache=True,
                               output_hidden_states=True, return_shared_kv_states=True)
            self.shared = out.shared_kv_states
        self.hidden = {"final_norm": out.last_hidden_state[0], "last_layer": captured["last_layer"][0]}
        self.logits = target(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float()


def embed(target, kind, token):
    emb = target.get_input_embeddings()
    ids = torch.tensor([[token]])
    if kind == "scaled":
        return emb(ids)
    return torch.nn.functional.embedding(ids, emb.weight)


@torch.no_grad()
def draft_round(target, assistant, committed, wiring, k):
    """The K greedy drafts after `committed` (the target has KV for all but its last token)."""
    L = len(committed)
    tp = TargetPass(target, committed[:-1])
    kv = {t: (kv_[0][:, :, :L - 1], kv_[1][:, :, :L - 1]) for t, kv_ in tp.shared.items()}
    hidden = tp.hidden[wiring["hidden"]][L - 2].view(1, 1, -1)
    position = torch.tensor([[L - 1]])
    mask = torch.ones(1, L, dtype=torch.long)
    token, drafts, logits = committed[-1], [], []
    for _ in range(k):
        x = torch.cat([embed(target, wiring["embedding"], token), hidden], dim=-1)
        out = assistant(inputs_embeds=x, position_ids=position, attention_mask=mask,
                        shared_kv_states=kv)
        lg = out.logits[0, -1].float()
        token = int(torch.argmax(lg))
        drafts.append(token)
        logits.append(lg.numpy())
        hidden = out.last_hidden_state
    return drafts, np.stack(logits)


def margin_of(lg):
    top2 = np.sort(lg)[-2:]
    return float(top2[1] - top2[0])


@torch.no_grad()
def greedy_with_margins(target, prompt, n):
    ids, margins = list(prompt), []
    for _ in range(n):
        last = TargetPass(target, ids).logits[-1].numpy()
        margins.append(margin_of(last))
        ids.append(int(np.argmax(last)))
    return ids, margins


@torch.no_grad()
def record_hf_generate(target, assistant, prompt, n, k):
    """transformers' assisted generation with the assistant's calls recorded."""
    calls = []

    def hook(module, args, kwargs, out):
        kv = kwargs.get("shared_kv_states") or {}
        calls.append({
            "inputs_embeds": kwargs["inputs_embeds"].detach().float().clone(),
            "position": int(kwargs["position_ids"].reshape(-1)[-1]),
            "kv_lens": {t: int(v[0].shape[2]) for t, v in kv.items()},
            "mask_len": (None if kwargs.get("attention_mask") is None
                         else int(kwargs["attention_mask"].shape[-1])),
            "logits": out.logits[0, -1].detach().float().clone(),
            "last_hidden": out.last_hidden_state.detach().float().clone(),
        })

    handle = assistant.register_forward_hook(hook, with_kwargs=True)
    try:
        assistant.generation_config.num_assistant_tokens = k
        assistant.generation_config.num_assistant_tokens_schedule = "constant"
        assistant.generation_config.assistant_confidence_threshold = 0.0
        for m in (target, assistant):
            m.generation_config.eos_token_id = None
            m.generation_config.pad_token_id = 0
        out = target.generate(input_ids=torch.tensor([prompt]), assistant_model=assistant,
                              max_new_tokens=n, do_sample=False, pad_token_id=0)
    finally:
        handle.remove()
    return out[0].tolist(), calls


def state_source(x, tp, H):
    """Which of the target pass's hidden states (kind, position) `x` is, or None."""
    for kind in ("final_norm", "last_layer"):  # hidden_states[-1] is one of these
        for pos in range(tp.hidden[kind].shape[0] - 1, -1, -1):
            if torch.allclose(x, tp.hidden[kind][pos].float(), atol=1e-4, rtol=1e-3):
                return kind, pos
    return None


def find_wiring(target, prompt, greedy_ids, calls):
    """Which embedding and hidden state transformers fed the assistant's first draft step."""
    first = calls[0]
    P = first["position"]  # committed length P + 1: the prompt's next token is pending
    x = first["inputs_embeds"].reshape(-1)
    H = x.numel() // 2
    found = {"first_state": x[H:].tolist()}
    for kind in ("scaled", "raw"):
        if torch.allclose(x[:H], embed(target, kind, greedy_ids[P]).reshape(-1).float(),
                          atol=1e-5, rtol=1e-4):
            found["embedding"] = kind
    # The state: a hidden state of the prompt's pass, at which position (P - 1 expected).
    source = state_source(x[H:], TargetPass(target, greedy_ids[:P]), H)
    if source:
        found["hidden_seen"], found["hidden_seen_position"] = source[0], source[1] - (P - 1)
        if source[1] == P - 1:
            found["hidden"] = source[0]
    return found


def compare_hf_rounds(target, assistant, greedy_ids, calls, wiring, k):
    """Groups the recorded calls into rounds (one position each) and redoes each directly."""
    rounds, i = [], 0
    while i < len(calls):
        j = i
        while j < len(calls) and calls[j]["position"] == calls[i]["position"]:
            j += 1
        pos = calls[i]["position"]
        hf_drafts = [int(torch.argmax(c["logits"])) for c in calls[i:j]]
        entry = {"committed_len": pos + 1, "kv_lens": calls[i]["kv_lens"],
                 "mask_len": calls[i]["mask_len"], "hf_drafts": hf_drafts}
        # The round's first state, located among a clean pass's hidden states over the
        # committed tokens but the last (offset 0: the last computed position).
        x = calls[i]["inputs_embeds"].reshape(-1)
        H = x.numel() // 2
        if pos >= 1:
            source = state_source(x[H:], TargetPass(target, greedy_ids[:pos]), H)
            entry["state_seen"] = None if source is None else [source[0], source[1] - (pos - 1)]
        if pos + 1 <= len(greedy_ids):
            drafts, logits = draft_round(target, assistant, greedy_ids[:pos + 1], wiring, j - i)
            hf_logits = np.stack([c["logits"].numpy() for c in calls[i:j]])
            entry.update(direct_drafts=drafts, matches_direct=drafts == hf_drafts,
                         max_logit_diff=float(np.max(np.abs(hf_logits - logits))))
        rounds.append(entry)
        i = j
    return rounds


def make_pair(name, fields, gen, out):
    t_fields, a_text_fields, a_fields = fields
    t_cfg = Gemma4TextConfig(**{**TARGET, **t_fields})
    target = Gemma4ForCausalLM._from_config(t_cfg, attn_implementation="eager").eval()
    g4.randomize(target, gen)
    a_cfg = Gemma4AssistantConfig(text_config={**ASSISTANT, **a_text_fields},
                                  backbone_hidden_size=t_cfg.hidden_size, **a_fields)
    assistant = Gemma4AssistantForCausalLM._from_config(a_cfg, attn_implementation="eager").eval()
    randomize_assistant(assistant, gen)

    d = os.path.join(out, name)
    for sub, model in (("target", target), ("assistant", assistant)):
        os.makedirs(os.path.join(d, sub), exist_ok=True)
        model.save_pretrained(os.path.join(d, sub), safe_serialization=True)
        clean_dir(os.path.join(d, sub), ("config.json", "model.safetensors"))
    # fp32 arithmetic on the stored weights, with fp32 buffers (as make_gemma4_fixtures does).
    target = Gemma4ForCausalLM.from_pretrained(os.path.join(d, "target"), dtype=torch.float32,
                                               attn_implementation="eager").eval()
    assistant = Gemma4AssistantForCausalLM.from_pretrained(
        os.path.join(d, "assistant"), dtype=torch.float32, attn_implementation="eager").eval()

    prompts = [torch.randint(0, t_cfg.vocab_size, (n,), generator=gen).tolist() for n in PROMPTS]
    greedy = [greedy_with_margins(target, p, NEW_TOKENS + DRAFTS + 1) for p in prompts]

    # transformers' own assisted generation: the wiring, and a cross-check of the direct calls.
    wiring, hf_report = dict(DEFAULT_WIRING), {}
    try:
        hf_out, calls = record_hf_generate(target, assistant, prompts[-1], NEW_TOKENS, DRAFTS)
        g_ids = greedy[-1][0]
        hf_report["output_equals_greedy"] = hf_out == g_ids[:len(hf_out)]
        hf_report["calls"] = len(calls)
        found = find_wiring(target, prompts[-1], g_ids, calls) if calls else {}
        hf_report["wiring_found"] = found
        wiring.update(found)
        hf_report["rounds"] = compare_hf_rounds(target, assistant, g_ids, calls, wiring, DRAFTS)
    except Exception:  # recorded, not fatal: the direct calls below still make the fixture
        hf_report["error"] = traceback.format_exc()
    hf_report["wiring_used"] = wiring

    rounds, all_logits = [], []
    for pi, (prompt, (g_ids, margins)) in enumerate(zip(prompts, greedy)):
        committed = len(prompt) + 1  # the target's first token is committed by the prefill
        while committed <= len(prompt) + NEW_TOKENS:
            drafts, logits = draft_round(target, assistant, g_ids[:committed], wiring, DRAFTS)
            accepted = 0
            while accepted < DRAFTS and drafts[accepted] == g_ids[committed + accepted]:
                accepted += 1
            rounds.append({
                "prompt": pi, "committed": g_ids[:committed], "drafts": drafts,
                "draft_margins": [margin_of(lg) for lg in logits], "accepted": accepted,
                # the target's decisions these drafts were judged against
                "target_next": g_ids[committed:committed + DRAFTS + 1],
                "target_margins": margins[committed - len(prompt):committed - len(prompt) + DRAFTS + 1],
            })
            all_logits.append(logits)
            committed += accepted + 1
    np.save(os.path.join(d, "draft_logits.npy"), np.stack(all_logits).astype(np.float32))
    with open(os.path.join(d, "reference.json"), "w") as f:
        json.dump({
            "prompts": prompts, "draft_steps": DRAFTS, "wiring": wiring, "rounds": rounds,
            "target_greedy": [g for g, _ in greedy],
            "target_greedy_margins": [m for _, m in greedy],
            "hf_generate": hf_report,
            "target_tensors": tensors_of(os.path.join(d, "target", "model.safetensors")),
            "assistant_tensors": tensors_of(os.path.join(d, "assistant", "model.safetensors")),
            "transformers": transformers.__version__, "torch": torch.__version__,
            "python": platform.python_version(),
        }, f, indent=1)
    ok = hf_report.get("rounds") and all(r.get("matches_direct") for r in hf_report["rounds"])
    print(f"{name}: rounds={len(rounds)} wiring={wiring} hf_rounds_match_direct={bool(ok)}"
          + (" hf_error" if "error" in hf_report else ""), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=4242)
    args = ap.parse_args()
    torch.set_num_threads(4)
    failed = []
    for case_index, (name, fields) in enumerate(CASES.items()):
        try:  # one case's failure leaves the others' fixtures
            make_pair(name, fields, torch.Generator().manual_seed(args.seed + case_index), args.out)
        except Exception:
            traceback.print_exc()
            failed.append(name)
    if failed:
        raise SystemExit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
