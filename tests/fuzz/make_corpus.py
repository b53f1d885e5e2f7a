#!/usr/bin/python3
"""Writes the seed corpora of tests/fuzz/corpus/ that come from a synthesized model or by hand.

    tests/fuzz/make_corpus.py SYNTH_ROOT [COMPRESSED_DIR]

SYNTH_ROOT holds `zipmoe synth --arch A --preset tiny --out SYNTH_ROOT/A` for the five archs;
COMPRESSED_DIR is `zipmoe compress SYNTH_ROOT/qwen2_moe DIR --shards 1` (its manifest.bin).
The generated binary seeds (messages, small manifests, small safetensors) come from the make_seeds
binary (scripts/fuzz.sh --make-seeds). Real tokenizer.json files are shrunk to a few dozen tokens,
keeping their structure, so the corpus stays small (< 1 MB in all).
"""
import json
import os
import shutil
import struct
import sys

ARCHS = ["qwen2_moe", "mixtral", "qwen3_moe", "olmoe", "deepseek_v2"]
HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")


def put(target, name, data):
    os.makedirs(os.path.join(CORPUS, target), exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(CORPUS, target, name), "wb") as f:
        f.write(data)


def shrink_tokenizer(tok, keep=48):
    """The tokenizer with its vocab cut to the first `keep` ids plus merges among them."""
    tok = json.loads(json.dumps(tok))
    vocab = {k: v for k, v in tok["model"]["vocab"].items() if v < keep}
    merges = []
    for m in tok["model"]["merges"]:
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        if a in vocab and b in vocab and a + b in vocab:
            merges.append(m)
    tok["model"]["vocab"] = vocab
    tok["model"]["merges"] = merges
    for i, t in enumerate(tok.get("added_tokens", [])):
        t["id"] = keep + i
    return tok


# A SentencePiece-style BPE (Metaspace, byte fallback, the Llama decoder chain), by hand.
SENTENCEPIECE = {
    "version": "1.0", "truncation": None, "padding": None,
    "added_tokens": [
        {"id": 0, "content": "<unk>", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True},
        {"id": 1, "content": "<s>", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True},
        {"id": 2, "content": "</s>", "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True},
        {"id": 20, "content": "[INST]", "single_word": True, "lstrip": True, "rstrip": True, "normalized": True, "special": False}],
    "normalizer": {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "\u2581"}, {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
    "pre_tokenizer": None,
    "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
              "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
              "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "<0x0A>": 3, "<0xE4>": 4, "<0xBD>": 5, "<0xA0>": 6,
                        "\u2581": 7, "h": 8, "e": 9, "l": 10, "o": 11, "\u2581h": 12, "ll": 13, "\u2581he": 14,
                        "llo": 15, "\u2581hello": 16, "w": 17, "r": 18, "d": 19},
              "merges": ["\u2581 h", "l l", "\u2581h e", "ll o", "\u2581he llo"]},
    "post_processor": {"type": "TemplateProcessing",
                       "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                       "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                       "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
    "decoder": {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "}, {"type": "ByteFallback"},
        {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
}

# Other pipeline pieces: Metaspace pre-tokenizer and decoder, Whitespace/Digits/Punctuation, Bert
# and Roberta processing, WordPiece-style decoder prefixes.
MISC = {
    "added_tokens": [{"id": 9, "content": "<mask>", "special": True, "lstrip": True}],
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"}, {"type": "Strip", "left": True, "right": True}]},
    "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
        {"type": "WhitespaceSplit"}, {"type": "Digits", "individual_digits": True}, {"type": "Punctuation", "behavior": "Isolated"},
        {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True}]},
    "model": {"type": "BPE", "unk_token": "[UNK]", "continuing_subword_prefix": "##", "end_of_word_suffix": "</w>",
              "vocab": {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "a": 3, "##b": 4, "ab": 5, "1": 6, "\u2581": 7, "\u2581a": 8},
              "merges": [["a", "##b"], ["\u2581", "a"]]},
    "post_processor": {"type": "BertProcessing", "sep": ["[SEP]", 2], "cls": ["[CLS]", 1]},
    "decoder": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": True},
}


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    root = sys.argv[1]
    for arch in ARCHS:
        d = os.path.join(root, arch)
        with open(os.path.join(d, "tokenizer.json")) as f:
            tok = json.load(f)
        put("tokenizer_load", arch + ".json", json.dumps(shrink_tokenizer(tok), indent=1, ensure_ascii=False))
        shutil.copy(os.path.join(d, "config.json"), os.path.join(CORPUS, "model_config", arch + ".json"))
        with open(os.path.join(d, "tokenizer_config.json"), "rb") as f:
            tcfg = f.read()
        msgs = [b"system", b"You are terse.", b"user", b"hi", b"assistant", b"hello", b"user", "\u4f60\u597d \U0001f44b".encode()]
        put("chat_template", arch, tcfg + b"\0" + b"\0".join(msgs))
        put("chat_template", arch + "-user-only", tcfg + b"\0user\0x")
        # The model's real safetensors header (its data offsets run past this seed: an error path).
        with open(os.path.join(d, "model.safetensors"), "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = f.read(n)
        if arch == "qwen2_moe":
            put("safetensors", "qwen2_moe_header_only.safetensors", struct.pack("<Q", n) + header)
    put("tokenizer_load", "sentencepiece.json", json.dumps(SENTENCEPIECE, ensure_ascii=False))
    put("tokenizer_load", "misc_pipeline.json", json.dumps(MISC, ensure_ascii=False))
    if len(sys.argv) == 3:
        shutil.copy(os.path.join(sys.argv[2], "manifest.bin"), os.path.join(CORPUS, "manifest", "qwen2_moe_tiny_k1.bin"))

    # safetensors: hand-written edge cases (length prefix + header [+ data]).
    def st(header, data=b""):
        h = header.encode() if isinstance(header, str) else header
        return struct.pack("<Q", len(h)) + h + data
    put("safetensors", "empty_header.safetensors", st("{}"))
    put("safetensors", "nul_padded.safetensors", st('{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}\0\0\0', b"xy"))
    put("safetensors", "overlap.safetensors", st('{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}', b"xyz"))
    put("safetensors", "duplicate.safetensors", st('{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', b"x"))
    put("safetensors", "huge_shape.safetensors", st('{"a":{"dtype":"F64","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}}', b"12345678"))
    put("safetensors", "zero_dim.safetensors", st('{"__metadata__":{"k":"v"},"z":{"dtype":"BF16","shape":[3,0],"data_offsets":[4,4]},"w":{"dtype":"F8_E4M3","shape":[],"data_offsets":[0,1]}}', b"abcd"))

    # model.safetensors.index.json for the harness's fixed shards (a, b in 00001; c in 00002).
    put("safetensors_index", "valid.json", json.dumps({"metadata": {"total_size": 28}, "weight_map": {
        "a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors"}}, indent=2))
    put("safetensors_index", "partial.json", '{"weight_map": {"a": "model-00001-of-00002.safetensors"}}')
    put("safetensors_index", "wrong_shard.json", '{"weight_map": {"c": "model-00001-of-00002.safetensors"}}')
    put("safetensors_index", "missing_shard.json", '{"weight_map": {"a": "model-00003-of-00003.safetensors"}}')
    put("safetensors_index", "bad_types.json", '{"weight_map": {"a": 1, "b": ""}}')
    put("safetensors_index", "traversal.json", '{"weight_map": {"a": "../ckpt/model-00001-of-00002.safetensors"}}')

    # config.json edge cases.
    put("model_config", "deepseek_yarn_group.json", json.dumps({
        "model_type": "deepseek_v2", "vocab_size": 64, "hidden_size": 32, "num_hidden_layers": 3, "num_attention_heads": 4,
        "intermediate_size": 64, "moe_intermediate_size": 16, "max_position_embeddings": 128, "q_lora_rank": 8,
        "kv_lora_rank": 8, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8, "n_routed_experts": 8,
        "num_experts_per_tok": 2, "n_shared_experts": 1, "first_k_dense_replace": 1, "moe_layer_freq": 1,
        "topk_method": "group_limited_greedy", "n_group": 4, "topk_group": 2, "scoring_func": "softmax",
        "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096, "beta_fast": 32,
                         "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 0.707}, "eos_token_id": [1, 2]}))
    put("model_config", "zero_sizes.json", '{"model_type": "mixtral", "vocab_size": 0, "hidden_size": 0, "num_hidden_layers": 0, '
        '"num_attention_heads": 0, "intermediate_size": 0, "max_position_embeddings": 0, "num_local_experts": 0, "num_experts_per_tok": 0}')
    put("model_config", "huge.json", '{"model_type": "qwen2_moe", "vocab_size": 9223372036854775807, "hidden_size": 9223372036854775807, '
        '"num_hidden_layers": 2, "num_attention_heads": -1, "intermediate_size": 1e308, "max_position_embeddings": 1}')

    # Encode/decode: first byte = flags (bit 0 mixtral, bit 1 add specials, bit 2 skip specials).
    for i, text in enumerate([
            "Hello, world! It's 2024.\n\n  indented\ttab",
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
            "\u4f60\u597d\uff0c\u4e16\u754c \U0001f44b\U0001f3fd caf\u00e9 e\u0301 \ufb01",
            "<s>[INST] x [/INST]</s><|endoftext|>"]):
        put("tokenizer_encode", f"text{i}", bytes([i * 3 % 8]) + text.encode())
    put("tokenizer_encode", "invalid_utf8", b"\x02abc\xff\xfe\xc0\xaf\xed\xa0\x80\xf4\x90\x80\x80 \xe4\xbd")
    put("tokenizer_encode", "raw_ids", b"\x00" + struct.pack("<8i", 0, 1, 2045, 2046, 2047, -1, 2**31 - 1, 77))

    # Request bodies (both endpoints run on each).
    bodies = {
        "completion_string": {"model": "m", "prompt": "Hello", "max_tokens": 4, "temperature": 0.7, "top_p": 0.9,
                              "stop": ["\n", "END"], "seed": 1, "logprobs": 2, "echo": True, "n": 2, "best_of": 2},
        "completion_ids": {"prompt": [[1, 2, 3], [4]], "max_tokens": None, "stream": True,
                           "stream_options": {"include_usage": True}, "top_k": 5, "ignore_eos": True},
        "completion_mixed": {"prompt": ["a", "b"], "presence_penalty": 2, "frequency_penalty": -2, "logit_bias": {}, "user": "u"},
        "chat": {"model": "m", "messages": [{"role": "system", "content": "Be brief."},
                                            {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "!"}]},
                                            {"role": "assistant", "content": None, "tool_calls": []},
                                            {"role": "developer", "content": "x"}, {"role": "tool", "content": "y"}],
                 "max_completion_tokens": 8, "logprobs": True, "top_logprobs": 3, "response_format": {"type": "text"},
                 "tool_choice": "none", "stop": "STOP"},
        "completion_vllm_extras": {"prompt": "a", "max_tokens": 4, "min_p": 0.05, "repetition_penalty": 1.1,
                                   "stop_token_ids": [1, 2], "min_tokens": 2},
        "chat_unsupported": {"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}],
                             "min_p": 0.1, "repetition_penalty": 1.1, "suffix": "s"},
    }
    for name, body in bodies.items():
        put("openai_request", name + ".json", json.dumps(body))
    put("openai_request", "not_object.json", "[1, 2, 3]")
    put("openai_request", "too_long.json", json.dumps({"prompt": [5] * 300, "max_tokens": 1000000}))


if __name__ == "__main__":
    main()
