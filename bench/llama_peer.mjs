#!/usr/bin/env node
// llama.cpp as a benchmark peer: loads a GGUF (bench/gguf_writer.py) with node-llama-cpp's prebuilt CPU
// binaries and times it on the CPU. Install first: bench/install_peer.sh (the locked versions into bench/node_modules).
//
//   node bench/llama_peer.mjs --model FILE.gguf [--prompt-ids 1,2,3 | --prompt TEXT] [--threads 2]
//        [--decode-tokens 16] [--warmup-tokens 2] [--prefill-reps 3] [--dump FILE.json [--dump-steps 4]] [--progress]
//        [--no-mmap] [--f32-kv]
//
// Measures, after loading:
//   prefill  the prompt evaluated on an empty sequence, logits of its last position computed; one
//            warm-up run, then --prefill-reps timed runs: prefill_s is their median and
//            prefill_tokens_per_s = prompt tokens / prefill_s.
//   decode   greedy decoding after the last prefill: --warmup-tokens steps untimed, then --decode-tokens
//            timed steps of one token each (EOS does not stop it): tpot_s = their mean wall time
//            (decode_step_s lists them).
//   dump     (with --dump) the prompt on an empty sequence, then --dump-steps greedy steps, writing
//            {prompt_ids, greedy_ids, logits} to FILE.json: logits[i] is the raw float32 row (all of the
//            vocabulary) from which greedy_ids[i] was taken as the argmax, so logits[0] is the prompt's
//            last position (bench/peer_check.py compares it with zipmoe's --logits-out rows).
// A text --prompt is tokenized by the GGUF's tokenizer (with BOS where the model adds one); the default
// prompt is the 16 ids 1..16. Prints one JSON object on stdout; llama.cpp's warnings go to stderr.
// --progress also writes one JSON line per phase to stderr as it ends ({"progress": "load" | "prefill" |
// "decode", "s": seconds, "step": i for decode}), so a run stopped by a time limit still shows how far it
// got and how long each finished step took (bench/suite.py's cold runs under a memory cap).
// --threads sets llama.cpp's thread count for prefill and decode alike (default 2). llama.cpp maps the GGUF
// (mmap), so the weights come from the page cache: for warm figures have the file cached (e.g. read it once)
// and enough free memory to keep it there; a decode step that meets an expert only on disk includes its read.
// --no-mmap loads the weights into llama.cpp's own buffers instead (its --no-mmap; zipmoe's is
// `--no-mmap` too): the comparison for zipmoe run with anonymous weights.
// --f32-kv keeps the KV cache in F32 (llama.cpp's default is F16) and turns flash attention off (its CPU kernel
// rounds to F16): with an F32 GGUF (bench/gguf_writer.py --dtype f32) llama.cpp's logits then follow the model to
// ~1e-6 (bench/peer_check.py --f32). A precision check, not a benchmark setting.
import { parseArgs } from "node:util";
import { existsSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { performance } from "node:perf_hooks";

const USAGE = "usage: node bench/llama_peer.mjs --model FILE.gguf [--prompt-ids 1,2,3 | --prompt TEXT] [--threads N]\n" +
  "       [--decode-tokens N] [--warmup-tokens N] [--prefill-reps N] [--dump FILE.json [--dump-steps N]] [--progress]\n" +
  "       [--no-mmap] [--f32-kv]";

function fail(message) {
  process.stderr.write(`error: ${message}\n${USAGE}\n`);
  process.exit(2);
}

function positiveInt(name, text, min = 1) {
  const v = Number(text);
  if (!Number.isInteger(v) || v < min) fail(`--${name} must be an integer >= ${min}, got '${text}'`);
  return v;
}

function parseOptions() {
  let values;
  try {
    ({ values } = parseArgs({
      options: {
        model: { type: "string" },
        "prompt-ids": { type: "string" },
        prompt: { type: "string" },
        threads: { type: "string", default: "2" },
        "decode-tokens": { type: "string", default: "16" },
        "warmup-tokens": { type: "string", default: "2" },
        "prefill-reps": { type: "string", default: "3" },
        dump: { type: "string" },
        "dump-steps": { type: "string", default: "4" },
        progress: { type: "boolean", default: false },
        "no-mmap": { type: "boolean", default: false },
        "f32-kv": { type: "boolean", default: false },
        help: { type: "boolean", short: "h" },
      },
    }));
  } catch (e) {
    fail(e.message);
  }
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    process.exit(0);
  }
  if (!values.model) fail("--model is required");
  if (!existsSync(values.model)) fail(`--model ${values.model}: no such file`);
  if (values.prompt !== undefined && values["prompt-ids"] !== undefined) fail("give --prompt or --prompt-ids, not both");
  let promptIds = null;
  if (values["prompt-ids"] !== undefined) {
    promptIds = values["prompt-ids"].split(",").map((s) => positiveInt("prompt-ids", s.trim(), 0));
    if (promptIds.length === 0) fail("--prompt-ids is empty");
  } else if (values.prompt === undefined) {
    promptIds = Array.from({ length: 16 }, (_, i) => i + 1);
  }
  return {
    model: values.model,
    promptIds,
    promptText: values.prompt,
    threads: positiveInt("threads", values.threads),
    decodeTokens: positiveInt("decode-tokens", values["decode-tokens"]),
    warmupTokens: positiveInt("warmup-tokens", values["warmup-tokens"], 0),
    prefillReps: positiveInt("prefill-reps", values["prefill-reps"]),
    dump: values.dump,
    dumpSteps: positiveInt("dump-steps", values["dump-steps"]),
    progress: values.progress,
    noMmap: values["no-mmap"],
    f32Kv: values["f32-kv"],
  };
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

// The raw logits Map of node-llama-cpp as a dense row indexed by token id.
function denseRow(logits) {
  const row = new Float64Array(logits.size).fill(NaN);
  for (const [token, value] of logits) {
    if (token >= row.length) throw new Error(`logits for token ${token} outside the vocabulary of ${row.length}`);
    row[token] = value;
  }
  return row;
}

function argmax(row) {
  let best = 0;
  for (let i = 1; i < row.length; i++) if (row[i] > row[best]) best = i;
  return best;
}

// Feeds tokens to the sequence; returns what the last one asks for (`next`: token and/or logits).
async function feed(sequence, tokens, next) {
  const input = tokens.map((t, i) => (i === tokens.length - 1 ? [t, { generateNext: next }] : t));
  const out = await sequence.controlledEvaluate(input);
  return out[tokens.length - 1].next;
}

const GREEDY = { token: true, options: { temperature: 0 } };

// Which of ggml's CPU backends (libggml-cpu-<variant>.so: haswell, zen4, sapphirerapids, ...) this
// process loaded, read from its memory map; null when none is mapped (a build without variants).
function cpuVariant() {
  try {
    const maps = readFileSync("/proc/self/maps", "utf8");
    const m = maps.match(/libggml-cpu-([A-Za-z0-9_]+)\.so/);
    return m ? m[1] : null;
  } catch {
    return null;
  }
}

async function main() {
  const opt = parseOptions();
  const { getLlama, LlamaLogLevel } = await import("node-llama-cpp").catch(() =>
    fail("node-llama-cpp is not installed: run bench/install_peer.sh"));
  const t0 = performance.now();
  const llama = await getLlama({
    gpu: false,
    build: "never",
    maxThreads: opt.threads,
    logLevel: LlamaLogLevel.warn,
    logger: (level, message) => process.stderr.write(`llama.cpp ${level}: ${message.trimEnd()}\n`),
  });
  const model = await llama.loadModel({ modelPath: opt.model, gpuLayers: 0, useMmap: !opt.noMmap });
  let prompt = opt.promptIds;
  if (prompt === null) {
    prompt = model.tokenize(opt.promptText);
    if (model.tokens.shouldPrependBosToken && model.tokens.bos !== null) prompt = [model.tokens.bos, ...prompt];
    if (prompt.length === 0) fail("--prompt tokenizes to no tokens");
  }
  const needed = prompt.length + Math.max(opt.warmupTokens + opt.decodeTokens, opt.dump ? opt.dumpSteps : 0) + 1;
  const context = await model.createContext({
    contextSize: Math.ceil(needed / 256) * 256,
    batchSize: Math.max(512, prompt.length),
    sequences: 1,
    threads: { ideal: opt.threads, min: opt.threads },
    ...(opt.f32Kv
      ? { experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32", flashAttention: false }
      : {}),
  });
  const sequence = context.getSequence();
  const loadS = (performance.now() - t0) / 1000;
  const progress = (phase, seconds, extra = {}) => {
    if (opt.progress) process.stderr.write(`${JSON.stringify({ progress: phase, s: seconds, ...extra })}\n`);
  };
  progress("load", loadS);

  // Prefill: one warm-up, then the timed runs; decoding continues from the last one.
  const prefillRuns = [];
  let next = null;
  for (let rep = 0; rep <= opt.prefillReps; rep++) {
    await sequence.clearHistory();
    const start = performance.now();
    next = await feed(sequence, prompt, GREEDY);
    const seconds = (performance.now() - start) / 1000;
    if (rep > 0) prefillRuns.push(seconds);
    progress("prefill", seconds, { timed: rep > 0 });
  }
  const prefillS = median(prefillRuns);

  const generated = [];
  const stepS = [];
  let token = next.token;
  for (let step = 0; step < opt.warmupTokens + opt.decodeTokens; step++) {
    generated.push(token);
    const start = performance.now();
    token = (await feed(sequence, [token], GREEDY)).token;
    const seconds = (performance.now() - start) / 1000;
    if (step >= opt.warmupTokens) stepS.push(seconds);
    progress("decode", seconds, { step, timed: step >= opt.warmupTokens });
  }
  const tpotS = stepS.reduce((a, b) => a + b, 0) / stepS.length;

  const result = {
    system: "llama.cpp",
    llama_cpp_release: llama.llamaCppRelease?.release ?? null,
    cpu_variant: cpuVariant(),
    system_info: llama.systemInfo ?? null,
    model: opt.model,
    threads: opt.threads,
    mmap: !opt.noMmap,
    kv_cache: opt.f32Kv ? "f32 (flash attention off)" : "default",
    load_s: loadS,
    prompt_ids: prompt,
    prompt_tokens: prompt.length,
    prefill_reps: opt.prefillReps,
    prefill_s: prefillS,
    prefill_s_runs: prefillRuns,
    prefill_tokens_per_s: prompt.length / prefillS,
    warmup_tokens: opt.warmupTokens,
    decode_tokens: opt.decodeTokens,
    tpot_s: tpotS,
    decode_step_s: stepS,
    decode_tokens_per_s: 1 / tpotS,
    generated_ids: generated,
  };

  if (opt.dump) {
    await sequence.clearHistory();
    const greedy = [];
    const rows = [];
    let tokens = prompt;
    for (let step = 0; step < opt.dumpSteps; step++) {
      const row = denseRow((await feed(sequence, tokens, { logits: true })).logits);
      rows.push(Array.from(row));
      greedy.push(argmax(row));
      tokens = [greedy[greedy.length - 1]];
    }
    const tmp = `${opt.dump}.tmp.${process.pid}`;
    writeFileSync(tmp, JSON.stringify({ prompt_ids: prompt, greedy_ids: greedy, logits: rows }));
    renameSync(tmp, opt.dump);
    result.dump = opt.dump;
    result.dump_greedy_ids = greedy;
  }

  await context.dispose();
  await model.dispose();
  await llama.dispose();
  process.stdout.write(`${JSON.stringify(result)}\n`);
}

main().catch((e) => {
  process.stderr.write(`error: ${e?.stack ?? e}\n`);
  process.exit(1);
});
