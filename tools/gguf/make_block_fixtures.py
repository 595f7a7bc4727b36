#!/usr/bin/env python3
"""GGUF block fixtures: one small GGUF file with a tensor of every type rowlm
reads, and gguf-py's dequantization of each as .npy (the reference rowlm's
dequantizer and its affine conversion are checked against).

Quantized tensors are random block bytes (every bit pattern of a block is a
valid block; only the f16 super-block scales are drawn as finite values), so
every field of every block format is exercised, plus one tensor per legacy
type quantized from real values by gguf-py's own quantizer. Dense tensors
are random values.

Needs llama.cpp's gguf-py (pure Python) and numpy:
    apt-get install -y python3-numpy
    npm pack node-llama-cpp@3.21.1 && tar xzf node-llama-cpp-3.21.1.tgz package/llama/gitRelease.bundle
    git clone package/llama/gitRelease.bundle /tmp/llama.cpp
    PYTHONPATH=/tmp/llama.cpp/gguf-py /usr/bin/python3 tools/gguf/make_block_fixtures.py
Writes tests/fixtures/gguf/blocks.gguf and tests/fixtures/gguf/blocks/<tensor>.npy.
"""
import os
import sys

import numpy as np

try:
    import gguf
    from gguf import GGMLQuantizationType as T
    from gguf.quants import dequantize, quantize
except ImportError:
    sys.exit("gguf-py not found: set PYTHONPATH to llama.cpp's gguf-py (see this script's docstring)")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fixtures", "gguf")

# Byte offsets of the f16 fields of each block (ggml-common.h).
HALF_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
}
ROWS, COLS = 3, 512  # two K-quant super-blocks and sixteen legacy blocks per row


def random_blocks(rng, qtype):
    block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
    n_blocks = ROWS * COLS // block_size
    blocks = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    for off in HALF_FIELDS[qtype]:
        # finite f16 of either sign across many binades, some subnormal
        mags = np.exp2(rng.uniform(-20, 3, size=n_blocks)).astype(np.float16)
        signs = np.where(rng.random(n_blocks) < 0.5, -1, 1).astype(np.float16)
        blocks[:, off:off + 2] = (mags * signs).view(np.uint8).reshape(n_blocks, 2)
    return blocks.reshape(ROWS, COLS // block_size * type_size)


def main():
    rng = np.random.default_rng(14)
    os.makedirs(os.path.join(OUT, "blocks"), exist_ok=True)
    writer = gguf.GGUFWriter(os.path.join(OUT, "blocks.gguf"), arch="rowlm-blocks")
    expected = {}

    dense = rng.standard_normal((ROWS, COLS)).astype(np.float32)
    writer.add_tensor("dense.f32", dense)
    expected["dense.f32"] = dense
    writer.add_tensor("dense.f16", dense.astype(np.float16))
    expected["dense.f16"] = dense.astype(np.float16).astype(np.float32)
    bf16 = quantize(dense, T.BF16)
    writer.add_tensor("dense.bf16", bf16, raw_dtype=T.BF16)
    expected["dense.bf16"] = dequantize(bf16, T.BF16)

    for qtype in HALF_FIELDS:
        name = "random." + qtype.name.lower()
        blocks = random_blocks(rng, qtype)
        writer.add_tensor(name, blocks, raw_dtype=qtype)
        expected[name] = dequantize(blocks, qtype)

    for qtype in (T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0):
        name = "quantized." + qtype.name.lower()
        blocks = quantize(dense, qtype)
        writer.add_tensor(name, blocks, raw_dtype=qtype)
        expected[name] = dequantize(blocks, qtype)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    for name, values in expected.items():
        assert values.shape == (ROWS, COLS) and values.dtype == np.float32, name
        np.save(os.path.join(OUT, "blocks", name + ".npy"), np.ascontiguousarray(values))
    print(f"wrote {OUT}/blocks.gguf and {len(expected)} reference arrays")


if __name__ == "__main__":
    main()
