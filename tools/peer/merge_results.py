#!/usr/bin/env python3
"""One JSON from a compare_gpu.sh run directory: llama.cpp's and rowlm's
figures for one checkpoint, side by side, with rowlm / llama.cpp ratios.

    tools/peer/merge_results.py --shape e4b /root/peer/e4b-results

Reads llama-bench.json (llama-bench -o json: pp512 and tg128),
llama-batched-bench.log (its --output-format jsonl lines), rowlm-bench.json
(rowlm bench: the forward alone, with the ceilings measured in the same run)
and rowlm-concurrency.json (rowlm bench --concurrency: the engine). What is
compared with what:
  decode at batch B    rowlm bench's decode tokens/s (best step; the median
                       beside it) against llama-bench's tg128 at B = 1 and
                       llama-batched-bench's S_TG (decode only, PP128/TG128)
  prefill              rowlm bench --prefill 512 against llama-bench's pp512
  engine at C requests rowlm's aggregate tokens/s over the whole run (its
                       prefill included, so this ratio understates rowlm)
                       against llama-batched-bench's S_TG at npl = C
Standard library only.
"""
import argparse
import json
from pathlib import Path


def llama_bench(path):
    out = {}
    for t in json.loads(path.read_text()):
        if t.get("n_prompt", 0) > 0 and t.get("n_gen", 0) == 0:
            out["prefill_tokens"] = t["n_prompt"]
            out["prefill_tokens_per_s"] = t["avg_ts"]
        elif t.get("n_gen", 0) > 0 and t.get("n_prompt", 0) == 0:
            out["decode_batch1_tokens_per_s"] = t["avg_ts"]
    return out


def llama_batched(path):
    rows = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line.startswith("{") and '"speed_tg"' in line:
            r = json.loads(line)
            rows[int(r["pl"])] = {"decode_tokens_per_s": r["speed_tg"], "prefill_tokens_per_s": r["speed_pp"],
                                  "overall_tokens_per_s": r["speed"]}
    return rows


def ratio(a, b):
    return round(a / b, 3) if a and b else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", required=True)
    ap.add_argument("results", type=Path)
    a = ap.parse_args()
    d = a.results
    lb = llama_bench(d / "llama-bench.json")
    lbb = llama_batched(d / "llama-batched-bench.log")
    rb = json.loads((d / "rowlm-bench.json").read_text())
    rc = json.loads((d / "rowlm-concurrency.json").read_text())

    decode = []
    for r in rb["decode"]:
        b = r["batch"]
        peer = lb.get("decode_batch1_tokens_per_s") if b == 1 else lbb.get(b, {}).get("decode_tokens_per_s")
        decode.append({"batch": b, "rowlm_tokens_per_s": r["tokens_per_s"],
                       "rowlm_tokens_per_s_median": r["tokens_per_s_median"],
                       "rowlm_fraction_of_bandwidth": r.get("fraction_of_bandwidth"),
                       "llama_cpp_tokens_per_s": peer, "ratio": ratio(r["tokens_per_s"], peer)})
    engine = []
    for r in rc["runs"]:
        c = r["concurrency"]
        peer = lbb.get(c, {}).get("decode_tokens_per_s")
        engine.append({"requests": c, "rowlm_aggregate_tokens_per_s": r["aggregate_tokens_per_s"],
                       "rowlm_ttft_p50_s": r["time_to_first_token_p50_s"],
                       "rowlm_ttft_p95_s": r["time_to_first_token_p95_s"],
                       "llama_cpp_decode_tokens_per_s": peer,
                       "ratio": ratio(r["aggregate_tokens_per_s"], peer)})
    prefill = {"tokens": rb["prefill"]["tokens"], "rowlm_tokens_per_s": rb["prefill"]["tokens_per_s"],
               "llama_cpp_tokens_per_s": lb.get("prefill_tokens_per_s"),
               "ratio": ratio(rb["prefill"]["tokens_per_s"], lb.get("prefill_tokens_per_s"))}
    gpu = (d / "gpu.txt").read_text().strip() if (d / "gpu.txt").exists() else ""
    print(json.dumps({"shape": a.shape, "gpu": gpu, "rowlm_backend": rb.get("backend"),
                      "ceilings": rb.get("ceilings"), "streamed_weight_bytes_per_step": rb.get("streamed_weight_bytes_per_step"),
                      "prefill": prefill, "decode": decode, "engine": engine,
                      "llama_cpp_batched": {str(k): v for k, v in sorted(lbb.items())}}, indent=1))


if __name__ == "__main__":
    main()
