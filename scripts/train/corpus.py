#!/usr/bin/python3
"""Builds the English training corpus of the shipped MoE (models/README.md) from text Debian ships.

Sources, in this order (every file that exists on the machine, sorted by path, so two machines with the
same packages build the same corpus; the list and the corpus' SHA-256 go into corpus.json):
  1. man pages (/usr/share/man/man{1,2,3,4,5,7,8}/*.gz): troff requests dropped, font/escape sequences
     replaced by their text (packages manpages, manpages-dev and whatever else is installed);
  2. package documentation (/usr/share/doc/*/README*, *.txt, FAQ*; plain or .gz; no changelogs, no
     copyright files);
  3. the ShareGPT first-turn prompts (bench/data/sharegpt-first-turn-500.json).
Text is reduced to ASCII (typographic quotes/dashes mapped, other characters dropped) and split into
documents; every 20th document (by a hash of its text, so stable across runs) goes to the validation
split. Output: OUT/train.txt, OUT/val.txt (documents separated by a blank line + <|endoftext|> line),
OUT/corpus.json.

Usage: corpus.py --out DIR [--max-mib 24]
"""
import argparse
import glob
import gzip
import hashlib
import json
import os
import re

EOT = "<|endoftext|>"
ASCII_MAP = {"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2013": "-", "\u2014": " - ",
             "\u2026": "...", "\u00a0": " ", "\u2022": "*", "\u00b7": "*"}


def to_ascii(text):
    out = []
    for ch in text:
        if ch in ASCII_MAP:
            out.append(ASCII_MAP[ch])
        elif ch == "\n" or ch == "\t" or (" " <= ch <= "~"):
            out.append(ch)
    text = "".join(out).replace("\t", " ")
    text = re.sub(r"[ ]{2,}", " ", text)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip()


TROFF_ESCAPES = [(r"\\f\[[A-Z]*\]|\\f\(..|\\f[A-Z0-9]", ""), (r"\\\(em|\\\(en", "-"), (r"\\\(aq|\\\(cq|\\\(oq", "'"),
                 (r"\\\(dq|\\\(lq|\\\(rq", '"'), (r"\\\(bu", "*"), (r"\\-", "-"), (r"\\&", ""), (r"\\e", "\\\\"),
                 (r"\\ ", " "), (r"\\\(..", ""), (r"\\\*\[[^\]]*\]|\\\*\(..|\\\*.", ""), (r"\\[|^,/0~]", ""),
                 (r"\\s[-+]?\d", ""), (r"\\c", "")]
TROFF_RE = [(re.compile(a), b) for a, b in TROFF_ESCAPES]
TEXT_MACROS = {"SH", "SS", "B", "I", "BR", "IR", "RB", "RI", "BI", "IB", "SM", "TP", "IP", "PP", "LP", "P", "HP",
               "Nm", "Nd", "Sh", "Ss", "Pp", "It", "Fl", "Ar", "Xr", "Em", "Sy", "Dq", "Pa", "Ql", "Li"}


def man_to_text(src):
    lines = []
    skip = False
    for raw in src.splitlines():
        if raw.startswith(".de") or raw.startswith(".ig"):
            skip = True
            continue
        if skip:
            skip = not raw.startswith("..")
            continue
        if raw.startswith('.\\"') or raw.startswith("'\\\"") or raw.startswith('\\"'):
            continue
        line = raw
        if line.startswith(".") or line.startswith("'"):
            parts = line[1:].split(None, 1)
            if not parts:
                continue
            macro = parts[0]
            if macro not in TEXT_MACROS:
                if macro in ("PP", "LP", "P", "Pp", "sp", "br"):
                    lines.append("")
                continue
            if macro in ("PP", "LP", "P", "Pp"):
                lines.append("")
                continue
            line = parts[1] if len(parts) > 1 else ""
            line = line.replace('"', "")
            if macro in ("SH", "Sh"):
                lines.append("")
                line = line.capitalize()
        for pat, rep in TROFF_RE:
            line = pat.sub(rep, line)
        line = line.replace("\\", "")
        lines.append(line)
    text = "\n".join(lines)
    # Paragraphs: join wrapped lines inside a paragraph into one line.
    paras = [re.sub(r"\s*\n\s*", " ", p).strip() for p in re.split(r"\n\s*\n", text)]
    return "\n\n".join(p for p in paras if len(p) > 1)


def read_maybe_gz(path):
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rb") as f:
                data = f.read(2 << 20)
        else:
            with open(path, "rb") as f:
                data = f.read(2 << 20)
    except (OSError, EOFError):
        return None
    return data.decode("utf-8", errors="replace")


def english_enough(text):
    letters = sum(ch.isalpha() for ch in text)
    words = re.findall(r"[A-Za-z]+", text)
    common = sum(w.lower() in ("the", "a", "of", "to", "and", "is", "in", "for", "that", "it") for w in words)
    return len(text) > 200 and letters > 0.6 * len(text) and words and common > 0.04 * len(words)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--max-mib", type=float, default=24.0)
    ap.add_argument("--sharegpt", default=os.path.join(os.path.dirname(__file__), "../../bench/data/sharegpt-first-turn-500.json"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    docs = []  # (source, text)
    for sec in ("1", "2", "3", "4", "5", "7", "8"):
        for path in sorted(glob.glob(f"/usr/share/man/man{sec}/*.gz")):
            src = read_maybe_gz(path)
            if src is None or src.startswith(".so "):
                continue
            text = to_ascii(man_to_text(src))
            if english_enough(text):
                docs.append((path, text))
    for path in sorted(glob.glob("/usr/share/doc/*/*")):
        base = os.path.basename(path).lower()
        if os.path.isdir(path) or "changelog" in base or "copyright" in base or "news" in base:
            continue
        if not (base.startswith("readme") or base.startswith("faq") or base.endswith(".txt") or base.endswith(".txt.gz")):
            continue
        if base.endswith(".html") or base.endswith(".html.gz"):
            continue
        src = read_maybe_gz(path)
        if src is None:
            continue
        text = to_ascii(src)
        text = "\n\n".join(re.sub(r"\s*\n\s*", " ", p).strip() for p in re.split(r"\n\s*\n", text))
        if english_enough(text):
            docs.append((path, text))
    for i, item in enumerate(json.load(open(args.sharegpt))):
        text = to_ascii(item["conversations"][0]["value"])
        if len(text) > 20:
            docs.append((f"sharegpt#{i}", text))

    limit = int(args.max_mib * (1 << 20))
    train, val, used = [], [], 0
    sources = []
    for src, text in docs:
        if used + len(text) > limit and not src.startswith("sharegpt"):
            continue
        used += len(text)
        sources.append(src)
        h = int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)
        (val if h % 20 == 0 else train).append(text)
    meta = {}
    for name, part in (("train", train), ("val", val)):
        blob = ("\n" + EOT + "\n").join(part) + "\n"
        with open(os.path.join(args.out, name + ".txt"), "w") as f:
            f.write(blob)
        meta[name] = {"documents": len(part), "bytes": len(blob), "sha256": hashlib.sha256(blob.encode()).hexdigest()}
    meta["sources"] = {"man": sum(s.startswith("/usr/share/man") for s in sources),
                       "doc": sum(s.startswith("/usr/share/doc") for s in sources),
                       "sharegpt": sum(s.startswith("sharegpt") for s in sources)}
    meta["files"] = sources
    with open(os.path.join(args.out, "corpus.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(json.dumps({k: v for k, v in meta.items() if k != "files"}))


if __name__ == "__main__":
    main()
