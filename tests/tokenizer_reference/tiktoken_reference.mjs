// node tiktoken_reference.mjs PROMPTS_JSON DIR
//
// The reference side of `tests/tokenizer_reference/run.sh --tiktoken`: a model directory in the form that
// Moonlight-16B-A3B and Kimi-K2 ship (no tokenizer.json; tiktoken.model, a tokenization_*.py whose
// TikTokenTokenizer sets pat_str and num_reserved_special_tokens, tokenizer_config.json with auto_map and
// added_tokens_decoder), encoded by tiktoken itself: the npm package `tiktoken` is openai/tiktoken's Rust
// core (CoreBPE, fancy-regex) compiled to WebAssembly, the same code the checkpoints' Python tokenizer calls
// as tiktoken.Encoding(pat_str, mergeable_ranks, special_tokens).encode(text, allowed_special="all").
//
// Writes into DIR:
//  - tiktoken.model: the o200k_base ranks that ship in the package (200k tokens, every byte, CJK merges),
//    one "<base64 bytes> <rank>" per line;
//  - tokenization_moonshot.py: a stub that assigns the split pattern of Moonshot's tokenizers (Han runs apart
//    from other letters through the class intersection `&&`, case-split words with contractions, 1-3 digit
//    numbers, punctuation, whitespace) the way their file does, as `pat_str = "|".join([r"""...""", ...])`;
//  - tokenizer_config.json: auto_map naming that module, bos/eos, and added_tokens_decoder naming some of
//    the 256 special ids after the ranks (the rest are "<|reserved_token_<id>|>", as the Python file does);
//  - inputs.json: the ShareGPT prompts, then edge cases (scripts, case, contractions, digits, whitespace,
//    special-token text, long runs);
//  - reference.jsonl: per input {"ids", "decoded", "decoded_skip"} (tiktoken's decode as UTF-8 with U+FFFD
//    for invalid bytes; decoded_skip without the special ids).
// The pattern given to tiktoken here is the original one (Rust syntax, with `&&`); zipmoe reads it from the
// .py and rewrites the intersections for PCRE2, so that rewrite is what this compares.
import fs from 'node:fs';
import path from 'node:path';
import { Tiktoken } from 'tiktoken/lite';

const [promptsPath, outDir] = process.argv.slice(2);
if (!promptsPath || !outDir) {
  console.error('usage: node tiktoken_reference.mjs PROMPTS_JSON DIR');
  process.exit(2);
}
fs.mkdirSync(outDir, { recursive: true });
const here = path.dirname(new URL(import.meta.url).pathname);
const o200k = JSON.parse(fs.readFileSync(path.join(here, 'node_modules/tiktoken/encoders/o200k_base.json'), 'utf8'));

const patternParts = [
  String.raw`[\p{Han}]+`,
  String.raw`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
  String.raw`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
  String.raw`\p{N}{1,3}`,
  String.raw` ?[^\s\p{L}\p{N}]+[\r\n]*`,
  String.raw`\s*[\r\n]+`,
  String.raw`\s+(?!\S)`,
  String.raw`\s+`,
];
const patStr = patternParts.join('|');

// The ranks: the package's compact form is one line "<first token's text> <first rank> <base64 token>..." with
// consecutive ranks; tiktoken.model is the standard form, "<base64 token> <rank>" per line.
const fields = o200k.bpe_ranks.trim().split(' ');
const first = Number(fields[1]);
const lines = fields.slice(2).map((b64, k) => `${b64} ${first + k}`);
const nRanks = first + lines.length;
fs.writeFileSync(path.join(outDir, 'tiktoken.model'), lines.join('\n') + '\n');

const reserved = 256;
// encode()'s cuts before tiktoken (tokenization_kimi.py, as Llama 3's tokenizer.py): chunks of 400,000
// characters, then a cut wherever a run of whitespace or of non-whitespace grows past 25,000.
const maxEncodeChars = 400000;
const maxRunChars = 25000;
// Python's str.isspace (category Zs or bidirectional class WS / B / S).
const pyIsSpace = (cp) => (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp === 0x85 || cp === 0xa0 ||
  cp === 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp === 0x2028 || cp === 0x2029 || cp === 0x202f ||
  cp === 0x205f || cp === 0x3000;
// _split_whitespaces_or_nonwhitespaces over each 400,000-character chunk, by code points as Python indexes.
function cutPieces(text) {
  const cps = Array.from(text);
  const out = [];
  for (let c = 0; c < cps.length; c += maxEncodeChars) {
    const s = cps.slice(c, c + maxEncodeChars);
    let len = 0;
    let isSpace = s.length > 0 ? pyIsSpace(s[0].codePointAt(0)) : false;
    let start = 0;
    for (let i = 0; i < s.length; ++i) {
      const now = pyIsSpace(s[i].codePointAt(0));
      if (isSpace !== now) {
        len = 1;
        isSpace = now;
      } else if (++len > maxRunChars) {
        out.push(s.slice(start, i).join(''));
        start = i;
        len = 1;
      }
    }
    out.push(s.slice(start).join(''));
  }
  return out;
}
const named = ['[BOS]', '[EOS]', '<|im_end|>', '<|im_user|>', '<|im_assistant|>', '<|start_header_id|>',
  '<|end_header_id|>', '[EOT]', '<|im_system|>', '<|im_middle|>'];
const addedDecoder = {};
named.forEach((content, k) => { addedDecoder[String(nRanks + k)] = { content, special: true }; });
addedDecoder[String(nRanks + 100)] = { content: '<|media_start|>', special: true };
addedDecoder[String(nRanks + 255)] = { content: '[PAD]', special: true };
const specialTokens = {};
for (let id = nRanks; id < nRanks + reserved; ++id) {
  specialTokens[addedDecoder[String(id)]?.content ?? `<|reserved_token_${id}|>`] = id;
}

const py = [
  '# A stub in the form of a tiktoken-based tokenization_*.py: zipmoe reads pat_str,',
  '# num_reserved_special_tokens and the two cut lengths of encode() from it',
  '# (tests/tokenizer_reference/tiktoken_reference.mjs).',
  'class TikTokenTokenizer:',
  '    num_reserved_special_tokens = 256',
  '',
  '    pat_str = "|".join(',
  '        [',
  ...patternParts.map((p) => `            r"""${p}""",`),
  '        ]',
  '    )',
  '',
  '    def encode(self, text):',
  `        TIKTOKEN_MAX_ENCODE_CHARS = ${maxEncodeChars.toLocaleString('en-US').replace(/,/g, '_')}`,
  `        MAX_NO_WHITESPACES_CHARS = ${maxRunChars.toLocaleString('en-US').replace(/,/g, '_')}`,
  '',
];
fs.writeFileSync(path.join(outDir, 'tokenization_moonshot.py'), py.join('\n'));
fs.writeFileSync(path.join(outDir, 'tokenizer_config.json'), JSON.stringify({
  auto_map: { AutoTokenizer: ['tokenization_moonshot.TikTokenTokenizer', null] },
  bos_token: '[BOS]', eos_token: '[EOS]', pad_token: '[PAD]',
  added_tokens_decoder: addedDecoder,
  tokenizer_class: 'TikTokenTokenizer',
}, null, 2));

// ShareGPT records: the first turn's text of each.
const prompts = JSON.parse(fs.readFileSync(promptsPath, 'utf8')).map((r) => (typeof r === 'string' ? r : r.conversations[0].value));
const extras = [
  '', ' ', '\n', 'Hello World', "DON'T you SEE it's WORKING? They'll, we've, I'd, she's",
  '我们今天学习中文。机器学习和深度学习的区别是什么？', '日本語のテキストとカタカナ、ひらがな、漢字が混ざる。',
  '한국어 문장도 있습니다. 그리고 English 단어.', 'Ελληνικά ΚΕΦΑΛΑΙΑ και πεζά, Русский ТЕКСТ и текст',
  'mixed中文English混合text文字', 'CamelCaseWordsAndHTTPServer XMLHttpRequest iPhone McDonald',
  'numbers: 1 12 123 1234 12345 3.14159 1,000,000 ٣٤٥ ５６７', 'tabs\tand\t\tspaces   and\n\n\nnewlines \r\n end  ',
  'emoji 👋🏽 🇺🇸 👨‍👩‍👧 and symbols ∑∫√ ©®™ → ← ⇒', 'combining: e\u0301 n\u0303 a\u0308\u0304 Z\u0335\u0322',
  '<|im_user|>user<|im_middle|>Hi there<|im_end|><|im_assistant|>assistant<|im_middle|>',
  '[BOS]text[EOS] [EOT] [PAD]', `<|reserved_token_${nRanks + 50}|> and <|media_start|>`,
  '<|im_end', 'im_end|>', '=' .repeat(3000), 'a'.repeat(2000), ' '.repeat(500) + 'x', '中'.repeat(1000),
  '!!!???...,,,;;;:::---___+++***', 'https://example.com/path?query=1&b=2#frag', 'def f(x):\n    return x**2  # comment\n',
  // Script=Common punctuation that Script_Extensions counts as Han (\p{Han} is the Script in tiktoken).
  '文。\n次、テスト「かぎ」・中点ー。\r\n〜々〆',
  '\u00a0nbsp\u2003em\u3000ideographic space', 'ǅungla ǈubljana ǋovo', 'ﬁ ﬂ ﬀ ligatures', 'A\u0000B',
  // Past encode()'s cuts: runs longer than 25,000 characters, text longer than 400,000.
  'x'.repeat(30001), 'ab ' + 'q'.repeat(25000) + 'rs' + ' '.repeat(25002) + 'tail', '中'.repeat(26000) + '文',
  '\u001c'.repeat(25001) + 'y' + '\u2028'.repeat(3), ('👋'.repeat(13000) + ' ').repeat(2),
];
// ~420,000 characters of ShareGPT text: crosses the 400,000-character chunk boundary.
{
  let long = '';
  for (let k = 0; long.length < 420000; ++k) long += prompts[k % prompts.length] + '\n';
  extras.push(long);
}
const inputs = [...prompts, ...extras];
fs.writeFileSync(path.join(outDir, 'inputs.json'), JSON.stringify(inputs));

const enc = new Tiktoken(fs.readFileSync(path.join(outDir, 'tiktoken.model'), 'utf8'), specialTokens, patStr);
// The text split on special tokens first (HF's tokenize() splits on added tokens before calling the
// Python encode()), then each part cut as encode() does, then tiktoken.
const escape = (t) => t.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const specialRe = new RegExp(Object.keys(specialTokens).map(escape).join('|'), 'gu');
function encodeAsThePythonTokenizer(text) {
  const ids = [];
  let last = 0;
  const plainPart = (part) => { for (const piece of cutPieces(part)) ids.push(...enc.encode(piece, 'all')); };
  for (const m of text.matchAll(specialRe)) {
    plainPart(text.slice(last, m.index));
    ids.push(specialTokens[m[0]]);
    last = m.index + m[0].length;
  }
  plainPart(text.slice(last));
  return ids;
}
const utf8 = new TextDecoder('utf-8', { fatal: false });
const out = [];
for (const text of inputs) {
  const ids = encodeAsThePythonTokenizer(text);
  const decoded = utf8.decode(enc.decode(Uint32Array.from(ids)));
  const decodedSkip = utf8.decode(enc.decode(Uint32Array.from(ids.filter((id) => id < nRanks))));
  out.push(JSON.stringify({ ids, decoded, decoded_skip: decodedSkip }));
}
enc.free();
fs.writeFileSync(path.join(outDir, 'reference.jsonl'), out.join('\n') + '\n');
console.log(`tiktoken_reference: ${nRanks} ranks, ${inputs.length} inputs encoded by tiktoken (wasm) -> ${outDir}`);
