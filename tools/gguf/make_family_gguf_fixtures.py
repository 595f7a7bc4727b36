#!/usr/bin/env python3
"""GGUF files of the Llama lineage and Gemma 3 made by llama.cpp's own converter (issue 15):
one transformers fixture of each family (tests/fixtures/<family>/<case>, made by
tools/oracle/make_family_fixtures.py with transformers 5.17) converted by the v0.4.0 bundle's
convert_hf_to_gguf.py, so that gguf_families_test checks rowlm's reading of llama.cpp's names,
metadata and layouts (llama's permuted q/k, llama3's rope_freqs, Gemma 3's 1 + w norms, Qwen 3
MoE's stacked experts) against transformers' logits and rowlm's safetensors loader:

  <out>/<family>/model.gguf        the converter's output (--outtype as below)
  <out>/<family>/reference.json    source case, what was changed and why, ids_a, greedy prompt
                                   and tokens (transformers), tokenizer sample, versions
  <out>/<family>/logits_a.npy      transformers fp32 logits, only where the case had to change
  <out>/<family>/hf/               the changed case's config.json (and model.safetensors when the
                                   weights changed): the model the reference logits are of

  family     source case            outtype  changed
  llama      llama/bf16             bf16     nothing (llama3 RoPE, GQA, tied head)
  qwen2      qwen2/mqa_tied         f32      nothing (q/k/v biases, MQA, tied head)
  mistral    mistral/no_window      f32      nothing (convert writes Mistral as llama; it drops
                                             sliding_window, so the window case cannot convert)
  gemma3     gemma3/bf16            bf16     query_pre_attn_scalar 20 -> 16: llama.cpp scales
                                             queries by head_dim^-1/2 (and writes no scalar);
                                             gemma3.attention.sliding_window_pattern = 3 added
                                             (the converter writes none, llama.cpp then takes 6;
                                             the case's layers are sliding, sliding, full,
                                             sliding, period 3)
  qwen3_moe  qwen3_moe/norm_topk    bf16     its first two layers only, both routed, weights
                                             rounded to bf16: llama.cpp's qwen3moe has no dense
                                             layers (the converter cannot map mlp_only_layers)

The fixtures have no tokenizer, which the converter needs: the script writes a 128-token
byte-level BPE (ids 0-2 <pad> <eos> <bos>, the printable ASCII bytes, 29 merges), which
changes no weight. convert_hf_to_gguf.py identifies a BPE pre-tokenizer by hashing its output
on a test text, which so small a vocabulary cannot match, so the script tells it the answer
("gpt-2": GPT-2's byte-level split, which this tokenizer uses); where sentencepiece is not
installed, a stand-in module satisfies the converter's import (it is never called: no case has
a tokenizer.model). Everything else is the bundle's code.

Run on a machine with torch + transformers 5.17 + numpy + safetensors, from the repository root,
with llama.cpp v0.4.0 extracted (node-llama-cpp@3.21.1's llama/gitRelease.bundle):
    python3 tools/gguf/make_family_gguf_fixtures.py --llama-cpp /root/llama/llama.cpp \\
        --out tests/fixtures/gguf/families
(--only gemma3,llama limits the families). About a minute; about 1.9 MB in all.
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

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, "..", "oracle"))
from fixture_common import greedy, logits_of  # noqa: E402

PROMPT, GREEDY = 6, 24  # as make_family_fixtures.py
SAMPLE = "the cat sat on the mat\nin the rain"

# family -> (source case, outtype, arch written, config changes, keep layers, bf16 weights, added keys)
FAMILIES = {
    "llama": ("llama/bf16", "bf16", "llama", {}, None, False, {}),
    "qwen2": ("qwen2/mqa_tied", "f32", "qwen2", {}, None, False, {}),
    "mistral": ("mistral/no_window", "f32", "llama", {}, None, False, {}),
    "gemma3": ("gemma3/bf16", "bf16", "gemma3", {"query_pre_attn_scalar": 16}, None, False,
               {"gemma3.attention.sliding_window_pattern": 3}),
    "qwen3_moe": ("qwen3_moe/norm_topk", "bf16", "qwen3moe", {"num_hidden_layers": 2, "mlp_only_layers": []}, 2,
                  True, {}),
}


def byte_level_char(b):
    """The character byte-level BPE writes for byte b (GPT-2's bytes_to_unicode)."""
    printable = [c for c in range(256) if 33 <= c <= 126 or 161 <= c <= 172 or 174 <= c <= 255]
    if b in printable:
        return chr(b)
    return chr(256 + [c for c in range(256) if c not in printable].index(b))


def write_tokenizer(d, family):
    """128 tokens: <pad> <eos> <bos>, the byte-level characters of space, newline and the
    printable ASCII bytes, then merges; the specials are added tokens at their vocabulary ids."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    specials = ["<pad>", "<eos>", "<bos>"]
    vocab = {s: i for i, s in enumerate(specials)}
    for b in [32, 10] + list(range(33, 127)):
        vocab[byte_level_char(b)] = len(vocab)
    merges = [("t", "h"), ("th", "e"), ("Ġ", "the"), ("i", "n"), ("a", "n"), ("e", "r"), ("o", "n"),
              ("Ġ", "a"), ("e", "n"), ("r", "e"), ("Ġ", "t"), ("Ġ", "s"), ("a", "t"), ("o", "r"),
              ("Ġ", "w"), ("e", "s"), ("Ġ", "o"), ("i", "t"), ("Ġ", "c"), ("a", "l"), ("i", "s"),
              ("l", "l"), ("Ġ", "b"), ("Ġ", "f"), ("Ġ", "m"), ("Ġ", "p"), ("o", "u"), ("e", "d"), ("Ġ", "i")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    assert len(vocab) == 128, len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    assert [tok.token_to_id(s) for s in specials] == [0, 1, 2]
    tok.save(os.path.join(d, "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<eos>", "pad_token": "<pad>"}
    if family == "gemma3":
        config["bos_token"] = "<bos>"  # the case's bos_token_id 2
    if family in ("qwen2", "qwen3_moe"):
        # Qwen's tokenizer class otherwise adds an <|endoftext|> unknown token
        # at id 128, past the case's 128-entry vocabulary (the converter asserts).
        config["unk_token"] = "<pad>"
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=1)
    return tok


def derived_weights(src, dst, layers, bf16):
    """The source's tensors of the first `layers` layers (and the rest), as bf16 if asked."""
    from safetensors.torch import load_file, save_file
    kept = {}
    for name, t in load_file(os.path.join(src, "model.safetensors")).items():
        if name.startswith("model.layers.") and int(name.split(".")[2]) >= layers:
            continue
        kept[name] = t.to(torch.bfloat16) if bf16 else t
    save_file(kept, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})


def add_keys(path, keys):
    """`path` rewritten by gguf-py with `keys` (name -> u32) added to its metadata."""
    import gguf
    reader = gguf.GGUFReader(path)
    arch = reader.fields["general.architecture"].contents()
    tmp = path + ".tmp"
    writer = gguf.GGUFWriter(tmp, arch)
    for field in reader.fields.values():
        if field.name == "general.architecture" or field.name.startswith("GGUF."):
            continue  # the writer adds these itself
        sub = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), field.types[0], sub_type=sub)
    for key, value in keys.items():
        assert key not in reader.fields, key
        writer.add_key_value(key, value, gguf.GGUFValueType.UINT32)
    for t in reader.tensors:
        writer.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for t in reader.tensors:
        writer.write_tensor_data(t.data)
    writer.close()
    os.replace(tmp, path)


def tensor_types(path):
    import gguf
    return {t.name: t.tensor_type.name for t in gguf.GGUFReader(path).tensors}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-cpp", required=True, help="llama.cpp v0.4.0 source (the npm bundle's clone)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="", help="comma-separated families (default: all)")
    args = ap.parse_args()
    llama = os.path.abspath(args.llama_cpp)
    sys.path.insert(0, os.path.join(llama, "gguf-py"))
    only = {f for f in args.only.split(",") if f}
    torch.set_num_threads(4)
    total = 0
    for family, (case, outtype, arch, changes, layers, bf16, keys) in FAMILIES.items():
        if only and family not in only:
            continue
        src = os.path.join(ROOT, "tests", "fixtures", case)
        out = os.path.join(args.out, family)
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        with open(os.path.join(src, "reference.json")) as f:
            source_ref = json.load(f)
        with open(os.path.join(src, "config.json")) as f:
            config = json.load(f)
        config.update(changes)
        if bf16:
            config["dtype"] = "bfloat16"
        with tempfile.TemporaryDirectory() as work:
            with open(os.path.join(work, "config.json"), "w") as f:
                json.dump(config, f, indent=2)
            if layers is None:
                shutil.copy(os.path.join(src, "model.safetensors"), work)
            else:
                derived_weights(src, work, layers, bf16)
            tok = write_tokenizer(work, family)
            path = os.path.join(out, "model.gguf")
            # The bundle's converter in a fresh interpreter, told the pre-tokenizer's name.
            subprocess.run([sys.executable, os.path.join(HERE, "bundle_convert.py"), llama, "--pre", "gpt-2", "--",
                            work, "--outtype", outtype, "--outfile", path], check=True)
            if keys:
                add_keys(path, keys)
            ids_a = source_ref["ids_a"]
            record = {"source": case, "outtype": outtype, "architecture": arch, "config_changes": changes,
                      "added_metadata": keys, "ids_a": ids_a, "greedy_prompt": ids_a[:PROMPT],
                      "tokenizer_sample": {"text": SAMPLE, "ids": tok.encode(SAMPLE).ids},
                      "tensor_types": tensor_types(path), "transformers": transformers.__version__,
                      "torch": torch.__version__, "python": platform.python_version()}
            if changes:
                # The case's model changed: transformers' logits of the changed model.
                hf = os.path.join(out, "hf")
                os.makedirs(hf)
                shutil.copy(os.path.join(work, "config.json"), hf)
                if layers is not None:
                    shutil.copy(os.path.join(work, "model.safetensors"), hf)
                model = transformers.AutoModelForCausalLM.from_pretrained(
                    work, dtype=torch.float32, attn_implementation="eager").eval()
                np.save(os.path.join(out, "logits_a.npy"), logits_of(model, ids_a).astype(np.float32))
                cont, margin = greedy(model, ids_a[:PROMPT], GREEDY)
                record.update(greedy_tokens=cont, greedy_min_margin=margin, logits="logits_a.npy here",
                              weights="gguf/families/" + family + "/hf" if layers is not None else case)
            else:
                record.update(greedy_tokens=source_ref["greedy_tokens"],
                              greedy_min_margin=source_ref["greedy_min_margin"],
                              logits=case + "/logits_a.npy", weights=case)
            with open(os.path.join(out, "reference.json"), "w") as f:
                json.dump(record, f, indent=1)
        size = sum(os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(out) for n in names)
        total += size
        print(f"{family}: {case} -> {path} ({size} bytes with its references) "
              f"types {sorted(set(record['tensor_types'].values()))}", flush=True)
    print(f"total {total} bytes")


if __name__ == "__main__":
    main()
