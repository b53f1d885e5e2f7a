#!/usr/bin/env bash
# Rebuilds the shipped model (models/qwen2moe-debian-18m, see its README.md) from scratch on a Debian 12
# machine: installs Debian's python3-torch and the text packages the corpus reads (corpus.py PACKAGES),
# builds the corpus, learns the BPE tokenizer and trains (train.py; seed 0, 2 CPU threads, a cosine
# schedule over 42 minutes of wall time, as the shipped model), then evaluates the BF16 weights on the
# held-out text (evaluate.py). Usage: scripts/train/train.sh [OUT_DIR] [extra train.py flags]
# corpus.json records the package versions, the files used and the SHA-256 of train.txt/val.txt, so a
# rebuild can tell whether it saw the same text. Wall-time scheduling means a faster machine takes more
# steps: pass --steps N --minutes 0 to fix the step count instead (the shipped run's is in training.json).
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${1:-out/train/qwen2moe-debian-18m}
shift || true
PACKAGES=(python3-torch python3-numpy manpages manpages-dev debian-handbook debian-reference-en gnu-standards fortunes)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
mkdir -p "$OUT"
/usr/bin/python3 scripts/train/corpus.py --out "$OUT/corpus"
/usr/bin/python3 scripts/train/train.py --corpus "$OUT/corpus" --out "$OUT/model" --seed 0 --threads 2 --minutes 42 "$@" \
  2>&1 | tee "$OUT/train.log"
# The shipped weights' validation loss over all of val.txt (into training.json "evaluation").
/usr/bin/python3 scripts/train/evaluate.py --model "$OUT/model" --corpus "$OUT/corpus" --update
cp "$OUT/corpus/corpus.json" "$OUT/model/corpus.json"
echo "trained: $OUT/model (HF layout, BF16); compress it with: build/bin/zipmoe compress $OUT/model DIR"
