#!/usr/bin/env python3
"""Runs llama.cpp's convert_hf_to_gguf.py from a llama.cpp tree (node-llama-cpp@3.21.1's
llama/gitRelease.bundle, cloned or unpacked by tools/peer/pack_llamacpp.sh) with that tree's
gguf-py, as the bundle's own converter, in this interpreter:

    python3 tools/gguf/bundle_convert.py LLAMA_CPP [--pre NAME] -- MODEL_DIR --outtype bf16 --outfile X.gguf

--pre NAME answers the converter's BPE pre-tokenizer question (it identifies a byte-level
tokenizer by hashing its output on a test text, which a small fixture vocabulary cannot match);
without it the converter's own identification stands. sentencepiece, which the tokenizer.json
paths do not call, may be absent: a stand-in that refuses takes its place.
"""
import importlib.util
import os
import sys
import types


def main():
    args = sys.argv[1:]
    if "--" not in args or not args or args[0] == "--":
        sys.exit(__doc__)
    llama, rest = args[0], args[args.index("--") + 1:]
    options = args[1:args.index("--")]
    pre = None
    if options:
        if len(options) != 2 or options[0] != "--pre":
            sys.exit(__doc__)
        pre = options[1]
    sys.path.insert(0, os.path.join(llama, "gguf-py"))
    sys.path.insert(0, llama)
    if importlib.util.find_spec("sentencepiece") is None:
        stub = types.ModuleType("sentencepiece")

        class SentencePieceProcessor:
            def __init__(self, *a, **k):
                raise RuntimeError("sentencepiece stand-in called")

        stub.SentencePieceProcessor = SentencePieceProcessor
        sys.modules["sentencepiece"] = stub
    if pre is not None:
        import conversion.base
        conversion.base.TextModel.get_vocab_base_pre = lambda self, tokenizer: pre
    import convert_hf_to_gguf
    sys.argv = ["convert_hf_to_gguf.py"] + rest
    convert_hf_to_gguf.main()


if __name__ == "__main__":
    main()
