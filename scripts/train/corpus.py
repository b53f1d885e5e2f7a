#!/usr/bin/python3
"""Builds the English training corpus of the shipped MoE (models/README.md) from text that Debian ships.

Only files that Debian packages install are read, and only from a fixed list of packages (PACKAGES below,
installed by scripts/train/train.sh; each file found through the package's dpkg file list, sorted), so two
machines with the same package versions build the same corpus whatever else they have installed:
  manpages, manpages-dev  the Linux man-pages project (sections 2-5, 7): troff requests dropped, font and
                          escape sequences replaced by their text, paragraphs joined;
  debian-handbook         The Debian Administrator's Handbook, English HTML (tags stripped);
  debian-reference-en     the Debian Reference, English HTML;
  gnu-standards           the GNU Coding Standards and Information for Maintainers (info files);
  fortunes                fortune-mod's quotations (each fortune one document);
plus the ShareGPT first-turn prompts of bench/data/sharegpt-first-turn-500.json.
Text is reduced to ASCII (typographic quotes/dashes mapped, other characters dropped) and split into
documents; every 20th document (by a hash of its text, so stable across runs) goes to the validation
split. Output: OUT/train.txt, OUT/val.txt (documents separated by a blank line + <|endoftext|> line),
OUT/corpus.json (packages and versions, files used, SHA-256 of both splits). A missing package is an error
naming it (install it, or run train.sh, which does).

Usage: corpus.py --out DIR [--max-mib 24]
"""
import argparse
import gzip
import html
import subprocess
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


PACKAGES = ["manpages", "manpages-dev", "debian-handbook", "debian-reference-en", "gnu-standards", "fortunes"]


def package_files(pkg):
    """(version, sorted files) that dpkg lists for an installed package; exits naming it when missing."""
    p = subprocess.run(["dpkg-query", "-W", "-f", "${Status}\t${Version}", pkg], capture_output=True, text=True)
    if p.returncode != 0 or not p.stdout.startswith("install ok installed"):
        raise SystemExit(f"corpus.py: Debian package {pkg} is not installed (apt-get install {pkg}, or run "
                         f"scripts/train/train.sh)")
    files = subprocess.run(["dpkg-query", "-L", pkg], capture_output=True, text=True, check=True).stdout.split("\n")
    return p.stdout.split("\t")[1], sorted(f for f in files if f and os.path.isfile(f) and not os.path.islink(f))


def html_to_text(src):
    src = re.sub(r"(?is)<(script|style|head)\b.*?</\1>", " ", src)
    src = re.sub(r"(?i)<br\s*/?>|</?(p|div|li|h[1-6]|pre|tr|dt|dd|table|ul|ol|title)\b[^>]*>", "\n\n", src)
    src = re.sub(r"<[^>]+>", "", src)
    text = html.unescape(src)
    paras = [re.sub(r"\s+", " ", p).strip() for p in re.split(r"\n\s*\n", text)]
    return "\n\n".join(p for p in paras if len(p) > 1)


def info_to_text(src):
    nodes = src.split("\x1f")
    out = []
    for node in nodes:
        lines = [l for l in node.split("\n") if not l.startswith("File: ") and not l.startswith("* ")
                 and not l.startswith("Tag Table:") and not l.startswith("Ref: ") and not re.fullmatch(r"[=*.-]{3,}", l.strip())]
        text = "\n".join(lines)
        paras = [re.sub(r"\s*\n\s*", " ", p).strip() for p in re.split(r"\n\s*\n", text)]
        out.append("\n\n".join(p for p in paras if len(p) > 1))
    return out


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
    versions = {}
    for pkg in PACKAGES:
        versions[pkg], files = package_files(pkg)
        for path in files:
            if "/man/man" in path and path.endswith(".gz"):
                src = read_maybe_gz(path)
                if src and not src.startswith(".so "):
                    texts = [man_to_text(src)]
                else:
                    continue
            elif pkg == "debian-handbook" and "/html/en-US/" in path and path.endswith(".html"):
                texts = [html_to_text(read_maybe_gz(path) or "")]
            elif pkg == "debian-reference-en" and path.endswith(".en.html"):
                texts = [html_to_text(read_maybe_gz(path) or "")]
            elif pkg == "gnu-standards" and path.endswith(".info.gz"):
                texts = info_to_text(read_maybe_gz(path) or "")
            elif pkg == "fortunes" and "/games/fortunes/" in path and "." not in os.path.basename(path):
                texts = [re.sub(r"\s*\n\s*", " ", f).strip() for f in (read_maybe_gz(path) or "").split("\n%\n")]
            else:
                continue
            for i, t in enumerate(texts):
                t = to_ascii(t)
                if (pkg == "fortunes" and len(t) > 40) or english_enough(t):
                    docs.append((f"{path}#{i}" if len(texts) > 1 else path, t))
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
    meta["packages"] = versions
    meta["sources"] = {"man": sum(s.startswith("/usr/share/man") for s in sources),
                       "debian-handbook": sum("debian-handbook" in s for s in sources),
                       "debian-reference": sum("debian-reference" in s for s in sources),
                       "info": sum(s.startswith("/usr/share/info") for s in sources),
                       "fortunes": sum("/fortunes/" in s for s in sources),
                       "sharegpt": sum(s.startswith("sharegpt") for s in sources)}
    meta["files"] = sources
    with open(os.path.join(args.out, "corpus.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(json.dumps({k: v for k, v in meta.items() if k != "files"}))


if __name__ == "__main__":
    main()
