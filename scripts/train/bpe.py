#!/usr/bin/python3
"""Byte-level BPE for the shipped MoE: learns merges from the training text and writes a Hugging Face
tokenizer.json in the GPT-2 / Qwen2 format (the same pipeline as `zipmoe synth`'s tokenizers:
NFC, Split(Qwen2 regex, Isolated) + ByteLevel, ByteLevel decoder, BPE model), so the C++ tokenizer,
transformers and transformers.js all read it.

Learning (Sennrich et al. 2016, byte-level as GPT-2): words = pieces of the Qwen2 pre-tokenizer regex;
the most frequent adjacent pair is merged first, ties broken by the (left, right) token strings; pair
counts are updated incrementally for the words a merge touches. The training text is ASCII
(corpus.py), so the regex's \\p{L} / \\p{N} are [A-Za-z] / [0-9] here.

Usage as a module: learn(text, n_bpe) -> (tokens, merges); tokenizer_json(tokens, merges, specials);
Encoder(tokens, merges).encode(text) -> ids (same result as the tokenizer.json pipeline on ASCII text).
"""
import heapq
import re
from collections import Counter, defaultdict

QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")
ASCII_REGEX = re.compile(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\nA-Za-z0-9]?[A-Za-z]+|[0-9]| ?[^\sA-Za-z0-9]+[\r\n]*|"
                         r"\s*[\r\n]+|\s+(?!\S)|\s+")


def bytes_to_unicode():
    """GPT-2's printable stand-in character for every byte, and the byte order of ids 0..255."""
    order = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + \
        list(range(ord("\u00ae"), ord("\u00ff") + 1))
    chars = order[:]
    n = 0
    for b in range(256):
        if b not in order:
            order.append(b)
            chars.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(order, chars)}, order


BYTE_CHAR, BYTE_ORDER = bytes_to_unicode()


def pretokenize(text):
    return ASCII_REGEX.findall(text)


def learn(text, n_bpe, log=None):
    """Returns (tokens, merges): token strings in id order (256 byte tokens first) and merges as
    (left_id, right_id) in rank order, with len(tokens) == n_bpe unless the text runs out of pairs."""
    tokens = [BYTE_CHAR[b] for b in BYTE_ORDER]
    byte_id = {b: i for i, b in enumerate(BYTE_ORDER)}
    index = {t: i for i, t in enumerate(tokens)}
    freq = Counter(pretokenize(text))
    words = [[byte_id[b] for b in w.encode()] for w in sorted(freq)]
    counts = [freq[w] for w in sorted(freq)]
    pair_count = defaultdict(int)
    where = defaultdict(set)
    for wi, sym in enumerate(words):
        for a, b in zip(sym, sym[1:]):
            pair_count[(a, b)] += counts[wi]
            where[(a, b)].add(wi)
    heap = [(-c, tokens[a], tokens[b], a, b) for (a, b), c in pair_count.items()]
    heapq.heapify(heap)
    merges = []
    while len(tokens) < n_bpe and heap:
        negc, _, _, a, b = heapq.heappop(heap)
        if pair_count.get((a, b), 0) != -negc or -negc <= 0:
            continue  # stale entry
        merged = tokens[a] + tokens[b]
        new_id = index.get(merged)
        if new_id is None:
            new_id = len(tokens)
            tokens.append(merged)
            index[merged] = new_id
        merges.append((a, b))
        changed = set()
        for wi in list(where[(a, b)]):
            sym = words[wi]
            c = counts[wi]
            for x, y in zip(sym, sym[1:]):
                pair_count[(x, y)] -= c
                changed.add((x, y))
            out, k = [], 0
            while k < len(sym):
                if k + 1 < len(sym) and sym[k] == a and sym[k + 1] == b:
                    out.append(new_id)
                    k += 2
                else:
                    out.append(sym[k])
                    k += 1
            for x, y in zip(sym, sym[1:]):
                where[(x, y)].discard(wi)
            for x, y in zip(out, out[1:]):
                pair_count[(x, y)] += c
                where[(x, y)].add(wi)
                changed.add((x, y))
            words[wi] = out
        for p in changed:
            c = pair_count.get(p, 0)
            if c > 0:
                heapq.heappush(heap, (-c, tokens[p[0]], tokens[p[1]], p[0], p[1]))
            elif p in pair_count:
                del pair_count[p]
        if log and len(merges) % 500 == 0:
            log(f"bpe: {len(merges)} merges, {len(tokens)} tokens")
    return tokens, merges


class Encoder:
    """Applies the merges by rank to each pre-token (the BPE model of tokenizer.json)."""

    def __init__(self, tokens, merges):
        self.tokens = tokens
        self.index = {t: i for i, t in enumerate(tokens)}
        self.rank = {(tokens[a], tokens[b]): r for r, (a, b) in enumerate(merges)}
        self.cache = {}

    def word(self, w):
        ids = self.cache.get(w)
        if ids is not None:
            return ids
        parts = [BYTE_CHAR[b] for b in w.encode()]
        while len(parts) > 1:
            best, best_rank = None, None
            for k in range(len(parts) - 1):
                r = self.rank.get((parts[k], parts[k + 1]))
                if r is not None and (best_rank is None or r < best_rank):
                    best, best_rank = k, r
            if best is None:
                break
            parts = parts[:best] + [parts[best] + parts[best + 1]] + parts[best + 2:]
        ids = [self.index[p] for p in parts]
        self.cache[w] = ids
        return ids

    def encode(self, text):
        out = []
        for w in pretokenize(text):
            out.extend(self.word(w))
        return out

    def decode(self, ids):
        inv = {c: b for b, c in BYTE_CHAR.items()}
        return bytes(inv[ch] for i in ids for ch in self.tokens[i]).decode("utf-8", errors="replace")


def tokenizer_json(tokens, merges, specials):
    """tokenizer.json as a dict; specials: [(id, content)], ids after the BPE tokens."""
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for i, c in specials],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_REGEX}, "behavior": "Isolated", "invert": False},
            byte_level]},
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False,
                  "vocab": {t: i for i, t in enumerate(tokens)},
                  "merges": [tokens[a] + " " + tokens[b] for a, b in merges]},
    }
