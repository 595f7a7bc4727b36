#!/usr/bin/env python3
"""Builds the English training corpus for rowlm's bundled tiny models from text that Debian
ships (public domain or permissively licensed), with a deterministic held-out split.

Sources (Debian package: licence):
  bible-kjv-text (read through bible-kjv's `bible`): King James Version, public domain
  wordnet-base: WordNet 3.0 glosses and examples, WordNet 3.0 licence (permissive, BSD-like)
  dict-devil: Ambrose Bierce, The Devil's Dictionary (1911), public domain
  python3.11-doc: Python documentation prose (reST sources), PSF licence (permissive)

Output (JSON lines, one document per line: {"source": ..., "text": ...}):
  <out>/train.jsonl, <out>/heldout.jsonl, and <out>/heldout.txt (held-out prose as plain text)
Documents whose stable hash falls in 1/50 of the space go to the held-out split. WordNet entries
are also rendered as short Gemma 4 chat exchanges ("What does X mean?") so the chat command
has something sensible to answer.

    apt-get install bible-kjv bible-kjv-text wordnet-base dict-devil python3.11-doc
    python3 tools/train_tiny/build_corpus.py --out build/train_tiny/corpus
"""
import argparse
import glob
import gzip
import hashlib
import json
import os
import random
import re
import subprocess

HELDOUT_MODULUS = 50


def kjv_documents():
    text = subprocess.run(["bible", "gen1:1-rev22:21"], check=True, capture_output=True,
                          text=True).stdout
    book, verses = None, []
    for line in text.splitlines():
        head = re.fullmatch(r"(\S.*?) (\d+)", line.strip()) if not line.startswith(" ") else None
        if head and not line.startswith(" "):
            if book and verses:
                yield "kjv", f"{book}\n\n" + "\n".join(verses)
            book, verses = line.strip(), []
            continue
        m = re.match(r"\s+\d+\s+(.*)", line)
        if m:
            verses.append(m.group(1).strip())
        elif line.strip() and verses:
            verses[-1] += " " + line.strip()
    if book and verses:
        yield "kjv", f"{book}\n\n" + "\n".join(verses)


def wordnet_entries():
    for pos, name in (("noun", "noun"), ("verb", "verb"), ("adj", "adjective"), ("adv", "adverb")):
        with open(f"/usr/share/wordnet/data.{pos}", encoding="latin-1") as f:
            for line in f:
                if line.startswith("  ") or "|" not in line:
                    continue
                head, gloss = line.split("|", 1)
                fields = head.split()
                count = int(fields[3], 16)
                words = [fields[4 + 2 * i].replace("_", " ") for i in range(count)]
                words = [re.sub(r"\(.*\)$", "", w) for w in words]
                yield name, words, gloss.strip()


def wordnet_documents(rng):
    group = []
    for name, words, gloss in wordnet_entries():
        parts = [p.strip() for p in gloss.split(";")]
        definition = parts[0]
        examples = [p.strip('"') for p in parts[1:] if p.startswith('"')]
        line = f"{', '.join(words)} ({name}): {definition.rstrip('.')}."
        if examples:
            line += " For example: " + "; ".join(f'"{e}"' for e in examples) + "."
        group.append(line)
        if len(group) == 40:
            yield "wordnet", "\n".join(group)
            group = []
        if rng.random() < 0.25:
            word = words[0]
            answer = f"{word[0].upper() + word[1:]} ({name}) means {definition.rstrip('.')}."
            if examples:
                answer += f' For example: "{examples[0]}".'
            question = rng.choice([f'What does "{word}" mean?', f"Define {word}.",
                                   f"What is the meaning of the word {word}?"])
            yield "wordnet-chat", (f"<bos><|turn>user\n{question}<turn|>\n"
                                   f"<|turn>model\n{answer}<turn|>\n")
    if group:
        yield "wordnet", "\n".join(group)


def devil_documents():
    with gzip.open("/usr/share/dictd/devil.dict.dz", "rt", encoding="utf-8", errors="replace") as f:
        text = f.read()
    for entry in re.split(r"\n(?=[A-Z][A-Z' -]+, [a-z.]+\b)", text):
        entry = entry.strip()
        if len(entry) > 40 and not entry.startswith("00-"):
            yield "devil", re.sub(r"[ \t]+", " ", entry)


RST_ROLE = re.compile(r":[a-z:]+:`~?([^`<]*?)(?:\s*<[^>]*>)?`")


def rst_to_prose(text):
    out, skip_indent = [], None
    for line in text.splitlines():
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if skip_indent is not None:
            if stripped == "" or indent > skip_indent:
                continue
            skip_indent = None
        if stripped.startswith(".."):
            skip_indent = indent
            continue
        if re.fullmatch(r"[=\-~^*#+\"'`]{3,}", stripped):
            continue
        if stripped.endswith("::"):
            stripped = stripped[:-2].rstrip() + (":" if stripped[:-2].strip() else "")
            skip_indent = indent
        if stripped.startswith(">>>") or stripped.startswith("..."):
            continue
        stripped = RST_ROLE.sub(r"\1", stripped)
        stripped = stripped.replace("``", "").replace("**", "").replace("*", "")
        out.append(stripped)
    text = "\n".join(out)
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def python_doc_documents():
    root = "/usr/share/doc/python3.11/html/_sources"
    for path in sorted(glob.glob(f"{root}/**/*.rst.txt", recursive=True)):
        rel = os.path.relpath(path, root)
        if rel.startswith(("whatsnew/", "c-api/", "distutils/", "license")):
            continue
        with open(path, encoding="utf-8") as f:
            prose = rst_to_prose(f.read())
        paragraphs = [p for p in prose.split("\n\n") if len(p.split()) >= 6]
        for i in range(0, len(paragraphs), 12):
            yield "python-docs", "\n\n".join(paragraphs[i:i + 12])


def is_heldout(source, text):
    digest = hashlib.sha256(f"{source}\0{text}".encode()).digest()
    return int.from_bytes(digest[:8], "little") % HELDOUT_MODULUS == 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    os.makedirs(args.out, exist_ok=True)
    stats = {}
    with open(f"{args.out}/train.jsonl", "w") as train, \
         open(f"{args.out}/heldout.jsonl", "w") as held, \
         open(f"{args.out}/heldout.txt", "w") as held_txt:
        for gen in (kjv_documents(), wordnet_documents(rng), devil_documents(),
                    python_doc_documents()):
            for source, text in gen:
                heldout = is_heldout(source, text)
                (held if heldout else train).write(json.dumps({"source": source, "text": text}) + "\n")
                if heldout and source != "wordnet-chat":
                    held_txt.write(text + "\n\n")
                s = stats.setdefault(source, [0, 0, 0])
                s[0 if not heldout else 1] += 1
                s[2] += len(text)
    for source, (n_train, n_held, chars) in stats.items():
        print(f"{source:12s} train_docs={n_train:6d} heldout_docs={n_held:5d} chars={chars}")


if __name__ == "__main__":
    main()
