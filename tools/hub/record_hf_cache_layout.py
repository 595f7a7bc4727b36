#!/usr/bin/env python3
"""Records the cache that the real huggingface_hub writes when it downloads a
small repo from the fake Hub (fake_hub.py), as tests/fixtures/hub/
huggingface_hub_cache.json. src/hub/pull_test.cc (HuggingfaceHubLayout) pulls
the same repo with rowlm from the C++ fake Hub and checks that rowlm's cache
is the same tree: the same blob names, the same relative links in
snapshots/<commit>/, the same refs/ files with the same content.

Run where huggingface_hub is installed (the accelerator machine), from the
repository root; it needs no network:

    python3 tools/hub/record_hf_cache_layout.py
"""

import hashlib
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fake_hub import FakeHub, Repo  # noqa: E402

REPO = "acme/layout"
COMMIT = "5d0c9a8e7f6b5a4c3d2e1f0a9b8c7d6e5f4a3b2c"
FILES = {
    "config.json": ('{"model_type": "qwen3", "hidden_size": 64}\n', False),
    "generation_config.json": ('{"do_sample": false}\n', False),
    "tokenizer.json": ('{"version": "1.0", "model": {"type": "BPE", "vocab": {}, "merges": []}}\n', False),
    "model-00001-of-00002.safetensors": ("shard one " * 3000, True),
    "model-00002-of-00002.safetensors": ("shard two " * 2000, True),
    "model.safetensors.index.json": ('{"metadata": {}, "weight_map": {}}\n', False),
}
OUT = os.path.join("tests", "fixtures", "hub", "huggingface_hub_cache.json")


def tree_of(folder):
    tree = {}
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        for name in sorted(files + [d for d in dirs if os.path.islink(os.path.join(root, d))]):
            path = os.path.join(root, name)
            rel = os.path.relpath(path, folder)
            if os.path.islink(path):
                tree[rel] = {"link": os.readlink(path)}
            else:
                with open(path, "rb") as f:
                    data = f.read()
                entry = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
                if rel.startswith("refs" + os.sep):
                    entry["text"] = data.decode()
                tree[rel] = entry
    return tree


def main():
    repo = Repo(REPO, COMMIT, {p: (c.encode(), lfs) for p, (c, lfs) in FILES.items()}, refs={"v1": COMMIT})
    hub = FakeHub([repo])
    with tempfile.TemporaryDirectory() as tmp:
        cache = os.path.join(tmp, "hub")
        os.environ.update({"HF_ENDPOINT": hub.endpoint, "HF_HOME": tmp, "HF_HUB_CACHE": cache,
                           "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_XET": "1",
                           "HF_HUB_DISABLE_PROGRESS_BARS": "1"})
        for var in ("HF_TOKEN", "HF_HUB_OFFLINE", "HUGGINGFACE_HUB_CACHE"):
            os.environ.pop(var, None)
        import huggingface_hub  # after the environment is set: it reads it on import

        for revision in ("main", "v1"):
            path = huggingface_hub.snapshot_download(REPO, revision=revision)
            assert os.path.realpath(path) == os.path.realpath(os.path.join(cache, "models--acme--layout",
                                                                           "snapshots", COMMIT)), path
        folder = os.path.join(cache, "models--acme--layout")
        locks = os.path.join(cache, ".locks", "models--acme--layout")
        record = {
            "huggingface_hub": huggingface_hub.__version__,
            "repo": REPO,
            "commit": COMMIT,
            "refs": {"main": COMMIT, "v1": COMMIT},
            "files": [{"path": p, "content": c, "lfs": lfs} for p, (c, lfs) in FILES.items()],
            "tree": tree_of(folder),
            "locks": sorted(os.listdir(locks)) if os.path.isdir(locks) else [],
            "requests": [list(h) for h in hub.hits],
        }
    hub.close()
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)
        f.write("\n")
    print("wrote %s (huggingface_hub %s, %d cache entries)" % (OUT, record["huggingface_hub"], len(record["tree"])))


if __name__ == "__main__":
    main()
