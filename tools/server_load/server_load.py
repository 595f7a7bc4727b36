#!/usr/bin/env python3
"""Load test of `rowlm serve` (not part of CI): many concurrent streaming clients
for a fixed time. Passes when no request fails, every streamed reply equals the
same request served alone (greedy, or sampled with a seed), and the server's
resident memory returns to its idle level afterwards. Python standard library
only; prints a JSON report.

    python3 tools/server_load/server_load.py --rowlm build/rowlm --model models/rowlm-tiny \
        --clients 64 --duration 60

The server is started here (`rowlm serve --port 0`) and serves every request
of the mix once alone (the reference replies; resident memory then is "cold
idle"). A warm-up burst at the same concurrency follows (--warmup seconds):
the prefix cache keeps what it may of the burst (within --prefix-cache-bytes;
the KV pool's other free pages go back to the system when the engine goes
idle), so "idle" is measured after it, settled. Then the
load; then memory again once nothing runs; then SIGTERM (the server must exit
0). Every streamed reply of the warm-up and the load is checked.

With --distinct N, N distinct long prompts (no two share a first token, so
no prefix is reused; --distinct-words words each, about as many tokens on
the bundled model) follow the load, sent by min(N, --clients) clients at
once: resident memory before them, at their peak and once idle again, and
what the prefix cache holds then (`rowlm_prefix_cache_bytes`). They pass
when every one is answered and idle memory afterwards is within the prefix
cache's bytes (plus 5%) of the level before them: the KV pool hands the rest
back to the system when the engine goes idle. --duration 0 skips the load.
"""
import argparse
import http.client
import json
import random
import re
import statistics
import subprocess
import sys
import threading
import time

WORDS = ["river", "king", "light", "house", "stone", "water", "fire", "mountain", "bread", "star",
         "law", "city", "wind", "tree", "sea", "gold"]


def request_mix(seed):
    """Distinct requests (chat and completions, greedy and seeded sampling), as
    (path, body) pairs; the server's model name is filled in later."""
    rng = random.Random(seed)
    mix = []
    for i, word in enumerate(WORDS):
        body = {"messages": [{"role": "user", "content": f"What does {word} mean?"}],
                "max_tokens": rng.randint(16, 160)}
        body.update({"temperature": 0} if i % 2 == 0 else {"temperature": 0.8, "top_p": 0.95, "seed": 1000 + i})
        mix.append(("/v1/chat/completions", body))
    for i, start in enumerate(["In the beginning", "And the king said unto", "A river is", "The Python interpreter"]):
        body = {"prompt": start, "max_tokens": rng.randint(32, 200)}
        body.update({"temperature": 0} if i % 2 == 0 else {"temperature": 1.0, "seed": 7 + i})
        mix.append(("/v1/completions", body))
    return mix


def distinct_prompts(n, words, seed):
    """n completions of about `words` words each that share no prefix (each
    starts with its own number), greedy and short: the KV they leave behind
    is their prompts'."""
    rng = random.Random(seed)
    return [("/v1/completions", {"prompt": f"{i} " + " ".join(rng.choice(WORDS) for _ in range(words)),
                                 "max_tokens": 8, "temperature": 0}) for i in range(n)]


def start_server(args):
    cmd = [args.rowlm, "serve", args.model, "--port", "0", "--quiet", "--threads", str(args.threads)] + args.serve_flag
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline:
        line = proc.stderr.readline()
        m = re.search(r"http://127\.0\.0\.1:(\d+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()  # keep draining
            return proc, int(m.group(1))
        if proc.poll() is not None:
            break
    sys.exit(f"server did not start: {' '.join(cmd)}")


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def get(port, path):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("GET", path)
    r = conn.getresponse()
    body = r.read().decode()
    conn.close()
    return r.status, body


def metric(text, key):
    for line in text.splitlines():
        if not line.startswith("#") and line.rsplit(" ", 1)[0] == key:
            return float(line.rsplit(" ", 1)[1])
    return None


def reply_text(path, body):
    if path.endswith("chat/completions"):
        return body["choices"][0]["message"]["content"], body["choices"][0]["finish_reason"]
    return body["choices"][0]["text"], body["choices"][0]["finish_reason"]


def whole(conn, path, body):
    conn.request("POST", path, json.dumps(body), {"content-type": "application/json"})
    r = conn.getresponse()
    data = r.read()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {data[:200]!r}")
    return reply_text(path, json.loads(data))


def streamed(conn, path, body):
    """The streamed reply's text and finish reason, the time to its first
    token, and its number of token chunks."""
    t0 = time.perf_counter()
    conn.request("POST", path, json.dumps({**body, "stream": True}), {"content-type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:200]!r}")
    text, finish, ttft, chunks, done = [], None, None, 0, False
    chat = path.endswith("chat/completions")
    while True:
        line = r.readline()
        if not line:
            break
        line = line.decode().rstrip("\n")
        if not line.startswith("data: "):
            continue
        data = line[6:]
        if data == "[DONE]":
            done = True
            continue
        event = json.loads(data)
        if "error" in event:
            raise RuntimeError(f"error event: {data[:200]}")
        for c in event["choices"]:
            piece = c["delta"].get("content", "") if chat else c["text"]
            if piece:
                if ttft is None:
                    ttft = time.perf_counter() - t0
                chunks += 1
                text.append(piece)
            if c.get("finish_reason"):
                finish = c["finish_reason"]
    if not done:
        raise RuntimeError("stream ended without [DONE]")
    return "".join(text), finish, ttft, chunks


def run_distinct(port, proc, name, args, rss_before, settle):
    """The --distinct phase: its prompts at once, memory around them."""
    prompts = [(p, {**b, "model": name}) for p, b in distinct_prompts(args.distinct, args.distinct_words, args.seed)]
    lock = threading.Lock()
    out = {"prompts": len(prompts), "answered": 0, "failures": 0, "prompt_tokens": 0, "errors": []}
    todo = list(range(len(prompts)))

    def client():
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        while True:
            with lock:
                if not todo:
                    break
                i = todo.pop()
            try:
                c.request("POST", prompts[i][0], json.dumps(prompts[i][1]), {"content-type": "application/json"})
                r = c.getresponse()
                body = r.read()
                if r.status != 200:
                    raise RuntimeError(f"HTTP {r.status}: {body[:200]!r}")
                usage = json.loads(body)["usage"]
                with lock:
                    out["answered"] += 1
                    out["prompt_tokens"] += usage["prompt_tokens"]
            except Exception as e:  # noqa: BLE001 - every failure is counted and shown
                with lock:
                    out["failures"] += 1
                    if len(out["errors"]) < 5:
                        out["errors"].append(f"distinct prompt {i}: {e}")
                c.close()
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        c.close()

    threads = [threading.Thread(target=client) for _ in range(min(args.clients, len(prompts)))]
    peak = rss_before
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        peak = max(peak, rss_bytes(proc.pid))
        time.sleep(0.25)
    after = settle()
    _, m = get(port, "/metrics")
    cached = metric(m, "rowlm_prefix_cache_bytes") or 0
    mib = 1 / (1 << 20)
    out["prompt_tokens_mean"] = round(out.pop("prompt_tokens") / max(out["answered"], 1))
    out["rss_mib"] = {"before": round(rss_before * mib, 1), "peak": round(peak * mib, 1), "after": round(after * mib, 1)}
    out["prefix_cache_mib_after"] = round(cached * mib, 1)
    out["kv_used_mib_after"] = round((metric(m, "rowlm_kv_used_bytes") or 0) * mib, 1)
    # Idle again: what the prefix cache keeps, and no more (5% allocator slack).
    out["rss_within_prefix_cache"] = after <= (rss_before + cached) * 1.05
    out["pass"] = out["failures"] == 0 and out["answered"] == len(prompts) and out["rss_within_prefix_cache"]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rowlm", default="build/rowlm")
    ap.add_argument("--model", default="models/rowlm-tiny")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--duration", type=float, default=60)
    ap.add_argument("--threads", type=int, default=0, help="engine threads (rowlm serve --threads)")
    ap.add_argument("--serve-flag", action="append", default=[], help="extra flag for rowlm serve (repeatable)")
    ap.add_argument("--warmup", type=float, default=10, help="seconds of warm-up load before idle is measured")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--distinct", type=int, default=0, help="then N distinct long prompts (memory after them)")
    ap.add_argument("--distinct-words", type=int, default=3000, help="words (about tokens) per distinct prompt")
    args = ap.parse_args()

    proc, port = start_server(args)
    _, models = get(port, "/v1/models")
    name = json.loads(models)["data"][0]["id"]
    mix = [(p, {**b, "model": name}) for p, b in request_mix(args.seed)]

    # The reference: every request served alone, not streamed.
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    expected = [whole(conn, p, b) for p, b in mix]
    conn.close()
    time.sleep(2)
    rss_idle = rss_bytes(proc.pid)

    lock = threading.Lock()
    stats = {"requests": 0, "failures": 0, "mismatches": 0, "chunks": 0, "errors": []}
    ttfts = []

    def run_phase(duration, record):
        """`args.clients` clients stream requests of the mix for `duration`
        seconds; every reply is checked, timings kept when `record`."""
        stop_at = time.time() + duration
        peak = [rss_bytes(proc.pid)]

        def client(k):
            rng = random.Random(args.seed * 1000 + k + (0 if record else 500))
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
            while time.time() < stop_at:
                i = rng.randrange(len(mix))
                try:
                    text, finish, ttft, chunks = streamed(c, *mix[i])
                    ok = (text, finish) == expected[i]
                    with lock:
                        stats["mismatches"] += not ok
                        if not ok and len(stats["errors"]) < 5:
                            stats["errors"].append(f"request {i}: got {text[:60]!r} ({finish}), "
                                                   f"alone {expected[i][0][:60]!r} ({expected[i][1]})")
                        if record:
                            stats["requests"] += 1
                            stats["chunks"] += chunks
                            if ttft is not None:
                                ttfts.append(ttft)
                except Exception as e:  # noqa: BLE001 - every failure is counted and shown
                    with lock:
                        stats["failures"] += 1
                        if len(stats["errors"]) < 5:
                            stats["errors"].append(f"request {i}: {e}")
                    c.close()
                    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
            c.close()

        def sample_rss():
            while any(t.is_alive() for t in threads):
                peak[0] = max(peak[0], rss_bytes(proc.pid))
                time.sleep(0.25)

        threads = [threading.Thread(target=client, args=(k,)) for k in range(args.clients)]
        t0 = time.time()
        for t in threads:
            t.start()
        sampler = threading.Thread(target=sample_rss)
        sampler.start()
        for t in threads + [sampler]:
            t.join()
        return time.time() - t0, peak[0]

    def settle():
        for _ in range(600):
            _, m = get(port, "/metrics")
            if metric(m, "rowlm_engine_requests_running") == 0 and metric(m, "rowlm_engine_requests_waiting") == 0:
                break
            time.sleep(0.1)
        time.sleep(3)
        return rss_bytes(proc.pid)

    rss_cold = rss_idle
    if args.warmup > 0:
        run_phase(args.warmup, record=False)
        rss_idle = settle()
    elapsed, peak = run_phase(args.duration, record=True) if args.duration > 0 else (0.0, rss_idle)
    peak = [peak]

    # Settled: nothing running, then memory measured again.
    rss_after = settle()
    distinct = run_distinct(port, proc, name, args, rss_after, settle) if args.distinct > 0 else None
    health, _ = get(port, "/health")
    _, m = get(port, "/metrics")
    proc.terminate()
    exit_code = proc.wait(timeout=60)

    mib = 1 / (1 << 20)
    elapsed = max(elapsed, 1e-9)
    q = statistics.quantiles(ttfts, n=100) if len(ttfts) >= 2 else [float("nan")] * 99
    report = {
        "clients": args.clients, "duration_s": round(elapsed, 1), "warmup_s": args.warmup,
        "engine_threads": args.threads,
        "requests": stats["requests"], "failures": stats["failures"], "mismatches": stats["mismatches"],
        "token_chunks_per_s": round(stats["chunks"] / elapsed, 1),
        "ttft_ms": {"p50": round(q[49] * 1e3, 1), "p95": round(q[94] * 1e3, 1), "p99": round(q[98] * 1e3, 1)},
        "rss_mib": {"cold_idle": round(rss_cold * mib, 1), "idle": round(rss_idle * mib, 1), "peak": round(peak[0] * mib, 1), "after": round(rss_after * mib, 1)},
        "kv_used_bytes_after": metric(m, "rowlm_kv_used_bytes"),
        "prefix_cache_bytes_after": metric(m, "rowlm_prefix_cache_bytes"),
        "health_after": health, "server_exit_code": exit_code, "errors": stats["errors"],
    }
    # Back to idle: within 5% (allocator slack) of the idle level.
    report["rss_back_to_idle"] = rss_after <= rss_idle * 1.05
    load_ok = args.duration <= 0 or (stats["requests"] > 0 and report["rss_back_to_idle"])
    report["pass"] = (stats["failures"] == 0 and stats["mismatches"] == 0 and load_ok and
                      health == 200 and exit_code == 0)
    if distinct is not None:
        report["distinct"] = distinct
        report["pass"] = report["pass"] and distinct["pass"]
    print(json.dumps(report, indent=2))
    return 0 if report["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
