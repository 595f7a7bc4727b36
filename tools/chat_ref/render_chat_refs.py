#!/usr/bin/env python3
"""Renders reference prompts for rowlm's chat formats through a model's own
Jinja chat template, with transformers' apply_chat_template.

Usage (where transformers is installed):
    python3 tools/chat_ref/render_chat_refs.py tools/chat_ref/gemma3_tokenizer_config.json \
        --output tests/fixtures/chat_ref/gemma3.json
and likewise, with --format NAME, for any other family's tokenizer_config.json
(output tests/fixtures/chat_ref/NAME.json): the test checks every fixture there.

TOKENIZER_CONFIG is a tokenizer_config.json holding `chat_template` (a
string, or a list of {name, template}) and the special tokens. When a
tokenizer.json lies beside it, the real tokenizer is loaded with
AutoTokenizer; otherwise a stand-in tokenizer carrying the same special
tokens is built (apply_chat_template uses only those and the template).

The conversations come from conversations.json beside this script. Each case
of the output records the messages, add_generation_prompt, and either the
rendered text or the error the template raised; rowlm's test
(src/tokenizer/chat_format_test.cc) checks every case when the fixture exists,
with the chat format it detects from the template text (kept in the fixture).

--plain-jinja renders without transformers, in a Jinja environment set up the
way transformers sets up its own; it is for checking this script, and the
fixture says which renderer made it.
"""

import argparse
import hashlib
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SPECIAL_KEYS = ("bos_token", "eos_token", "pad_token", "unk_token")


def token_text(value):
    if isinstance(value, dict):
        return value.get("content")
    return value


def read_template(config):
    template = config.get("chat_template")
    if isinstance(template, list):
        named = {t["name"]: t["template"] for t in template}
        template = named.get("default", template[0]["template"])
    if not isinstance(template, str):
        sys.exit("tokenizer config has no chat_template")
    return template


def transformers_renderer(config_path, template, special):
    import transformers

    directory = os.path.dirname(os.path.abspath(config_path))
    if os.path.exists(os.path.join(directory, "tokenizer.json")):
        tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    else:
        from tokenizers import Tokenizer, models

        vocab = {token: i for i, token in enumerate(sorted(set(special.values())))}
        backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=special.get("unk_token") or next(iter(vocab))))
        fast_class = getattr(transformers, "PreTrainedTokenizerFast", None) or getattr(transformers, "TokenizersBackend")
        tokenizer = fast_class(tokenizer_object=backend, **special)
    tokenizer.chat_template = template

    def render(messages, add_generation_prompt):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)

    return render, f"transformers {transformers.__version__} apply_chat_template"


def plain_jinja_renderer(template, special):
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = lambda x, indent=None: json.dumps(x, ensure_ascii=False, indent=indent)
    env.globals["raise_exception"] = raise_exception
    compiled = env.from_string(template)

    def render(messages, add_generation_prompt):
        return compiled.render(messages=messages, add_generation_prompt=add_generation_prompt, **special)

    return render, f"plain jinja2 {jinja2.__version__} (not transformers)"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tokenizer_config")
    parser.add_argument("--output", required=True)
    parser.add_argument("--conversations", default=os.path.join(HERE, "conversations.json"))
    parser.add_argument("--format", default="gemma3", help="the rowlm chat format the fixture checks")
    parser.add_argument("--plain-jinja", action="store_true")
    args = parser.parse_args()

    with open(args.tokenizer_config, encoding="utf-8") as f:
        config = json.load(f)
    template = read_template(config)
    special = {k: token_text(config[k]) for k in SPECIAL_KEYS if token_text(config.get(k))}
    if args.plain_jinja:
        render, renderer = plain_jinja_renderer(template, special)
    else:
        render, renderer = transformers_renderer(args.tokenizer_config, template, special)

    with open(args.conversations, encoding="utf-8") as f:
        conversations = json.load(f)["conversations"]
    cases = []
    for conv in conversations:
        case = dict(conv)
        try:
            case["rendered"] = render(conv["messages"], conv["add_generation_prompt"])
        except Exception as e:  # the template's raise_exception, or an empty conversation
            case["error"] = f"{type(e).__name__}: {e}"
        cases.append(case)

    fixture = {
        "format": args.format,
        "renderer": renderer,
        "template_sha256": hashlib.sha256(template.encode("utf-8")).hexdigest(),
        "template_from": os.path.basename(args.tokenizer_config),
        "template": template,
        "cases": cases,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    with open(args.output, "w", encoding="utf-8") as f:
        json.dump(fixture, f, ensure_ascii=False, indent=1)
        f.write("\n")
    errors = sum("error" in c for c in cases)
    print(f"{args.output}: {len(cases)} cases ({errors} raise) by {renderer}")


if __name__ == "__main__":
    main()
