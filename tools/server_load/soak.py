#!/usr/bin/env python3
"""Soak test of `rowlm serve` (loopback only, not part of CI): CLIENTS clients for
DURATION seconds, mixing normal requests (streamed and whole) with random
disconnects mid-stream and mid-reply, malformed and oversized requests
(chunked bodies past --max-body included), clients that trickle their headers,
long prompts, and distinct long prompts (about 2,000 tokens, no two sharing a
prefix, so the prefix cache fills to its budget). Passes when the server never
dies, every completed reply equals the same request served alone (the
distinct prompts: answered), bad requests get a 4xx, resident memory once idle
after the run is within 10% of its idle level after the references plus what
the prefix cache then holds (RSS is sampled throughout; the peak is reported),
and SIGTERM exits 0. Python standard library only; prints a JSON report.

    python3 tools/server_load/soak.py --rowlm build/rowlm --model models/rowlm-tiny \\
        --clients 64 --duration 600
"""
import argparse
import http.client
import json
import random
import socket
import sys
import threading
import time

import server_load as sl

LONG_WORDS = sl.WORDS * 60  # about 1,000 words: a long prompt for the tiny model's context


def long_requests():
    return [("/v1/completions", {"prompt": " ".join(LONG_WORDS[i:] + LONG_WORDS[:i]), "max_tokens": 24,
                                 "temperature": 0}) for i in range(3)]


def distinct_long(port, name, k, rng):
    """A long prompt no other request shares a block of; True when answered."""
    body = {"model": name, "prompt": f"{k} {rng.random()} " + " ".join(rng.choice(sl.WORDS) for _ in range(2000)),
            "max_tokens": 4, "temperature": 0}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    try:
        c.request("POST", "/v1/completions", json.dumps(body), {"content-type": "application/json"})
        r = c.getresponse()
        data = r.read()
        if r.status != 200:
            raise RuntimeError(f"distinct long prompt: HTTP {r.status}: {data[:200]!r}")
    finally:
        c.close()


def hang_up_mid_stream(port, path, body, rng):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", path, json.dumps({**body, "stream": True}), {"content-type": "application/json"})
    r = c.getresponse()
    for _ in range(rng.randint(0, 5)):
        if not r.readline():
            break
    c.close()


def hang_up_mid_reply(port, path, body, rng):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    data = json.dumps(body).encode()
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    time.sleep(rng.random() * 0.3)
    s.close()


def bad_request(port, name, rng):
    """A malformed or oversized request; returns the status it got."""
    kind = rng.randrange(4)
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    try:
        if kind == 0:
            body = b"{not json"
        elif kind == 1:
            body = json.dumps({"model": name, "messages": [{"role": "user", "content": 5}]}).encode()
        elif kind == 2:
            body = json.dumps({"model": name, "prompt": "x", "max_tokens": -3}).encode()
        if kind < 3:
            s.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
                      f"Connection: close\r\n\r\n".encode() + body)
        else:  # chunked, past --max-body (1 MiB below): 413 while it is still sending
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
            chunk = b"10000\r\n" + b" " * 0x10000 + b"\r\n"
            try:
                for _ in range(64):
                    s.sendall(chunk)
            except OSError:
                pass  # the server closed after its 413
        reply = b""
        while b"\r\n" not in reply:
            part = s.recv(4096)
            if not part:
                break
            reply += part
        return int(reply.split(b" ", 2)[1]) if reply.startswith(b"HTTP/1.1 ") else -1
    except OSError:
        return -1
    finally:
        s.close()


def trickle_headers(port, rng):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    try:
        s.sendall(b"GET /health HTTP/1.1\r\n")
        for _ in range(rng.randint(1, 10)):
            s.sendall(b"X-Slow: 1\r\n")
            time.sleep(0.5)
    except OSError:
        pass
    s.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rowlm", default="build/rowlm")
    ap.add_argument("--model", default="models/rowlm-tiny")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--duration", type=float, default=600)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    args.serve_flag = ["--max-body", "1M", "--header-timeout", "3"]

    proc, port = sl.start_server(args)
    name = json.loads(sl.get(port, "/v1/models")[1])["data"][0]["id"]
    mix = [(p, {**b, "model": name}) for p, b in sl.request_mix(args.seed) + long_requests()]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    expected = [sl.whole(conn, p, b) for p, b in mix]  # each request served alone
    conn.close()

    lock = threading.Lock()
    stats = {"completed": 0, "mismatches": 0, "failures": 0, "bad_requests": 0, "bad_not_4xx": 0,
             "stream_hang_ups": 0, "reply_hang_ups": 0, "tricklers": 0, "distinct_long": 0, "errors": []}
    stop_at = time.time() + args.duration

    def note_error(text):
        if len(stats["errors"]) < 8:
            stats["errors"].append(text)

    def client(k):
        rng = random.Random(args.seed * 7919 + k)
        while time.time() < stop_at and proc.poll() is None:
            i = rng.randrange(len(mix))
            roll = rng.random()
            try:
                if roll < 0.55 or roll >= 0.95:
                    c = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
                    got = sl.streamed(c, *mix[i])[:2] if roll < 0.55 else sl.whole(c, *mix[i])
                    c.close()
                    with lock:
                        stats["completed"] += 1
                        if got != expected[i]:
                            stats["mismatches"] += 1
                            note_error(f"request {i}: got {got[0][:50]!r}, alone {expected[i][0][:50]!r}")
                elif roll < 0.70:
                    hang_up_mid_stream(port, *mix[i], rng)
                    with lock:
                        stats["stream_hang_ups"] += 1
                elif roll < 0.80:
                    hang_up_mid_reply(port, *mix[i], rng)
                    with lock:
                        stats["reply_hang_ups"] += 1
                elif roll < 0.90:
                    status = bad_request(port, name, rng)
                    with lock:
                        stats["bad_requests"] += 1
                        if not 400 <= status < 500:
                            stats["bad_not_4xx"] += 1
                            note_error(f"bad request got {status}")
                elif roll < 0.93:
                    trickle_headers(port, rng)
                    with lock:
                        stats["tricklers"] += 1
                else:
                    distinct_long(port, name, k, rng)
                    with lock:
                        stats["distinct_long"] += 1
            except Exception as e:  # noqa: BLE001 - every failure is counted and shown
                with lock:
                    stats["failures"] += 1
                    note_error(f"request {i}: {e!r}")

    # Warm idle: after one pass of the mix at full concurrency, settled.
    rss_idle = sl.rss_bytes(proc.pid)
    peak = [rss_idle]
    threads = [threading.Thread(target=client, args=(k,)) for k in range(args.clients)]
    for t in threads:
        t.start()

    def sample():
        while any(t.is_alive() for t in threads):
            if proc.poll() is None:
                peak[0] = max(peak[0], sl.rss_bytes(proc.pid))
            time.sleep(0.5)

    sampler = threading.Thread(target=sample)
    sampler.start()
    for t in threads + [sampler]:
        t.join()
    alive = proc.poll() is None
    rss_after = 0
    cached = 0
    if alive:
        for _ in range(600):
            m = sl.get(port, "/metrics")[1]
            if sl.metric(m, "rowlm_engine_requests_running") == 0 and sl.metric(m, "rowlm_engine_requests_waiting") == 0:
                break
            time.sleep(0.1)
        time.sleep(3)
        rss_after = sl.rss_bytes(proc.pid)
        cached = sl.metric(sl.get(port, "/metrics")[1], "rowlm_prefix_cache_bytes") or 0
        proc.terminate()
    exit_code = proc.wait(timeout=60)
    mib = 1 / (1 << 20)
    report = {**stats, "clients": args.clients, "duration_s": args.duration, "server_alive_at_end": alive,
              "rss_mib": {"after_references": round(rss_idle * mib, 1), "peak": round(peak[0] * mib, 1),
                          "after": round(rss_after * mib, 1)},
              "prefix_cache_mib_after": round(cached * mib, 1),
              "server_exit_code": exit_code}
    # Bounded: idle again, what the references left plus what the prefix
    # cache keeps (within its budget), and 10% for allocator slack.
    report["rss_bounded"] = alive and rss_after <= (rss_idle + cached) * 1.10
    report["pass"] = (alive and exit_code == 0 and stats["mismatches"] == 0 and stats["failures"] == 0 and
                      stats["bad_not_4xx"] == 0 and stats["completed"] > 0 and report["rss_bounded"])
    print(json.dumps(report, indent=2))
    return 0 if report["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
