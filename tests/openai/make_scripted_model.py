#!/usr/bin/env python3
"""A scripted test model: whatever the prompt, greedy decoding writes one fixed answer (issues 39, 41).

  make_scripted_model.py --base TINY_QWEN2_MOE_DIR --out DIR
  make_scripted_model.py --base TINY_GPT_OSS_DIR --harmony TEMPLATE.jinja --out DIR

The OpenAI SDK's tool-calling, reasoning and template checks (tests/openai/10_tools.test.mjs) need a
model that *does* call a tool; a random tiny model never would. This turns `zipmoe synth --arch qwen2_moe
--preset tiny` into a qwen2_moe checkpoint of the same layout whose output is known:

  <think>The user wants the weather in Paris.</think><tool_call>{"name": "get_weather", "arguments":
  {"city": "Paris", "unit": "celsius"}}</tool_call><|endoftext|>

Each piece of SCRIPT is an added token (ids from the base vocabulary's size on). Every weight of every
decoder layer is zero (attention and MoE add nothing to the residual stream) and the norms are one, so
the hidden state at a position is the embedding of its token: piece i embeds as e_(i+1), every other
token as e_0, and the output head maps e_i to piece i (and e_n to EOS) with a logit of ~113 against 0 (and e_0 to
<tool_call> with ~57, the runner-up when a forced call masks <think>).
So the next token depends only on the current one, and the answer follows from any prompt. The chat
template (CHAT_TEMPLATE, written for this test) renders tools, tool calls, tool results and the
enable_thinking switch in the Hermes/Qwen style, so the server must detect <think> and <tool_call>
from it. Standard library only (safetensors is read and written by hand, BF16 as raw uint16).

With --harmony (issue 41) the base is `zipmoe synth --arch gpt_oss --preset tiny` and the chat template
is TEMPLATE (gpt-oss's published Harmony template, written as chat_template.jinja; the synthesized
reduced one is dropped), and the answer is HARMONY_SCRIPT: an analysis message, then a call of
get_weather in the commentary channel, in the form the published template renders calls, ended by
<|call|> (one of generation_config's EOS ids):

  <|channel|>analysis<|message|>The user wants the weather in Paris.<|end|><|start|>assistant
  to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris", "unit": "celsius"}<|call|>

(no line break). The pieces that repeat a Harmony marker are single added tokens, so that every piece is
a distinct token (the next token follows from the current one alone); gpt-oss's layers are zeroed the
same way (MXFP4 expert blocks all zero, so every expert and bias adds nothing; the clamped SwiGLU of 0
is 0; attention sinks 0).
"""
import argparse
import json
import os
import shutil
import struct
import sys

SCRIPT = [
    "<think>",
    "The user wants the weather in Paris.",
    "</think>",
    "<tool_call>",
    '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}',
    "</tool_call>",
]

CHAT_TEMPLATE = """{%- if tools %}<|im_start|>system
{% if messages[0].role == 'system' %}{{ messages[0].content }}

{% endif %}Tools you may call, one JSON object per call inside <tool_call></tool_call> tags:
<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools><|im_end|>
{% elif messages[0].role == 'system' %}<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == 'tool' %}<|im_start|>user
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% elif message.role == 'assistant' %}<|im_start|>assistant
{% if message.content %}{{ message.content }}{% endif %}
{%- for call in message.tool_calls or [] %}
<tool_call>
{"name": {{ call.function.name | tojson }}, "arguments": {{ call.function.arguments if call.function.arguments is string else call.function.arguments | tojson }}}
</tool_call>
{%- endfor %}<|im_end|>
{% elif message.role != 'system' %}<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% if enable_thinking is defined and not enable_thinking %}<think>

</think>

{% endif %}{% endif %}"""

HARMONY_SCRIPT = [
    "<|channel|>analysis<|message|>",
    "The user wants the weather in Paris.",
    "<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>",
    '{"city": "Paris", "unit": "celsius"}',
]
HARMONY_END = "<|call|>"

BF16_ONE = 0x3F80
BF16_TEN = 0x4120
BF16_FIVE = 0x40A0


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        tensors[name] = (info["dtype"], info["shape"], data[b:e])
    return header.get("__metadata__"), tensors


def write_safetensors(path, metadata, tensors):
    header, offset, blobs = {}, 0, []
    if metadata is not None:
        header["__metadata__"] = metadata
    for name in sorted(tensors):
        dtype, shape, blob = tensors[name]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)
    os.replace(tmp, path)


def rows(vocab, hidden, fill):
    """A [vocab, hidden] BF16 matrix (bytes) with row r's cells = fill(r) -> [(column, bf16 bits)]."""
    out = bytearray(vocab * hidden * 2)
    for r in range(vocab):
        for col, bits in fill(r):
            struct.pack_into("<H", out, (r * hidden + col) * 2, bits)
    return bytes(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="`zipmoe synth --arch qwen2_moe --preset tiny` output")
    ap.add_argument("--out", required=True)
    ap.add_argument("--harmony", metavar="TEMPLATE", help="a gpt_oss base; TEMPLATE: the Harmony chat template")
    args = ap.parse_args()
    with open(os.path.join(args.base, "config.json")) as f:
        config = json.load(f)
    want = "gpt_oss" if args.harmony else "qwen2_moe"
    if config.get("model_type") != want:
        sys.exit(f"make_scripted_model: {args.base}/config.json: model_type must be {want}")
    script = HARMONY_SCRIPT if args.harmony else SCRIPT
    hidden, base_vocab = config["hidden_size"], config["vocab_size"]
    eos = config["eos_token_id"]
    eos = eos[0] if isinstance(eos, list) else eos
    if hidden < len(script) + 1:
        sys.exit(f"make_scripted_model: hidden_size {hidden} < {len(script) + 1}")
    os.makedirs(args.out, exist_ok=True)
    for name in os.listdir(args.base):
        if not name.endswith(".safetensors") and name not in ("config.json", "tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(args.base, name), os.path.join(args.out, name))

    with open(os.path.join(args.base, "tokenizer.json")) as f:
        tok = json.load(f)
    if args.harmony:  # the answer ends with <|call|>, which generation_config lists as an EOS id
        eos = next((t["id"] for t in tok["added_tokens"] if t["content"] == HARMONY_END), None)
        if eos is None:
            sys.exit(f"make_scripted_model: {args.base}/tokenizer.json has no {HARMONY_END} token")
    first = max([base_vocab] + [t["id"] + 1 for t in tok["added_tokens"]])
    piece_ids = list(range(first, first + len(script)))
    for i, piece in zip(piece_ids, script):
        tok["added_tokens"].append({"id": i, "content": piece, "single_word": False, "lstrip": False,
                                    "rstrip": False, "normalized": False, "special": False})
    vocab = first + len(script)
    with open(os.path.join(args.out, "tokenizer.json"), "w") as f:
        json.dump(tok, f, ensure_ascii=False, indent=1)
    with open(os.path.join(args.base, "tokenizer_config.json")) as f:
        tcfg = json.load(f)
    if args.harmony:
        tcfg.pop("chat_template", None)
        shutil.copy(args.harmony, os.path.join(args.out, "chat_template.jinja"))
    else:
        tcfg["chat_template"] = CHAT_TEMPLATE
    decoder = tcfg.setdefault("added_tokens_decoder", {})
    for i, piece in zip(piece_ids, script):
        decoder[str(i)] = {"content": piece, "lstrip": False, "normalized": False, "rstrip": False,
                           "single_word": False, "special": False}
    with open(os.path.join(args.out, "tokenizer_config.json"), "w") as f:
        json.dump(tcfg, f, ensure_ascii=False, indent=1)
    config["vocab_size"] = vocab
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)

    position = {pid: k for k, pid in enumerate(piece_ids)}  # piece k embeds as e_(k+1)

    def embed(r):
        return [(position[r] + 1, BF16_ONE)] if r in position else [(0, BF16_ONE)]

    tool_open = None if args.harmony else position[piece_ids[SCRIPT.index("<tool_call>")]]

    def head(r):
        if r in position:
            cells = [(position[r], BF16_TEN)]  # e_k -> piece k
            if tool_open is not None and position[r] == tool_open:
                # The runner-up from any prompt: when the answer must be a tool call (tool_choice
                # required, which masks <think>), the call comes next, not the lowest-id token.
                cells.append((0, BF16_FIVE))
            return cells
        if r == eos:
            return [(len(script), BF16_TEN)]  # after the last piece
        return []

    shards = sorted(n for n in os.listdir(args.base) if n.endswith(".safetensors"))
    for shard in shards:
        metadata, tensors = read_safetensors(os.path.join(args.base, shard))
        for name, (dtype, shape, blob) in list(tensors.items()):
            if dtype != "BF16" and not (args.harmony and dtype == "U8"):  # U8: gpt-oss's MXFP4 blocks / scales
                sys.exit(f"make_scripted_model: {shard}: {name} is {dtype}, expected BF16")
            if name == "model.embed_tokens.weight":
                tensors[name] = (dtype, [vocab, hidden], rows(vocab, hidden, embed))
            elif name == "lm_head.weight":
                tensors[name] = (dtype, [vocab, hidden], rows(vocab, hidden, head))
            elif name.endswith("norm.weight"):
                tensors[name] = (dtype, shape, struct.pack("<H", BF16_ONE) * (len(blob) // 2))
            else:
                tensors[name] = (dtype, shape, bytes(len(blob)))
        write_safetensors(os.path.join(args.out, shard), metadata, tensors)
    print(json.dumps({"out": args.out, "vocab_size": vocab, "pieces": dict(zip(script, piece_ids)), "eos": eos}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
