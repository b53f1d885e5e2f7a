#!/usr/bin/env bash
# Rebuilds the shipped model (models/qwen2moe-debian-18m, see its README.md) from scratch on a Debian 12
# machine: installs Debian's python3-torch, builds the corpus from the machine's man pages + the ShareGPT
# prompts (corpus.py), learns the BPE tokenizer and trains (train.py; 2 CPU threads, 70 minutes of
# wall time by default). Usage: scripts/train/train.sh [OUT_DIR] [extra train.py flags]
# The corpus depends on which packages' man pages are installed: corpus.json records the files used and
# the SHA-256 of train.txt/val.txt, so a rebuild can tell whether it saw the same text.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-out/train/qwen2moe-debian-18m}
shift || true
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  SUDO=""; if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3-torch manpages manpages-dev
fi
mkdir -p "$OUT"
/usr/bin/python3 scripts/train/corpus.py --out "$OUT/corpus"
/usr/bin/python3 scripts/train/train.py --corpus "$OUT/corpus" --out "$OUT/model" --seed 0 --threads 2 "$@" \
  2>&1 | tee "$OUT/train.log"
# The shipped weights' validation loss over all of val.txt (into training.json "evaluation").
/usr/bin/python3 scripts/train/evaluate.py --model "$OUT/model" --corpus "$OUT/corpus" --update
cp "$OUT/corpus/corpus.json" "$OUT/model/corpus.json"
echo "trained: $OUT/model (HF layout, BF16); compress it with: build/bin/zipmoe compress $OUT/model DIR"
