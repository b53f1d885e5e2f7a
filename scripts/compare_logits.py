#!/usr/bin/env python3
"""Compares two `zipmoe generate --logits-out` files (float32 little-endian rows [n_rows, vocab]).

Usage: compare_logits.py A.f32 B.f32 --vocab V   (V: config.json's vocab_size)
Prints one line: rows, whether the bytes are identical, the max |a-b| relative to max |a| over all rows,
and how many rows agree on the argmax (the greedy token).
Exit status: 0 when the files could be compared, 2 on a bad file.
"""
import argparse
import sys

import numpy as np


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--vocab", type=int, required=True)
    args = ap.parse_args()
    try:
        a = np.fromfile(args.a, dtype="<f4")
        b = np.fromfile(args.b, dtype="<f4")
    except OSError as e:
        print(f"cannot read: {e}")
        return 2
    if a.size == 0 or b.size == 0:
        print(f"empty logits file ({args.a}: {a.size} values, {args.b}: {b.size} values)")
        return 2
    identical = a.tobytes() == b.tobytes()
    vocab = args.vocab
    for path, x in ((args.a, a), (args.b, b)):
        if vocab <= 0 or x.size % vocab != 0:
            print(f"{path}: {x.size} values are not rows of {vocab} (--vocab)")
            return 2
    ra, rb = a.reshape(-1, vocab), b.reshape(-1, vocab)
    n = min(len(ra), len(rb))
    ra, rb = ra[:n], rb[:n]
    scale = float(np.max(np.abs(ra))) or 1.0
    rel = float(np.max(np.abs(ra - rb))) / scale
    same = np.argmax(ra, axis=1) == np.argmax(rb, axis=1)
    agree = int(np.sum(same))
    first = int(np.argmin(same)) if agree < n else None
    print(f"rows {n} (vocab {vocab}), bytes identical: {identical}, max |a-b|/max|a| = {rel:.3e}, "
          f"argmax agrees on {agree}/{n} rows" + (f", first differs at row {first}" if first is not None else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
