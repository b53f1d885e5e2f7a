#!/usr/bin/python3
"""SentencePiece as the reference for a real T5-style tokenizer.json with a Precompiled normalizer.

Usage: spm_reference.py --prompts sharegpt.json --out DIR [--byte-fallback]

Trains a SentencePiece unigram model (Debian's python3-sentencepiece, nmt_nfkc normalization rules,
the library's defaults otherwise) on the ShareGPT prompts, then writes into DIR:
  tokenizer.json        what transformers' T5 converter (convert_slow_tokenizer.SpmConverter) makes of
                        such a model: normalizer Sequence[Precompiled(the model's precompiled_charsmap),
                        Strip(right), Replace(" {2,}" -> " ")], Metaspace pre-tokenizer and decoder
                        (prepend_scheme always), the Unigram vocabulary with SentencePiece's scores,
                        </s> appended by a TemplateProcessing post-processor;
  tokenizer_config.json T5Tokenizer's;
  inputs.json           the prompts, then edge cases (NFKC-changed characters, control characters,
                        odd whitespace, combining marks, characters the model never saw);
  reference.jsonl       {"ids": SentencePiece's EncodeAsIds(text) + [</s>]} per input (no decodings:
                        SentencePiece's decode is not HF's, check_reference.cc then checks ids only).

spm_reference.py --compare DIR (after check_reference.cc wrote DIR/zipmoe_ids.jsonl): every input whose ids
differ from SentencePiece's must be a Viterbi tie, not a normalization or segmentation error: both
segmentations spell the same normalized text and their piece scores sum to exactly the same value
(exact rational sums of the stored float scores). HF tokenizers (and zipmoe) add scores in double, SentencePiece
in float, so float rounding picks a different path among exactly tied ones (e.g. "w"+"ww" vs "ww"+"w").
Prints the counts and the first real difference; exit 0 iff there is none.

Needs /usr/bin/python3 with python3-sentencepiece (scripts/install_deps.sh).
"""
import argparse
import base64
import json
import os
import sys
import tempfile

try:
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as model_pb2
except ImportError as e:  # pragma: no cover - environment check
    sys.exit(f"spm_reference: python3-sentencepiece is missing ({e}): run scripts/install_deps.sh")

from make_t5_tokenizer import META, t5_post_processor  # this folder (the script's directory is on sys.path)


def train(prompts, out_dir, byte_fallback):
    corpus = os.path.join(out_dir, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        for p in prompts:
            f.write(" ".join(p.split("\n")) + "\n")
    prefix = os.path.join(out_dir, "spm")
    spm.SentencePieceTrainer.train(
        input=corpus, model_prefix=prefix, model_type="unigram", vocab_size=3000, character_coverage=0.9995,
        normalization_rule_name="nmt_nfkc", pad_id=0, eos_id=1, unk_id=2, bos_id=-1, byte_fallback=byte_fallback,
        num_threads=2, minloglevel=2, hard_vocab_limit=False)
    return prefix + ".model"


def build(model_path, byte_fallback):
    proto = model_pb2.ModelProto()
    with open(model_path, "rb") as f:
        proto.ParseFromString(f.read())
    charsmap = base64.b64encode(proto.normalizer_spec.precompiled_charsmap).decode("ascii")
    vocab = [[p.piece, p.score] for p in proto.pieces]
    specials = {"<pad>": 0, "</s>": 1, "<unk>": 2}
    added = [{"id": i, "content": c, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for c, i in specials.items()]
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Precompiled", "precompiled_charsmap": charsmap},
            {"type": "Strip", "strip_left": False, "strip_right": True},
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}]},
        "pre_tokenizer": {"type": "Metaspace", "replacement": META, "prepend_scheme": "always", "split": True},
        "post_processor": t5_post_processor(),
        "decoder": {"type": "Metaspace", "replacement": META, "prepend_scheme": "always", "split": True},
        "model": {"type": "Unigram", "unk_id": 2, "vocab": vocab, "byte_fallback": byte_fallback},
    }


def inputs_of(prompts):
    return list(prompts) + [
        "hello", "hello world", "hello   world", "\tTabs\tand\nnewlines", "trailing space ",
        "ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３ and ligatures ﬁ ﬂ ﬃ", "circled ① ② ⑩ and ㍻ ㌔ ℡ ™ ½",
        "cafe\u0301 nai\u0308ve (combining marks) vs café naïve", "control\u0001chars\u0007here\u007f",
        "zero\u200bwidth\u200cjoiners\u200dand\ufeffBOM", "nbsp\u00a0and\u3000ideographic\u2003em space",
        "Hangul 한국어 텍스트, 中文, العربية, עברית, ไทย", "emoji 👋🏽 👨‍👩‍👧 🇩🇪 flags", "x" * 200,
        "Ångström Å Å", "ﾊﾝｶｸｶﾀｶﾅ half-width katakana", "～tilde～ and 〜wave〜",
    ]


def compare(out_dir):
    from fractions import Fraction
    with open(os.path.join(out_dir, "tokenizer.json"), encoding="utf-8") as f:
        vocab = json.load(f)["model"]["vocab"]
    with open(os.path.join(out_dir, "inputs.json"), encoding="utf-8") as f:
        inputs = json.load(f)
    with open(os.path.join(out_dir, "reference.jsonl"), encoding="utf-8") as f:
        want = [json.loads(line)["ids"] for line in f if line.strip()]
    with open(os.path.join(out_dir, "zipmoe_ids.jsonl"), encoding="utf-8") as f:
        got = [json.loads(line) for line in f if line.strip()]
    if not (len(inputs) == len(want) == len(got)):
        print(f"spm_reference: {len(inputs)} inputs, {len(want)} reference lines, {len(got)} zipmoe lines")
        return 2
    equal = ties = 0
    real = []
    for i, (a, b) in enumerate(zip(got, want)):
        if a == b:
            equal += 1
            continue
        text_a = "".join(vocab[t][0] for t in a) if a is not None else None
        text_b = "".join(vocab[t][0] for t in b)
        score_a = sum(Fraction(vocab[t][1]) for t in a) if a is not None else None
        score_b = sum(Fraction(vocab[t][1]) for t in b)
        if text_a == text_b and score_a == score_b:
            ties += 1
        else:
            real.append((i, a, b, text_a, text_b, score_a, score_b))
    print(f"spm_reference: ids equal to SentencePiece's on {equal}/{len(inputs)} inputs, {ties} more differ only "
          f"between exactly tied segmentations, {len(real)} really differ")
    if real:
        i, a, b, ta, tb, sa, sb = real[0]
        print(f"FIRST REAL DIFFERENCE: input {i}: {json.dumps(inputs[i][:300], ensure_ascii=False)}\n"
              f"  zipmoe:       {a}\n    spells {json.dumps(ta, ensure_ascii=False)} (score {float(sa or 0):.6f})\n"
              f"  SentencePiece: {b}\n    spells {json.dumps(tb, ensure_ascii=False)} (score {float(sb):.6f})")
        return 1
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts")
    ap.add_argument("--out")
    ap.add_argument("--byte-fallback", action="store_true")
    ap.add_argument("--compare", metavar="DIR")
    args = ap.parse_args()
    if args.compare:
        sys.exit(compare(args.compare))
    if not args.prompts or not args.out:
        ap.error("--prompts and --out are required (or --compare DIR)")
    with open(args.prompts, encoding="utf-8") as f:
        prompts = [c["conversations"][0]["value"] for c in json.load(f)]
    os.makedirs(args.out, exist_ok=True)
    model_path = train(prompts, args.out, args.byte_fallback)
    sp = spm.SentencePieceProcessor(model_file=model_path)
    with open(os.path.join(args.out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(build(model_path, args.byte_fallback), f, ensure_ascii=False)
    config = {"tokenizer_class": "T5Tokenizer", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>",
              "extra_ids": 0, "clean_up_tokenization_spaces": False}
    with open(os.path.join(args.out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=1)
    inputs = inputs_of(prompts)
    with open(os.path.join(args.out, "inputs.json"), "w", encoding="utf-8") as f:
        json.dump(inputs, f, ensure_ascii=False)
    with open(os.path.join(args.out, "reference.jsonl"), "w", encoding="utf-8") as f:
        for text in inputs:
            f.write(json.dumps({"ids": sp.encode(text) + [1]}) + "\n")
    print("spm_reference: %d prompts, %d inputs, %d pieces -> %s" % (len(prompts), len(inputs),
                                                                     sp.get_piece_size(), args.out))


if __name__ == "__main__":
    main()
