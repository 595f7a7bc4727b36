#!/usr/bin/env python3
"""Writes the GGUF fuzz target's seed corpus (fuzz/corpus/gguf_header/): two
small GGUF v3 images in the layout gguf-py writes (header, typed metadata of
every value type including arrays, tensor infos, aligned data), one with
llama.cpp's tokenizer keys. Standard library only.

    python3 tools/fuzz/make_gguf_seeds.py fuzz/corpus/gguf_header
"""
import os
import struct
import sys

U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
SCALAR = {U8: '<B', I8: '<b', U16: '<H', I16: '<h', U32: '<I', I32: '<i', F32: '<f', BOOL: '<?',
          U64: '<Q', I64: '<q', F64: '<d'}


def s(text):
    b = text.encode()
    return struct.pack('<Q', len(b)) + b


def value(t, v):
    if t == STRING:
        return s(v)
    return struct.pack(SCALAR[t], v)


def kv(key, t, v):
    return s(key) + struct.pack('<I', t) + value(t, v)


def kv_array(key, t, items):
    body = b''.join(value(t, x) for x in items)
    return s(key) + struct.pack('<II', ARRAY, t) + struct.pack('<Q', len(items)) + body


def image(kvs, tensors, alignment=32):
    """tensors: (name, ne innermost first, ggml type, data bytes)."""
    out = b'GGUF' + struct.pack('<IQQ', 3, len(tensors), len(kvs)) + b''.join(kvs)
    offset, blobs = 0, []
    for name, ne, ggml_type, data in tensors:
        out += s(name) + struct.pack('<I', len(ne)) + b''.join(struct.pack('<Q', n) for n in ne)
        out += struct.pack('<IQ', ggml_type, offset)
        blobs.append((offset, data))
        offset += (len(data) + alignment - 1) // alignment * alignment
    out += b'\0' * (-len(out) % alignment)
    for at, data in blobs:
        out += data + b'\0' * (-len(data) % alignment)
    return out


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    f32 = lambda n: b''.join(struct.pack('<f', i * 0.25) for i in range(n))
    q8_0 = struct.pack('<e', 0.5) + bytes(range(32))  # one block: f16 scale, 32 codes
    scalars = [kv('general.architecture', STRING, 'llama'), kv('general.alignment', U32, 32),
               kv('u8', U8, 7), kv('i8', I8, -7), kv('u16', U16, 700), kv('i16', I16, -700),
               kv('i32', I32, -70000), kv('f32', F32, 1.5), kv('bool', BOOL, True), kv('u64', U64, 1 << 40),
               kv('i64', I64, -(1 << 40)), kv('f64', F64, 2.25), kv_array('ints', I32, [1, 2, 3]),
               kv_array('floats', F32, [0.5, -1.0])]
    tensors = [('token_embd.weight', [4, 3], 0, f32(12)), ('blk.0.attn_q.weight', [32, 1], 8, q8_0),
               ('output_norm.weight', [4], 1, struct.pack('<4e', 1, 2, 3, 4))]
    with open(os.path.join(out_dir, 'metadata_and_tensors.gguf'), 'wb') as f:
        f.write(image(scalars, tensors))
    tokens = ['<pad>', '<bos>', '<eos>', '<unk>', '\u2581', 'a', 'b', '\u2581a', 'ab', '<0x0A>']
    vocab = [kv('general.architecture', STRING, 'gemma3'), kv('tokenizer.ggml.model', STRING, 'llama'),
             kv_array('tokenizer.ggml.tokens', STRING, tokens),
             kv_array('tokenizer.ggml.scores', F32, [0, 0, 0, 0, -1, -2, -3, -4, -5, 0]),
             kv_array('tokenizer.ggml.token_type', I32, [3, 3, 3, 2, 1, 1, 1, 1, 1, 6]),
             kv('tokenizer.ggml.bos_token_id', U32, 1), kv('tokenizer.ggml.add_space_prefix', BOOL, False),
             kv_array('tokenizer.ggml.merges', STRING, ['\u2581 a', 'a b'])]
    with open(os.path.join(out_dir, 'tokenizer.gguf'), 'wb') as f:
        f.write(image(vocab, [('token_embd.weight', [2, 10], 0, f32(20))]))


if __name__ == '__main__':
    main()
