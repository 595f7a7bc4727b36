#!/usr/bin/env python3
"""Evaluates the bundled models with transformers (fp32 arithmetic on the stored bf16 weights)
and writes the reference fixtures rowlm's tests compare against.

Perplexity, as rowlm's `perplexity` command computes it: the text is tokenized without special
tokens and cut into consecutive windows of ctx-1 tokens; each window is scored after a <bos>;
ppl = exp(total NLL / number of scored tokens).

Writes <model>/eval.json (held-out ppl, unigram baseline, samples) for each model, and into
--fixtures: heldout_sample.txt, reference.json (perplexity of the sample and greedy
continuations of three prompts for both models, with their smallest top-1 margins).

    python3 tools/train_tiny/evaluate.py --corpus CORPUS --target models/rowlm-tiny \
        --draft models/rowlm-tiny-draft --fixtures tests/fixtures/tiny
"""
import argparse
import json
import math
import os

import numpy as np
import torch
from tokenizers import Tokenizer
from transformers import Gemma4ForCausalLM

BOS = 2
CTX = 512
PROMPTS = [
    ("text", "In the beginning"),
    ("text", "The Python interpreter"),
    ("chat", '<bos><|turn>user\nWhat does "river" mean?<turn|>\n<|turn>model\n'),
]
SAMPLE_PROMPTS = ["In the beginning", "And the king said unto", "A river is",
                  "The Python interpreter", "Lists in Python"]


def prompt_ids(tok, kind, text):
    ids = tok.encode(text, add_special_tokens=False).ids
    return [BOS] + ids if kind == "text" else ids


@torch.no_grad()
def perplexity(model, ids, device):
    nll, count = 0.0, 0
    for start in range(0, len(ids), CTX - 1):
        chunk = ids[start:start + CTX - 1]
        seq = torch.tensor([[BOS] + chunk], device=device)
        logits = model(input_ids=seq, use_cache=False).logits[0, :-1].double()
        logp = torch.log_softmax(logits, dim=-1)
        nll -= logp.gather(1, seq[0, 1:, None]).sum().item()
        count += len(chunk)
    return math.exp(nll / count), count


@torch.no_grad()
def greedy(model, ids, n, device):
    ids, margins = list(ids), []
    start = len(ids)
    for _ in range(n):
        last = model(input_ids=torch.tensor([ids], device=device), use_cache=False).logits[0, -1]
        top = torch.topk(last.double(), 2).values
        margins.append(float(top[0] - top[1]))
        ids.append(int(torch.argmax(last)))
    return ids[start:], min(margins)


def sample_text(model, tok, prompt, device, greedy_mode, seed):
    ids = torch.tensor([prompt_ids(tok, "text", prompt)], device=device)
    torch.manual_seed(seed)
    kw = dict(do_sample=False) if greedy_mode else dict(do_sample=True, temperature=0.8, top_p=0.95)
    out = model.generate(ids, max_new_tokens=40, eos_token_id=[1, 106], pad_token_id=0, **kw)
    return prompt + tok.decode(out[0, ids.shape[1]:].tolist(), skip_special_tokens=True)


def unigram_ppl(tok, corpus, heldout_ids):
    counts = np.ones(tok.get_vocab_size(), dtype=np.float64)  # add-one smoothing
    docs = [json.loads(line)["text"] for line in open(os.path.join(corpus, "train.jsonl"))]
    for enc in tok.encode_batch(docs, add_special_tokens=False):
        np.add.at(counts, np.asarray(enc.ids), 1)
    logp = np.log(counts / counts.sum())
    return math.exp(-logp[np.asarray(heldout_ids)].mean())


def heldout_sample(text, chars=8000):
    paragraphs = [p for p in text.split("\n\n") if p.strip()]
    step = max(1, len(paragraphs) // 40)
    out = []
    for p in paragraphs[::step]:
        if sum(len(x) + 2 for x in out) + len(p) > chars:
            continue
        out.append(p.strip())
    return "\n\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft", required=True)
    ap.add_argument("--fixtures", required=True)
    args = ap.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    tok = Tokenizer.from_file(os.path.join(args.target, "tokenizer.json"))
    heldout_text = open(os.path.join(args.corpus, "heldout.txt")).read()
    heldout_ids = tok.encode(heldout_text, add_special_tokens=False).ids
    sample = heldout_sample(heldout_text)
    sample_ids = tok.encode(sample, add_special_tokens=False).ids
    os.makedirs(args.fixtures, exist_ok=True)
    with open(os.path.join(args.fixtures, "heldout_sample.txt"), "w") as f:
        f.write(sample)
    unigram = unigram_ppl(tok, args.corpus, heldout_ids)
    reference = {"ctx": CTX, "heldout_sample_tokens": len(sample_ids), "models": {}}
    for role, path in (("target", args.target), ("draft", args.draft)):
        model = Gemma4ForCausalLM.from_pretrained(path, dtype=torch.float32,
                                                  attn_implementation="eager").to(device).eval()
        ppl, n = perplexity(model, heldout_ids, device)
        sample_ppl, _ = perplexity(model, sample_ids, device)
        cont = []
        for kind, text in PROMPTS:
            ids = prompt_ids(tok, kind, text)
            toks, margin = greedy(model, ids, 32, device)
            cont.append({"kind": kind, "prompt": text, "prompt_ids": ids, "greedy_tokens": toks,
                         "min_margin": margin})
        samples = [{"prompt": p, "greedy": sample_text(model, tok, p, device, True, 0),
                    "sampled_t0.8_p0.95_seed1": sample_text(model, tok, p, device, False, 1)}
                   for p in SAMPLE_PROMPTS]
        with open(os.path.join(path, "eval.json"), "w") as f:
            json.dump({"heldout_tokens": n, "heldout_ppl": ppl, "unigram_heldout_ppl": unigram,
                       "samples": samples}, f, indent=1, ensure_ascii=False)
        reference["models"][role] = {"heldout_sample_ppl": sample_ppl, "greedy": cont}
        print(f"{role}: heldout ppl {ppl:.3f} over {n} tokens (unigram {unigram:.1f}); "
              f"sample ppl {sample_ppl:.4f}", flush=True)
        for s in samples[:3]:
            print("  ", json.dumps(s, ensure_ascii=False)[:400], flush=True)
    with open(os.path.join(args.fixtures, "reference.json"), "w") as f:
        json.dump(reference, f, indent=1)


if __name__ == "__main__":
    main()
