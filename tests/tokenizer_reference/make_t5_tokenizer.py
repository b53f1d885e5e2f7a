#!/usr/bin/python3
"""Builds a T5-style Unigram tokenizer.json (plus tokenizer_config.json) and the inputs to encode.

tests/tokenizer_reference/make_t5_tokenizer.py --prompts bench/data/sharegpt-first-turn-500.json
    --out DIR [--byte-fallback]

Writes DIR/tokenizer.json, DIR/tokenizer_config.json and DIR/inputs.json (a JSON array of strings:
the 500 prompts first, then the prompts with <extra_id_N> sentinels spliced in, then hand-written
edge cases). Standard library only; deterministic.

The tokenizer has T5's shape (the layout of t5-small / google/switch-base-8's tokenizer.json): vocab
[<pad>, </s>, <unk>, pieces..., <extra_id_99> ... <extra_id_0>] with scores, unk_id 2, the specials
and the 100 sentinels as special added tokens, a Metaspace pre-tokenizer and decoder, and
TemplateProcessing appending </s>. Differences from T5, on purpose:
  - the pieces are learnt here from the prompts: every substring of at most 10 characters of a
    "▁word" that occurs at least twice, the most frequent ones kept (count x length), plus single
    characters seen at least 3 times; score = log(count / total), a unigram log-probability. So
    words are split into several pieces and rare characters (Hangul, most kanji, some symbols) and
    the control characters \\n, \\t are unknown;
  - the normalizer is Sequence[NFKC, Replace(" {2,}" -> " ")] instead of T5's Precompiled
    charsmap (which transformers.js only approximates, so it could not serve as a reference);
  - --byte-fallback adds the 256 "<0xXX>" pieces after <unk> and sets byte_fallback, with a
    Metaspace pre-tokenizer that does not split (split false: one Viterbi lattice per segment) and
    a ByteFallback + legacy-form Metaspace (add_prefix_space, str_rep) decoder.
"""
import argparse
import collections
import json
import math
import os
import re
import unicodedata

N_SENTINELS = 100
N_PIECES = 4000        # multi-character pieces kept
MAX_PIECE_CHARS = 10
MIN_CHAR_COUNT = 3     # single characters seen fewer times are unknown
META = "\u2581"


def words_of(text):
    text = re.sub(" {2,}", " ", unicodedata.normalize("NFKC", text))
    return [META + w for w in text.split(" ") if w]


def learn_pieces(prompts):
    chars = collections.Counter()
    subs = collections.Counter()
    for prompt in prompts:
        for word in words_of(prompt):
            chars.update(c for c in word if c != META)
            # Substrings without whitespace/control characters and with "▁" only in front.
            for run in re.split(r"[\s\x00-\x1f\x7f]+", word):
                n = len(run)
                for i in range(n):
                    for j in range(i + 2, min(n, i + MAX_PIECE_CHARS) + 1):
                        piece = run[i:j]
                        if META not in piece[1:]:
                            subs[piece] += 1
    singles = {c: n for c, n in chars.items()
               if n >= MIN_CHAR_COUNT and not c.isspace() and unicodedata.category(c) != "Cc"}
    singles[META] = sum(1 for p in prompts for _ in words_of(p))
    ranked = sorted((p for p, n in subs.items() if n >= 2), key=lambda p: (-subs[p] * len(p), p))
    pieces = dict(singles)
    for p in ranked[:N_PIECES]:
        pieces[p] = subs[p]
    total = sum(pieces.values())
    scored = [(p, math.log(n / total)) for p, n in pieces.items()]
    scored.sort(key=lambda ps: (-ps[1], ps[0]))
    return scored


def added(id_, content):
    return {"id": id_, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": True}


def t5_post_processor():
    """T5's TemplateProcessing: </s> (id 1) after each sequence."""
    return {
        "type": "TemplateProcessing",
        "single": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}},
                 {"Sequence": {"id": "B", "type_id": 0}}, {"SpecialToken": {"id": "</s>", "type_id": 0}}],
        "special_tokens": {"</s>": {"id": "</s>", "ids": [1], "tokens": ["</s>"]}}}


def build(prompts, byte_fallback):
    vocab = [["<pad>", 0.0], ["</s>", 0.0], ["<unk>", 0.0]]
    if byte_fallback:
        vocab += [["<0x%02X>" % b, 0.0] for b in range(256)]
    vocab += [[p, s] for p, s in learn_pieces(prompts)]
    first_sentinel = len(vocab)
    vocab += [["<extra_id_%d>" % i, 0.0] for i in reversed(range(N_SENTINELS))]
    added_tokens = [added(0, "<pad>"), added(1, "</s>"), added(2, "<unk>")]
    added_tokens += [added(first_sentinel + N_SENTINELS - 1 - i, "<extra_id_%d>" % i) for i in range(N_SENTINELS)]
    added_tokens.sort(key=lambda t: t["id"])
    if byte_fallback:
        pre = {"type": "Metaspace", "replacement": META, "prepend_scheme": "always", "split": False}
        decoder = {"type": "Sequence", "decoders": [
            {"type": "ByteFallback"},
            {"type": "Metaspace", "replacement": META, "str_rep": META, "add_prefix_space": True}]}
    else:
        pre = {"type": "Metaspace", "replacement": META, "prepend_scheme": "always", "split": True}
        decoder = {"type": "Metaspace", "replacement": META, "prepend_scheme": "always", "split": True}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added_tokens,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "NFKC"},
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]},
        "pre_tokenizer": pre,
        "post_processor": t5_post_processor(),
        "decoder": decoder,
        "model": {"type": "Unigram", "unk_id": 2, "vocab": vocab, "byte_fallback": byte_fallback},
    }


def inputs_of(prompts):
    out = list(prompts)
    # Every 10th prompt with sentinels between words (T5's span-corruption format) and at both ends.
    for k, prompt in enumerate(prompts[::10]):
        words = prompt.split(" ")
        for i in range(1, len(words), 4):
            words[i] = "<extra_id_%d>" % ((k + i) % N_SENTINELS) + words[i]
        out.append("<extra_id_0>" + " ".join(words) + " <extra_id_99>")
    out += [
        "", " ", "   ", "\n", "hello", " hello", "hello ", "hello   world", "\tTabs\tand\nnewlines\n\n",
        "Unknown: 한국어 텍스트 and 中文 mixed", "emoji 👋🏽 and ｆｕｌｌｗｉｄｔｈ ２ and ligature ﬁ",
        "<unk> </s> <pad> literal specials", "<extra_id_0><extra_id_1>", "a<extra_id_5>b", "x" * 300,
        "<0x41> spelled byte piece", "\u3000ideographic space", "café naïve façade",
    ]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--byte-fallback", action="store_true")
    args = ap.parse_args()
    with open(args.prompts, encoding="utf-8") as f:
        prompts = [c["conversations"][0]["value"] for c in json.load(f)]
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(build(prompts, args.byte_fallback), f, ensure_ascii=False)
    config = {"tokenizer_class": "T5Tokenizer", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>",
              "extra_ids": N_SENTINELS, "clean_up_tokenization_spaces": False}
    with open(os.path.join(args.out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=1)
    with open(os.path.join(args.out, "inputs.json"), "w", encoding="utf-8") as f:
        json.dump(inputs_of(prompts), f, ensure_ascii=False)
    print("make_t5_tokenizer: %d prompts, %d inputs -> %s" % (len(prompts), len(inputs_of(prompts)), args.out))


if __name__ == "__main__":
    main()
