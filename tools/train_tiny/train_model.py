#!/usr/bin/env python3
"""Trains one of the bundled Gemma4ForCausalLM models (model_configs.py) on the corpus from
build_corpus.py with the tokenizer from train_tokenizer.py, within a wall-clock budget, and
saves it as a Hugging Face model directory with bf16 weights.

    python3 tools/train_tiny/train_model.py --config target --corpus CORPUS --tokenizer TOKDIR \
        --out models/rowlm-tiny --steps 855

Seeded. With --seconds the step count is fixed after timing the first steps, so the
learning-rate schedule spans the budget; --steps gives it exactly (training_log.json records it). Runs on a CUDA GPU (bf16 autocast) or, slowly, on the CPU.
"""
import argparse
import json
import math
import os
import shutil
import sys
import time

import numpy as np
import torch
from tokenizers import Tokenizer
from transformers import Gemma4ForCausalLM, Gemma4TextConfig

sys.path.insert(0, os.path.dirname(__file__))
from model_configs import CONFIGS  # noqa: E402

BOS, EOS = 2, 1


def token_stream(tok, path):
    docs = [json.loads(line) for line in open(path)]
    encoded = tok.encode_batch([d["text"] for d in docs], add_special_tokens=False)
    out = []
    for d, e in zip(docs, encoded):
        # Chat documents carry their own <bos> and end with <turn|>; prose gets <bos> … <eos>.
        out.append(np.asarray(e.ids if d["source"] == "wordnet-chat" else [BOS] + e.ids + [EOS],
                              dtype=np.int32))
    return np.concatenate(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", choices=sorted(CONFIGS), required=True)
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--tokenizer", required=True, help="directory with tokenizer.json")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, help="wall-clock budget; the step count follows from it")
    ap.add_argument("--steps", type=int, help="exact number of steps (reproduces a logged run)")
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if (args.seconds is None) == (args.steps is None):
        ap.error("give exactly one of --seconds and --steps")
    start = time.time()
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.backends.cuda.matmul.allow_tf32 = True

    tok = Tokenizer.from_file(os.path.join(args.tokenizer, "tokenizer.json"))
    train = token_stream(tok, os.path.join(args.corpus, "train.jsonl"))
    print(f"[{args.config}] train tokens {len(train)}", flush=True)

    cfg = Gemma4TextConfig(**CONFIGS[args.config])
    model = Gemma4ForCausalLM._from_config(cfg, attn_implementation="sdpa").to(device)
    params = sum(p.numel() for p in model.parameters())
    print(f"[{args.config}] parameters {params}", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.1,
                            fused=device == "cuda")
    train_t = torch.from_numpy(train.astype(np.int64))

    def batch(stream, n):
        offsets = rng.integers(0, len(stream) - args.seq - 1, size=n)
        return torch.stack([stream[o:o + args.seq] for o in offsets]).to(device, non_blocking=True)

    warmup, total_steps, step, losses = 100, args.steps, 0, []
    t0 = time.time()
    model.train()
    while True:
        if total_steps is None and step == 30:
            per_step = (time.time() - t0) / 30
            total_steps = 30 + int((args.seconds - (time.time() - start) - 20) / per_step)
            print(f"[{args.config}] {per_step*1000:.1f} ms/step -> {total_steps} steps", flush=True)
        if total_steps is not None and step >= total_steps:
            break
        horizon = total_steps or 10**9
        lr = args.lr * min(1.0, (step + 1) / warmup) * (
            0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, step / horizon))))
        for g in opt.param_groups:
            g["lr"] = lr
        x = batch(train_t, args.batch)
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            loss = model(input_ids=x, labels=x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item()) if step % 10 == 0 else None
        if step % 200 == 0:
            print(f"[{args.config}] step {step} loss {loss.item():.3f} lr {lr:.2e} "
                  f"t={time.time()-start:.0f}s", flush=True)
        step += 1
    train_seconds = time.time() - t0

    model = model.to(torch.bfloat16)
    os.makedirs(args.out, exist_ok=True)
    model.save_pretrained(args.out, safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        src = os.path.join(args.tokenizer, name)
        if os.path.exists(src):
            shutil.copy(src, os.path.join(args.out, name))
    with open(os.path.join(args.out, "training_log.json"), "w") as f:
        json.dump({"config": args.config, "parameters": params, "steps": step,
                   "batch": args.batch, "seq": args.seq, "tokens_seen": step * args.batch * args.seq,
                   "train_tokens": int(len(train)), "train_seconds": round(train_seconds, 1),
                   "final_train_loss": float(np.mean(losses[-20:])), "lr": args.lr,
                   "seed": args.seed, "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
                   "torch": torch.__version__}, f, indent=1)
    print(f"[{args.config}] done: {step} steps in {train_seconds:.0f}s, "
          f"loss {np.mean(losses[-20:]):.3f}", flush=True)


if __name__ == "__main__":
    main()
