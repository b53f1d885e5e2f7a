// node reference_encode.mjs DIR
//
// The reference side of tests/tokenizer_reference/run.sh: loads DIR/tokenizer.json (+ its
// tokenizer_config.json) with transformers.js's AutoTokenizer (@huggingface/transformers, from this
// folder's node_modules; local files only, no network) and writes DIR/reference.jsonl, one line per
// string of DIR/inputs.json: {"ids": encode(text) with the post-processor's </s>, "decoded":
// decode(ids), "decoded_skip": decode(ids, skip_special_tokens)}.
//
// transformers.js departs from HF tokenizers (the Rust library that writes these files, and what
// transformers' T5TokenizerFast runs) in three places that a T5-style file reaches, so this script
// puts the Rust behaviour in, and only there:
//  - its Viterbi (TokenLattice.viterbi) picks the best predecessor of each node by comparing
//    `predecessor score + this node's score`, Rust's encode_optimized (and SentencePiece's
//    EncodeOptimized) by comparing the predecessor scores alone. Both are the same maximum, except
//    where two paths tie mathematically, e.g. the pieces ~9 ~9 ~8 and ~8 ~9 ~9 of a run of 26 "~":
//    float rounding then decides, and differently. The patched viterbi below differs from
//    transformers.js's in that comparison only (unpatched, 1 of the 500 prompts differs, on such a run);
//    ZIPMOE_REFERENCE_UNPATCHED_VITERBI=1 turns the patch off;
//  - its Unigram model ignores "byte_fallback" (an unknown run always becomes unk_id): with
//    byte_fallback true, a token string that is not in the vocabulary becomes the "<0xXX>" pieces of
//    its UTF-8 bytes when every one exists (tokenizers/src/models/unigram/model.rs, Unigram::tokenize);
//  - its Metaspace pre-tokenizer ignores "split" (never splits): with split true (the default), each
//    piece is split before every "▁" (tokenizers/src/pre_tokenizers/metaspace.rs,
//    SplitDelimiterBehavior::MergedWithNext). For a vocabulary without "▁" inside pieces this changes
//    the segmentation only where two paths tie mathematically but their float sums round apart: the
//    Viterbi sums then start from 0 at each word, as in Rust, not from the sentence's running score.
// Everything else (normalizer, added-token split, prepend scheme, Viterbi, unknown fusion,
// post-processor, decoder) is transformers.js's own code.
import fs from 'node:fs';
import path from 'node:path';
import { AutoTokenizer, env } from '@huggingface/transformers';

const dir = path.resolve(process.argv[2] ?? '');
if (!process.argv[2] || !fs.existsSync(path.join(dir, 'tokenizer.json'))) {
  console.error('usage: node reference_encode.mjs DIR  (DIR holds tokenizer.json and inputs.json)');
  process.exit(2);
}
env.allowRemoteModels = false;
env.allowLocalModels = true;
env.useBrowserCache = false;
env.useFSCache = false;
env.localModelPath = path.dirname(dir) + path.sep;

const tokenizer = await AutoTokenizer.from_pretrained(path.basename(dir), { local_files_only: true });
const inner = tokenizer._tokenizer;
const modelJson = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8')).model;
if (modelJson.type !== 'Unigram') throw new Error(`expected a Unigram model, found ${modelJson.type}`);

const preJson = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8')).pre_tokenizer;
if (preJson?.type === 'Metaspace' && preJson.split !== false) {
  const pre = inner.pre_tokenizer;
  const preTokenize = pre.pre_tokenize_text.bind(pre);
  const replacement = preJson.replacement ?? '\u2581';
  pre.pre_tokenize_text = (text, options) =>
    preTokenize(text, options).flatMap((s) => s.split(replacement).flatMap((part, i) => (i === 0 ? part : replacement + part) || []));
}

if (process.env.ZIPMOE_REFERENCE_UNPATCHED_VITERBI !== '1') {
  const model = inner.model;
  const populate = model.populate_nodes.bind(model);
  model.populate_nodes = (lattice) => {
    const proto = Object.getPrototypeOf(lattice);
    if (!proto.zipmoePatched) {
      proto.zipmoePatched = true;
      proto.viterbi = function viterbi() {
        // transformers.js's TokenLattice.viterbi with Rust's comparison: the best left node is the
        // first one with the highest backtrace_score; the right node's score is added afterwards.
        for (let pos = 0; pos <= this.len; ++pos) {
          if (this.begin_nodes[pos].length === 0) return [];
          let best = null;
          for (const lnode of this.end_nodes[pos]) {
            if (best === null || lnode.backtrace_score > best.backtrace_score) best = lnode;
          }
          if (best === null) return [];
          for (const rnode of this.begin_nodes[pos]) {
            rnode.prev = best.clone();
            rnode.backtrace_score = best.backtrace_score + rnode.score;
          }
        }
        const results = [];
        const prev = this.begin_nodes[this.len][0].prev;
        if (prev === null) return [];
        let node = prev.clone();
        while (node.prev !== null) {
          results.push(node.clone());
          node = node.prev.clone();
        }
        return results.reverse();
      };
    }
    return populate(lattice);
  };
}

if (modelJson.byte_fallback) {
  const model = inner.model;
  const byteToken = (b) => `<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`;
  // encode() gives the Viterbi strings per piece; fuse_unk then runs in _call over the whole list,
  // so byte fallback must come after fusion: wrap _call.
  const call = model._call.bind(model);
  model._call = (tokens) => call(tokens).flatMap((t) => {
    if (model.tokens_to_ids.has(t)) return [t];
    const bytes = [...Buffer.from(t, 'utf8')].map(byteToken);
    return bytes.every((b) => model.tokens_to_ids.has(b)) ? bytes : [t];
  });
}

const inputs = JSON.parse(fs.readFileSync(path.join(dir, 'inputs.json'), 'utf8'));
const lines = [];
for (const text of inputs) {
  const ids = tokenizer.encode(text);  // add_special_tokens: true (TemplateProcessing's </s>)
  const decoded = ids.length ? tokenizer.decode(ids, { skip_special_tokens: false }) : '';
  const decodedSkip = ids.length ? tokenizer.decode(ids, { skip_special_tokens: true }) : '';
  lines.push(JSON.stringify({ ids, decoded, decoded_skip: decodedSkip }));
}
fs.writeFileSync(path.join(dir, 'reference.jsonl'), lines.join('\n') + '\n');
console.log(`reference_encode: ${inputs.length} inputs encoded by transformers.js -> ${path.join(dir, 'reference.jsonl')}`);
