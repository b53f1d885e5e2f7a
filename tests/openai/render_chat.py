#!/usr/bin/python3
"""Renders a chat template with jinja2 in transformers' environment (issue 41).

Usage: render_chat.py TEMPLATE < CONTEXT_JSON

CONTEXT_JSON is the template's context (`messages`, `tools`, `add_generation_prompt`, and any other
variable such as `reasoning_effort`); the rendering goes to stdout without a trailing newline. The
environment is tests/chat_template_reference/render_jinja2.py's (transformers' `apply_chat_template`:
sandboxed, trim_blocks, lstrip_blocks, loopcontrols, `tojson`, `raise_exception`, `strftime_now`).
tests/openai/scripted_harmony.mjs compares what the server renders with this.
"""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "chat_template_reference"))
from render_jinja2 import make_environment  # noqa: E402


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: render_chat.py TEMPLATE < CONTEXT_JSON")
    with open(sys.argv[1], encoding="utf-8") as f:
        template = make_environment().from_string(f.read())
    sys.stdout.write(template.render(**json.load(sys.stdin)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
