#!/usr/bin/python3
"""Adds Python jinja2's rendering to every line of a reference JSONL (render_reference.mjs's output).

Usage: render_jinja2.py IN_JSONL OUT_JSONL

jinja2 is the engine transformers' `apply_chat_template` renders chat templates with, so where
@huggingface/jinja and jinja2 disagree (a filter the JavaScript port lacks, a string method it
implements differently), jinja2's output is the one a model was trained on. The environment is the
one transformers builds (transformers/utils/chat_template_utils.py, `_compile_jinja_template`):
an ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the loopcontrols extension and a
`{% generation %}` block tag (which only marks assistant text and renders its body), `tojson` as
json.dumps with ensure_ascii False (indent, separators and sort_keys passed through),
`raise_exception(message)` raising a TemplateError and `strftime_now(format)`.

Each output line is the input line plus `jinja2_ok` and `jinja2_output` or `jinja2_error`. A template
jinja2 cannot compile (e.g. a filter it does not have) gives `jinja2_ok: false` on every line of that
template, as transformers would refuse it.
"""
import json
import sys
from datetime import datetime

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment


class GenerationBlock(jinja2.ext.Extension):
    """`{% generation %} ... {% endgeneration %}`: renders the body (transformers uses the block to
    mark assistant tokens for training masks; rendering is unchanged by it)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body, lineno=lineno)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(fmt):
    return datetime.now().strftime(fmt)


def make_environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationBlock, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main(argv):
    if len(argv) != 3:
        print("usage: render_jinja2.py IN_JSONL OUT_JSONL", file=sys.stderr)
        return 2
    env = make_environment()
    compiled = {}  # template name -> Template, or the compile error's text
    out_lines = []
    with open(argv[1], encoding="utf-8") as f:
        for raw in f:
            if not raw.strip():
                continue
            line = json.loads(raw)
            name = line["template"]
            if name not in compiled:
                try:
                    compiled[name] = env.from_string(line["source"])
                except jinja2.exceptions.TemplateError as e:
                    compiled[name] = "compile: %s: %s" % (type(e).__name__, e)
            template = compiled[name]
            if isinstance(template, str):
                line["jinja2_ok"] = False
                line["jinja2_error"] = template
            else:
                try:
                    line["jinja2_output"] = template.render(**line["context"])
                    line["jinja2_ok"] = True
                except Exception as e:  # a template's raise_exception, a type error, ...: the template refused
                    line["jinja2_ok"] = False
                    line["jinja2_error"] = "%s: %s" % (type(e).__name__, e)
            out_lines.append(json.dumps(line, ensure_ascii=False))
    with open(argv[2], "w", encoding="utf-8") as f:
        f.write("\n".join(out_lines) + "\n")
    print("render_jinja2: %d renders written to %s (jinja2 %s)" % (len(out_lines), argv[2], jinja2.__version__),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
