#!/usr/bin/env python3
"""Compares two `zipmoe generate --logits-out` files (float32 little-endian rows [n_rows, vocab]).

Usage: compare_logits.py A.f32 B.f32 [--vocab V]
Prints one line: rows, whether the bytes are identical, the max |a-b| relative to max |a| over all rows,
and how many rows agree on the argmax (the greedy token). The vocabulary size is inferred as the
largest divisor of both files' float counts that is a plausible row length when not given.
Exit status: 0 when the files could be compared, 2 on a bad file.
"""
import argparse
import sys

import numpy as np


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--vocab", type=int, default=0)
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
    if vocab == 0:
        import math
        g = math.gcd(a.size, b.size)
        # The row length: the gcd's largest divisor that leaves at most 4096 rows.
        vocab = next(d for d in range(g // 4096 if g > 4096 else 1, g + 1) if g % d == 0)
    ra, rb = a.reshape(-1, vocab), b.reshape(-1, vocab)
    n = min(len(ra), len(rb))
    ra, rb = ra[:n], rb[:n]
    scale = float(np.max(np.abs(ra))) or 1.0
    rel = float(np.max(np.abs(ra - rb))) / scale
    agree = int(np.sum(np.argmax(ra, axis=1) == np.argmax(rb, axis=1)))
    first = next((i for i in range(n) if np.argmax(ra[i]) != np.argmax(rb[i])), None)
    print(f"rows {n} (vocab {vocab}), bytes identical: {identical}, max |a-b|/max|a| = {rel:.3e}, "
          f"argmax agrees on {agree}/{n} rows" + (f", first differs at row {first}" if first is not None else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
