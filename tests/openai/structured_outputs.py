#!/usr/bin/env python3
"""Structured outputs against random JSON schemas (issue 39): every constrained answer validates.

  structured_outputs.py --zipmoe BIN [--model DIR] [--schemas 200] [--seed 1]
  structured_outputs.py --zipmoe BIN --tool-syntax glm|qwen_xml|granite|lfm2 [--schemas 100] [--seed 1]
  structured_outputs.py --zipmoe BIN --model DIR --bench [--tokens 128] [--rounds 3]

Check mode (ctest structured_outputs): serves a tiny synthesized qwen2_moe (or --model) with
`zipmoe serve`, draws --schemas random schemas (nested objects with required and optional
properties, arrays with maxItems, enums and const, numbers, integers with and without bounds,
booleans, null, strings with maxLength, anyOf, nullable type lists, $defs + $ref), asks /v1/chat/completions for each with
response_format json_schema at temperature 1 (a random model explores the whole grammar), and
requires every answer to end with finish_reason "stop", parse as JSON and validate against its schema
with python3-jsonschema, an independent validator. Strings carry a maxLength so that a random model
ends them; the grammar bounds numbers, whitespace and nesting itself.

Tool mode (--tool-syntax): forced tool calls in a family whose call syntax is not JSON. The tiny
model gets a chat template of that family (GLM-4.5's <arg_key>/<arg_value> pairs, or Qwen3-Coder's
<function=...><parameter=...> XML, or Granite 3's <|tool_call|> followed by a JSON list, or LFM2's
<|tool_call_start|>[...]<|tool_call_end|> (the JSON form of its Python calls); written here, only the markers matter), and each random object
schema becomes a tool's `parameters`, called with tool_choice "required" at temperature 1: every
answer must end with finish_reason "tool_calls" and its arguments (parsed back from the tagged text
by the server) must validate against the schema.

Bench mode: the mask's cost per decode step. The same prompt decodes --tokens tokens free
(ignore_eos) and under a schema whose one string runs as long, interleaved for --rounds rounds; prints
the median time per token of each and their ratio (JSON).
Standard library + python3-jsonschema (scripts/install_deps.sh).
"""
import argparse
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request


def post(base, path, body, timeout=600):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


class Server:
    def __init__(self, zipmoe, model, workdir):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = open(os.path.join(workdir, "server.err"), "w")
        self.proc = subprocess.Popen([zipmoe, "serve", "--model", model, "--port", str(self.port), "--threads", "2"],
                                     stdout=subprocess.DEVNULL, stderr=self.log, start_new_session=True)
        deadline = time.time() + 120
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"zipmoe serve exited with {self.proc.returncode} (see {self.log.name})")
            try:
                with urllib.request.urlopen(self.base + "/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.3)
        raise RuntimeError("zipmoe serve not healthy within 120 s")

    def close(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.log.close()


class SchemaGen:
    """Random schemas of bounded size, in the subset services/api/json_grammar.h enforces."""

    WORDS = ["id", "name", "kind", "value", "items", "note", "size", "ok", "tags", "x", "y", "meta", "when", "a_b"]

    def __init__(self, rng):
        self.rng = rng
        self.defs = {}
        self.in_def = False

    def scalar(self):
        r = self.rng.random()
        if r < 0.2:
            return {"type": "string", "maxLength": self.rng.randint(0, 8)}
        if r < 0.28:
            return {"type": "integer"}
        if r < 0.35:
            lo = self.rng.randint(-1000, 1000)
            s = {"type": "integer", "minimum": lo, "maximum": lo + self.rng.choice([0, 1, 9, 10, 99, 5000])}
            if self.rng.random() < 0.3:
                s["exclusiveMinimum"] = s.pop("minimum") - 1
            return s
        if r < 0.5:
            return {"type": "number"}
        if r < 0.6:
            return {"type": "boolean"}
        if r < 0.65:
            return {"type": "null"}
        if r < 0.8:
            pool = ["red", "green", "blue", 1, 12, 2.5, True, None, "é", "a b"]
            return {"enum": self.rng.sample(pool, self.rng.randint(1, 4))}
        if r < 0.85:
            return {"const": self.rng.choice(["fixed", 7, False, [1, "x"], {"k": None}])}
        if r < 0.93:
            return {"type": [self.rng.choice(["string", "integer", "number", "boolean"]), "null"], "maxLength": 5}
        return {"anyOf": [self.scalar(), self.scalar()]}

    def value(self, depth):
        r = self.rng.random()
        if depth >= 3 or r < 0.5:
            s = self.scalar()
            if s.get("type") and isinstance(s["type"], list) and "string" not in s["type"]:
                s.pop("maxLength", None)
            return s
        if r < 0.75:
            return self.obj(depth + 1)
        if r < 0.9:
            lo = self.rng.randint(0, 2)
            return {"type": "array", "items": self.value(depth + 1), "minItems": lo, "maxItems": lo + self.rng.randint(0, 2)}
        # A $ref to a definition built here and now; definitions hold no refs themselves, so every
        # schema has finite instances (a required self-reference would admit none).
        name = f"d{len(self.defs)}"
        if not self.in_def and len(self.defs) < 3:
            self.in_def = True
            self.defs[name] = self.obj(depth + 1)
            self.in_def = False
            return {"$ref": f"#/$defs/{name}"}
        return self.scalar()

    def obj(self, depth):
        keys = self.rng.sample(self.WORDS, self.rng.randint(0, 5))
        props = {k: self.value(depth) for k in keys}
        required = [k for k in keys if self.rng.random() < 0.6]
        return {"type": "object", "properties": props, "required": required, "additionalProperties": False,
                "description": "random"}

    def schema(self):
        self.defs = {}
        root = self.obj(0) if self.rng.random() < 0.85 else self.value(1)
        if self.defs:
            root = dict(root)
            root["$defs"] = self.defs
        return root


def check(args, base):
    import jsonschema  # python3-jsonschema

    rng = random.Random(args.seed)
    gen = SchemaGen(rng)
    failures, lengths = [], []
    for i in range(args.schemas):
        schema = gen.schema()
        status, r = post(base, "/v1/chat/completions", {
            "messages": [{"role": "user", "content": f"Answer {i} as JSON."}],
            "temperature": 1.0, "seed": args.seed * 1000 + i, "max_tokens": 2000,
            "response_format": {"type": "json_schema", "json_schema": {"name": f"s{i}", "schema": schema, "strict": True}},
        })
        why = None
        if status != 200:
            why = f"HTTP {status}: {r}"
        else:
            ch = r["choices"][0]
            text = ch["message"]["content"]
            lengths.append(r["usage"]["completion_tokens"])
            if ch["finish_reason"] != "stop":
                why = f"finish_reason {ch['finish_reason']} after {r['usage']['completion_tokens']} tokens"
            else:
                try:
                    jsonschema.validate(json.loads(text), schema)
                except (ValueError, jsonschema.ValidationError) as e:
                    why = f"{type(e).__name__}: {str(e)[:300]}"
        if why:
            failures.append({"schema": schema, "why": why, "text": r.get("choices", [{}])[0].get("message", {}).get("content")})
    print(json.dumps({"schemas": args.schemas, "valid": args.schemas - len(failures),
                      "median_tokens": statistics.median(lengths) if lengths else 0}))
    for f in failures[:5]:
        print(json.dumps({"why": f["why"], "schema": f["schema"], "text": f["text"]}, ensure_ascii=False)[:1500],
              file=sys.stderr)
    return 0 if not failures else 1


# Minimal chat templates of families whose tool calls are tagged text or a marked JSON list (only their
# markers matter to the server: services/api/chat_output_parser.h DetectChatSyntax).
TOOL_TEMPLATES = {
    "glm": ("{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}{% endfor %}"
            "{% if tools %}<|system|>\nTools: {% for t in tools %}{{ t | tojson }}{% endfor %}. Call one as "
            "<tool_call>NAME\n<arg_key>KEY</arg_key>\n<arg_value>VALUE</arg_value>\n</tool_call>{% endif %}"
            "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"),
    "qwen_xml": ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                 "{% if tools %}<|im_start|>system\nTools: {% for t in tools %}{{ t | tojson }}{% endfor %}. Call one as "
                 "<tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n</function>\n</tool_call>"
                 "<|im_end|>\n{% endif %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"),
    "granite": ("{% if tools %}<|start_of_role|>available_tools<|end_of_role|>{% for t in tools %}{{ t | tojson }}"
                "{% endfor %}<|end_of_text|>\n{% endif %}{% for m in messages %}<|start_of_role|>{{ m.role }}"
                "<|end_of_role|>{{ m.content }}<|end_of_text|>\n{% endfor %}{% if tools %}<|start_of_role|>system"
                "<|end_of_role|>Respond only with <|tool_call|> followed by a JSON list of tools used.<|end_of_text|>\n"
                "{% endif %}{% if add_generation_prompt %}<|start_of_role|>assistant<|end_of_role|>{% endif %}"),
    "lfm2": ("{% if tools %}<|im_start|>system\nList of tools: <|tool_list_start|>[{% for t in tools %}{{ t | tojson }}"
             "{% endfor %}]<|tool_list_end|><|im_end|>\n{% endif %}{% for m in messages %}<|im_start|>{{ m.role }}\n"
             "{{ m.content }}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"),
}


def use_tool_template(model, syntax):
    path = os.path.join(model, "tokenizer_config.json")
    with open(path) as f:
        config = json.load(f)
    config["chat_template"] = TOOL_TEMPLATES[syntax]
    with open(path, "w") as f:
        json.dump(config, f)


def check_tools(args, base):
    import jsonschema  # python3-jsonschema

    rng = random.Random(args.seed)
    gen = SchemaGen(rng)
    failures, lengths = [], []
    for i in range(args.schemas):
        gen.defs = {}
        schema = gen.obj(0)
        if gen.defs:
            schema["$defs"] = gen.defs
        tool = {"type": "function", "function": {"name": f"tool_{i}", "description": "random", "parameters": schema}}
        status, r = post(base, "/v1/chat/completions", {
            "messages": [{"role": "user", "content": f"Call the tool ({i})."}],
            "temperature": 1.0, "seed": args.seed * 1000 + i, "max_tokens": 2000,
            "tools": [tool], "tool_choice": "required",
        })
        why, text = None, None
        if status != 200:
            why = f"HTTP {status}: {r}"
        else:
            ch = r["choices"][0]
            lengths.append(r["usage"]["completion_tokens"])
            calls = ch["message"].get("tool_calls") or []
            text = ch["message"].get("content")
            if ch["finish_reason"] != "tool_calls" or len(calls) != 1:
                why = f"finish_reason {ch['finish_reason']}, {len(calls)} call(s) after {r['usage']['completion_tokens']} tokens"
            elif calls[0]["function"]["name"] != f"tool_{i}":
                why = f"called {calls[0]['function']['name']}"
            else:
                text = calls[0]["function"]["arguments"]
                try:
                    jsonschema.validate(json.loads(text), schema)
                except (ValueError, jsonschema.ValidationError) as e:
                    why = f"{type(e).__name__}: {str(e)[:300]}"
        if why:
            failures.append({"schema": schema, "why": why, "text": text})
    print(json.dumps({"syntax": args.tool_syntax, "schemas": args.schemas, "valid": args.schemas - len(failures),
                      "median_tokens": statistics.median(lengths) if lengths else 0}))
    for f in failures[:5]:
        print(json.dumps(f, ensure_ascii=False)[:1500], file=sys.stderr)
    return 0 if not failures else 1


def bench(args, base):
    schema = {"type": "object", "properties": {"text": {"type": "string", "maxLength": 100000}}, "required": ["text"]}
    body = {"messages": [{"role": "user", "content": "Write a long story."}], "temperature": 0, "max_tokens": args.tokens}
    free, constrained = [], []
    for _ in range(args.rounds):
        for kind in ("free", "constrained"):
            b = dict(body)
            if kind == "free":
                b["ignore_eos"] = True
            else:
                b["response_format"] = {"type": "json_schema", "json_schema": {"name": "t", "schema": schema}}
            t0 = time.perf_counter()
            status, r = post(base, "/v1/chat/completions", b)
            dt = time.perf_counter() - t0
            if status != 200:
                raise RuntimeError(f"HTTP {status}: {r}")
            n = r["usage"]["completion_tokens"]
            (free if kind == "free" else constrained).append(dt / max(n, 1))
    f, c = statistics.median(free), statistics.median(constrained)
    print(json.dumps({"model": args.model, "tokens": args.tokens, "rounds": args.rounds,
                      "free_s_per_token": f, "constrained_s_per_token": c, "ratio": c / f}))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zipmoe", required=True)
    ap.add_argument("--model")
    ap.add_argument("--schemas", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--tool-syntax", choices=sorted(TOOL_TEMPLATES), help="forced tool calls in this family's syntax")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if not args.bench:
        try:
            import jsonschema  # noqa: F401
        except ImportError:
            print("structured_outputs: python3-jsonschema is missing: run scripts/install_deps.sh", file=sys.stderr)
            return 1
    work = tempfile.mkdtemp(prefix="zipmoe-structured.")
    server = None
    try:
        model = args.model
        if model is None:
            model = os.path.join(work, "tiny-qwen2-moe")
            subprocess.run([args.zipmoe, "synth", "--arch", "qwen2_moe", "--preset", "tiny", "--seed", "7", "--out", model],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if args.tool_syntax:
            if args.model is not None:
                copy = os.path.join(work, "model")
                shutil.copytree(model, copy)
                model = copy
            use_tool_template(model, args.tool_syntax)
        server = Server(args.zipmoe, model, work)
        if args.bench:
            return bench(args, server.base)
        return check_tools(args, server.base) if args.tool_syntax else check(args, server.base)
    finally:
        if server:
            server.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
