#!/usr/bin/env python3
"""One line from a `rowlm bench` JSON on stdin (anything before its first
brace is skipped): prefill tokens/s, each decode batch's best and median
tokens/s, and the read bandwidth of the run, for the device scripts that
put several runs side by side (ab_cuda.sh, cpu_amx_compare.sh).
Standard library only."""
import json
import sys


def main():
    text = sys.stdin.read()
    if "{" not in text:
        print("no JSON:", text[-300:])
        return
    j = json.loads(text[text.index("{"):])
    parts = []
    prefill = j.get("prefill")
    if prefill:
        parts.append("prefill %.0f" % prefill["tokens_per_s"])
    for d in j.get("decode", []):
        parts.append("b%d %.1f (median %.1f)" % (d["batch"], d["tokens_per_s"], d.get("tokens_per_s_median", 0)))
    bw = j.get("ceilings", {}).get("read_bandwidth_gb_s")
    if bw:
        parts.append("read %.0f GB/s" % bw)
    print(" | ".join(parts))


if __name__ == "__main__":
    main()
