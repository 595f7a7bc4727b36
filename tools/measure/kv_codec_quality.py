#!/usr/bin/env python3
"""How far quantized KV moves a model's outputs: logit error against f32 KV (rowlm score) and
perplexity per KV codec (rowlm perplexity), on the same text. Standard library only.

    python3 tools/measure/kv_codec_quality.py build/rowlm models/rowlm-tiny tests/fixtures/tiny/heldout_sample.txt
"""
import array
import json
import math
import os
import subprocess
import sys
import tempfile

CODECS = ["f32", "bf16", "f16", "q8", "q4", "q8:32", "q4:32"]


def read_npy(path):
    with open(path, "rb") as f:
        data = f.read()
    header_len = int.from_bytes(data[8:10], "little")
    header = data[10:10 + header_len].decode()
    shape = tuple(int(x) for x in header.split("(")[1].split(")")[0].split(",") if x.strip())
    values = array.array("f")
    values.frombytes(data[10 + header_len:])
    return shape, values


def main():
    rowlm, model, text = sys.argv[1:4]
    ids = json.loads(subprocess.run([rowlm, "tokenize", "--tokenizer", model, "--text",
                                     open(text).read()], check=True, capture_output=True,
                                    text=True).stdout)["ids"][:512]
    ids_arg = ",".join(map(str, ids))
    with tempfile.TemporaryDirectory() as tmp:
        logits = {}
        for codec in CODECS:
            out = os.path.join(tmp, codec.replace(":", "_") + ".npy")
            subprocess.run([rowlm, "score", model, "--ids", ids_arg, "--logits-out", out,
                            "--kv-codec", codec], check=True, capture_output=True)
            logits[codec] = read_npy(out)
        shape, ref = logits["f32"]
        rows = []
        for codec in CODECS:
            _, v = logits[codec]
            diffs = [abs(a - b) for a, b in zip(v, ref)]
            ppl = json.loads(subprocess.run([rowlm, "perplexity", model, "--file", text, "--kv-codec",
                                             codec], check=True, capture_output=True, text=True).stdout)
            rows.append({"codec": codec, "max_abs_logit_error": max(diffs),
                         "mean_abs_logit_error": sum(diffs) / len(diffs),
                         "perplexity": ppl["perplexity"], "tokens_scored": ppl["tokens"]})
    base = rows[0]["perplexity"]
    for r in rows:
        r["perplexity_change"] = r["perplexity"] / base - 1
    print(json.dumps({"model": model, "text": text, "logit_positions": shape[0], "rows": rows}, indent=1))
    print(f"{'codec':7s} {'max |dlogit|':>13s} {'mean |dlogit|':>14s} {'perplexity':>11s} {'change':>8s}",
          file=sys.stderr)
    for r in rows:
        print(f"{r['codec']:7s} {r['max_abs_logit_error']:13.5f} {r['mean_abs_logit_error']:14.6f} "
              f"{r['perplexity']:11.4f} {100 * r['perplexity_change']:7.2f}%", file=sys.stderr)


if __name__ == "__main__":
    main()
