#!/usr/bin/env python3
"""GGUF evidence made with llama.cpp's own tools (issue 14, item 5): a random tiny Qwen 3
(transformers 5.17) converted by the bundle's convert_hf_to_gguf.py and quantized by its
llama-quantize into each type, with transformers' fp32 logits computed on the weights that
the bundle's gguf-py dequantizes (gguf.quants.dequantize), so rowlm's GGUF reader, block
conversion and affine kernels are checked against llama.cpp's writer and gguf-py's reader:

  <out>/<TYPE>/model.gguf       llama-quantize's output (TYPE: Q8_0, Q4_0, Q4_K_M, ...)
  <out>/<TYPE>/logits_a.npy     transformers fp32 logits [T, vocab] on the dequantized weights
  <out>/<TYPE>/reference.json   ids_a, greedy_prompt, greedy_tokens (transformers, same
                                weights), greedy_min_margin, the tensor types in the file,
                                llama_cpp_greedy_tokens when llama-simple was built, versions

The model: 1 layer, hidden 256 (K-quant rows are 256 wide), 2 query heads / 1 KV head of 128,
MLP 256, tied head, vocab 288 with the byte-level BPE of tests/fixtures/qwen3/chat
(tools/oracle/make_qwen3_fixtures.py's write_tokenizer). convert_hf_to_gguf.py identifies a
BPE pre-tokenizer by hashing its output on a test text, which a 288-token vocabulary cannot
match, so the script tells it the answer ("gpt-2": GPT-2's byte-level split, which this
tokenizer uses); everything else is the bundle's code.

Run on a machine with torch + transformers 5.17 and cmake, from the repository root, with
llama.cpp v0.4.0 cloned from node-llama-cpp@3.21.1's llama/gitRelease.bundle:
    python3 tools/gguf/make_llamacpp_fixtures.py --llama-cpp /tmp/llama.cpp \\
        --out tests/fixtures/gguf/llamacpp
(builds llama-quantize and llama-simple, CPU only, into <llama-cpp>/build-rowlm first).
"""
import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
import transformers
from transformers import Qwen3Config, Qwen3ForCausalLM

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "oracle"))
from fixture_common import greedy, logits_of  # noqa: E402
from make_qwen3_fixtures import randomize, write_tokenizer  # noqa: E402

# Every block type rowlm converts, through llama-quantize's presets: Q4_K_M and Q5_K_M mix
# Q4_K/Q5_K with Q6_K, Q3_K_S is Q3_K, Q2_K mixes Q2_K with Q4_K. (Q4_1, Q5_0, Q5_1 are
# in tests/fixtures/gguf/qwen3_chat_mixed.gguf, quantized by gguf-py.)
DEFAULT_TYPES = ["Q8_0", "Q4_0", "Q4_K_M", "Q5_K_M", "Q6_K", "Q3_K_S", "Q2_K"]
CONFIG = dict(vocab_size=288, hidden_size=256, intermediate_size=256, num_hidden_layers=1,
              num_attention_heads=2, num_key_value_heads=1, head_dim=128, max_position_embeddings=256,
              rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 1e6},
              tie_word_embeddings=True, bos_token_id=None, eos_token_id=[286, 284])
LEN_A, PROMPT, GREEDY = 40, 12, 12

# llama.cpp name -> transformers name (gguf-py's tensor_mapping for Qwen 3).
LAYER = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
         "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
         "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm",
         "attn_k_norm": "self_attn.k_norm", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
         "ffn_down": "mlp.down_proj"}
GLOBAL = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
          "output.weight": "lm_head.weight"}


def hf_name(name):
    if name in GLOBAL:
        return GLOBAL[name]
    blk, bid, kind, suffix = name.split(".")
    assert blk == "blk", name
    return f"model.layers.{bid}.{LAYER[kind]}.{suffix}"


def build_tools(llama):
    build = os.path.join(llama, "build-rowlm")
    subprocess.run(["cmake", "-S", llama, "-B", build, "-DCMAKE_BUILD_TYPE=Release", "-DGGML_CUDA=OFF",
                    "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_SERVER=OFF"], check=True)
    subprocess.run(["cmake", "--build", build, "-j", str(os.cpu_count() or 4),
                    "--target", "llama-quantize", "llama-simple"], check=True)
    return os.path.join(build, "bin")


def convert(llama, model_dir, out_path):
    """The bundle's convert_hf_to_gguf.py in this process, told the pre-tokenizer's name."""
    sys.path.insert(0, os.path.join(llama, "gguf-py"))
    sys.path.insert(0, llama)
    import conversion.base
    import convert_hf_to_gguf
    conversion.base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"
    argv = sys.argv
    sys.argv = ["convert_hf_to_gguf.py", model_dir, "--outtype", "f32", "--outfile", out_path]
    try:
        convert_hf_to_gguf.main()
    finally:
        sys.argv = argv


def dequantized_model(path, cfg):
    import gguf
    reader = gguf.GGUFReader(path)
    state, types = {}, {}
    for t in reader.tensors:
        values = gguf.quants.dequantize(t.data, t.tensor_type)
        shape = [int(n) for n in reversed(t.shape)]  # ggml lists dimensions innermost first
        state[hf_name(t.name)] = torch.from_numpy(np.ascontiguousarray(values.reshape(shape), dtype=np.float32))
        types[t.name] = t.tensor_type.name
    model = Qwen3ForCausalLM._from_config(cfg, attn_implementation="eager").eval()
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    model.tie_weights()
    return model, types


def llama_cpp_greedy(bin_dir, path, prompt_text, n):
    """llama-simple's greedy continuation, as text (it prints prompt + continuation)."""
    exe = os.path.join(bin_dir, "llama-simple")
    if not os.path.exists(exe):
        return None
    # A random model's continuation can end inside a UTF-8 sequence: keep the bytes visible.
    r = subprocess.run([exe, "-m", path, "-n", str(n), prompt_text], capture_output=True)
    return r.stdout.decode("utf-8", errors="backslashreplace") if r.returncode == 0 else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-cpp", required=True, help="llama.cpp v0.4.0 source (the npm bundle's clone)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--types", default=",".join(DEFAULT_TYPES))
    ap.add_argument("--seed", type=int, default=14)
    args = ap.parse_args()
    torch.set_num_threads(4)
    bin_dir = build_tools(args.llama_cpp)
    gen = torch.Generator().manual_seed(args.seed)
    cfg = Qwen3Config(**CONFIG)
    with tempfile.TemporaryDirectory() as work:
        hf_dir = os.path.join(work, "hf")
        model = Qwen3ForCausalLM._from_config(cfg, attn_implementation="eager").eval()
        randomize(model, gen)
        model.save_pretrained(hf_dir, safe_serialization=True)
        write_tokenizer(hf_dir, cfg.vocab_size)
        f32 = os.path.join(work, "f32.gguf")
        convert(args.llama_cpp, hf_dir, f32)
        ids_a = torch.randint(0, 284, (LEN_A,), generator=gen).tolist()
        for qtype in args.types.split(","):
            d = os.path.join(args.out, qtype)
            os.makedirs(d, exist_ok=True)
            path = os.path.join(d, "model.gguf")
            subprocess.run([os.path.join(bin_dir, "llama-quantize"), f32, path, qtype], check=True)
            ref, types = dequantized_model(path, cfg)
            np.save(os.path.join(d, "logits_a.npy"), logits_of(ref, ids_a).astype(np.float32))
            cont, margin = greedy(ref, ids_a[:PROMPT], GREEDY)
            record = {"ids_a": ids_a, "greedy_prompt": ids_a[:PROMPT], "greedy_tokens": cont,
                      "greedy_min_margin": margin, "llama_quantize_type": qtype, "tensor_types": types,
                      "transformers": transformers.__version__, "torch": torch.__version__,
                      "python": platform.python_version()}
            text = "the cat sat on the mat"
            out = llama_cpp_greedy(bin_dir, path, text, GREEDY)
            if out is not None:
                record["llama_cpp_greedy"] = {"prompt": text, "output": out}
                record["transformers_greedy_on_text"] = greedy(ref, ref_ids(hf_dir, text), GREEDY)[0]
            with open(os.path.join(d, "reference.json"), "w") as f:
                json.dump(record, f, indent=1)
            print(qtype, os.path.getsize(path), "bytes", sorted(set(types.values())))


def ref_ids(hf_dir, text):
    from tokenizers import Tokenizer
    return Tokenizer.from_file(os.path.join(hf_dir, "tokenizer.json")).encode(text).ids


if __name__ == "__main__":
    main()
