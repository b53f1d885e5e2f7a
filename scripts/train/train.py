#!/usr/bin/python3
"""Trains the small Qwen2-MoE that ships in models/ (models/README.md is its model card).

Reproducible: fixed seed, deterministic data order, 2 CPU threads, Debian's python3-torch (1.13).
Pipeline: corpus.py (Debian man pages + ShareGPT prompts, ASCII) -> bpe.py (byte-level BPE,
tokenizer.json) -> this trainer -> an HF-layout directory (config.json, model.safetensors in BF16,
tokenizer.json, tokenizer_config.json, generation_config.json, training.json).

The model is Hugging Face's Qwen2MoeForCausalLM, written out in plain torch: RMSNorm, rotate-half RoPE,
q/k/v with bias, softmax router over all experts, top-k without renormalisation (norm_topk_prob false),
SiLU-gated experts, a shared expert scaled by sigmoid(shared_expert_gate), untied lm_head. Loss: next-token
cross entropy + router_aux_loss_coef x the Switch-Transformer load-balancing loss (N * sum f_e P_e).

Usage: train.py --corpus DIR --out DIR [--steps N] [--minutes M] [--seed S]
"""
import argparse
import json
import math
import os
import struct
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
                 "{{ '<|im_start|>system\\nYou are a helpful assistant<|im_end|>\\n' }}{% endif %}"
                 "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
                 "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def model_config(args, vocab):
    return {
        "architectures": ["Qwen2MoeForCausalLM"], "attention_dropout": 0.0,
        "bos_token_id": vocab - 3, "eos_token_id": vocab - 3, "decoder_sparse_step": 1, "hidden_act": "silu",
        "hidden_size": args.hidden, "initializer_range": 0.02, "intermediate_size": args.shared_inter,
        "max_position_embeddings": 4096, "max_window_layers": args.layers, "mlp_only_layers": [],
        "model_type": "qwen2_moe", "moe_intermediate_size": args.expert_inter, "norm_topk_prob": False,
        "num_attention_heads": args.heads, "num_experts": args.experts, "num_experts_per_tok": args.top_k,
        "num_hidden_layers": args.layers, "num_key_value_heads": args.heads, "output_router_logits": False,
        "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "router_aux_loss_coef": args.aux,
        "shared_expert_intermediate_size": args.shared_inter, "sliding_window": 4096,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16", "transformers_version": "4.40.0",
        "use_cache": True, "use_sliding_window": False, "vocab_size": vocab,
    }


class RMSNorm(torch.nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope(x, cos, sin):  # x [B, H, T, D]
    half = x.shape[-1] // 2
    rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rot * sin


_MASKS = {}


def causal_mask(t):
    """[t, t] additive mask: 0 on and below the diagonal, -inf above."""
    if t not in _MASKS:
        _MASKS[t] = torch.full((t, t), float("-inf")).triu(1)
    return _MASKS[t]


class Mlp(torch.nn.Module):
    def __init__(self, h, i):
        super().__init__()
        self.gate_proj = torch.nn.Linear(h, i, bias=False)
        self.up_proj = torch.nn.Linear(h, i, bias=False)
        self.down_proj = torch.nn.Linear(i, h, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Layer(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        h, nh = c["hidden_size"], c["num_attention_heads"]
        self.nh, self.hd = nh, h // nh
        self.input_layernorm = RMSNorm(h, c["rms_norm_eps"])
        self.post_attention_layernorm = RMSNorm(h, c["rms_norm_eps"])
        self.q_proj = torch.nn.Linear(h, h)
        self.k_proj = torch.nn.Linear(h, h)
        self.v_proj = torch.nn.Linear(h, h)
        self.o_proj = torch.nn.Linear(h, h, bias=False)
        self.gate = torch.nn.Linear(h, c["num_experts"], bias=False)
        self.experts = torch.nn.ModuleList(Mlp(h, c["moe_intermediate_size"]) for _ in range(c["num_experts"]))
        self.shared_expert = Mlp(h, c["shared_expert_intermediate_size"])
        self.shared_expert_gate = torch.nn.Linear(h, 1, bias=False)
        self.top_k = c["num_experts_per_tok"]

    def forward(self, x, cos, sin):
        b, t, h = x.shape
        y = self.input_layernorm(x)
        q = self.q_proj(y).view(b, t, self.nh, self.hd).transpose(1, 2)
        k = self.k_proj(y).view(b, t, self.nh, self.hd).transpose(1, 2)
        v = self.v_proj(y).view(b, t, self.nh, self.hd).transpose(1, 2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        att = torch.baddbmm(causal_mask(t).expand(b * self.nh, t, t), (q * (1.0 / math.sqrt(self.hd))).reshape(b * self.nh, t, self.hd),
                            k.reshape(b * self.nh, t, self.hd).transpose(1, 2)).softmax(-1).view(b, self.nh, t, t)
        x = x + self.o_proj((att @ v).transpose(1, 2).reshape(b, t, h))

        y = self.post_attention_layernorm(x).reshape(b * t, h)
        probs = self.gate(y).softmax(-1)  # [N, E]
        w, ids = probs.topk(self.top_k, dim=-1)
        out = torch.zeros_like(y)
        flat_ids = ids.reshape(-1)
        token_of = torch.arange(b * t).repeat_interleave(self.top_k)
        order = flat_ids.argsort()
        counts = torch.bincount(flat_ids, minlength=len(self.experts)).tolist()
        start = 0
        for e, n in enumerate(counts):
            if n == 0:
                continue
            sel = order[start:start + n]
            start += n
            tok = token_of[sel]
            out.index_add_(0, tok, self.experts[e](y[tok]) * w.reshape(-1)[sel].unsqueeze(1))
        out = out + torch.sigmoid(self.shared_expert_gate(y)) * self.shared_expert(y)
        frac = torch.tensor(counts, dtype=torch.float32) / flat_ids.numel()
        aux = len(self.experts) * (frac * probs.mean(0)).sum()
        return x + out.view(b, t, h), aux, torch.tensor(counts)


class Model(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed_tokens = torch.nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = torch.nn.ModuleList(Layer(c) for _ in range(c["num_hidden_layers"]))
        self.norm = RMSNorm(c["hidden_size"], c["rms_norm_eps"])
        self.lm_head = torch.nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                torch.nn.init.normal_(p, std=c["initializer_range"])
                if name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
                    p.data /= math.sqrt(2 * c["num_hidden_layers"])
            elif name.endswith("bias"):
                torch.nn.init.zeros_(p)

    def forward(self, ids):
        t = ids.shape[1]
        hd = self.c["hidden_size"] // self.c["num_attention_heads"]
        inv = 1.0 / (self.c["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        ang = torch.arange(t, dtype=torch.float32)[:, None] * inv[None]
        ang = torch.cat([ang, ang], dim=-1)
        cos, sin = ang.cos(), ang.sin()
        x = self.embed_tokens(ids)
        aux, loads = 0.0, []
        for layer in self.layers:
            x, a, n = layer(x, cos, sin)
            aux = aux + a
            loads.append(n)
        return self.lm_head(self.norm(x)), aux / len(self.layers), torch.stack(loads)


def hf_name(local):
    """The Hugging Face checkpoint name of a parameter of Model (Qwen2MoeForCausalLM's naming)."""
    if local.startswith("lm_head"):
        return local
    n = "model." + local
    for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
        n = n.replace(f".{proj}.", f".self_attn.{proj}.")
    for part in (".gate.", ".experts.", ".shared_expert.", ".shared_expert_gate."):
        n = n.replace(part, ".mlp" + part)
    return n


def hf_state(model):
    """{HF name: tensor} of the model's parameters."""
    return {hf_name(k): v for k, v in model.state_dict().items()}


def write_safetensors(path, tensors):
    """BF16 safetensors (round-to-nearest-even from fp32, as torch's .to(bfloat16))."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().to(torch.bfloat16).contiguous()
        data = t.view(torch.int16).numpy().tobytes()
        header[name] = {"dtype": "BF16", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def evaluate(model, val, seq, batches=16):
    model.eval()
    losses = []
    with torch.no_grad():
        n = (len(val) - 1) // seq
        for i in range(0, min(n, batches * 8), 8):
            ids = torch.stack([val[(i + j) * seq:(i + j) * seq + seq + 1] for j in range(min(8, n - i))]).long()
            logits, _, _ = model(ids[:, :-1])
            losses.append(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1)).item())
    model.train()
    return sum(losses) / len(losses)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=100000)
    ap.add_argument("--minutes", type=float, default=70, help="wall-time length of the cosine schedule (0 = by --steps)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--bpe-bytes", type=int, default=8_000_000)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--experts", type=int, default=32)
    ap.add_argument("--top-k", type=int, default=4)
    ap.add_argument("--expert-inter", type=int, default=64)
    ap.add_argument("--shared-inter", type=int, default=256)
    ap.add_argument("--aux", type=float, default=0.01)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=24)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=150)
    ap.add_argument("--eval-every", type=int, default=250)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    log = lambda s: print(f"[{time.strftime('%H:%M:%S')}] {s}", flush=True)  # noqa: E731

    train_text = open(os.path.join(args.corpus, "train.txt")).read()
    val_text = open(os.path.join(args.corpus, "val.txt")).read()
    n_bpe = args.vocab - len(SPECIALS)
    tokens, merges = bpe.learn(train_text[:args.bpe_bytes], n_bpe)
    if len(tokens) < n_bpe:  # only if the text runs out of pairs: never for the shipped corpus
        raise SystemExit(f"BPE learned {len(tokens)} tokens, fewer than {n_bpe}")
    specials = [(n_bpe + i, s) for i, s in enumerate(SPECIALS)]
    with open(os.path.join(args.out, "tokenizer.json"), "w") as f:
        json.dump(bpe.tokenizer_json(tokens, merges, specials), f, ensure_ascii=False, indent=2)
    enc = bpe.Encoder(tokens, merges)
    eot = n_bpe

    def encode(text):
        ids = []
        for i, doc in enumerate(text.split("\n<|endoftext|>\n")):
            if i:
                ids.append(eot)
            ids.extend(enc.encode(doc))
        return torch.tensor(ids, dtype=torch.int32)

    train, val = encode(train_text), encode(val_text)
    log(f"tokens: train {len(train)}, val {len(val)} ({len(val_text) / len(val):.2f} bytes/token)")

    c = model_config(args, args.vocab)
    model = Model(c)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: {n_params / 1e6:.1f} M parameters")
    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    g = torch.Generator().manual_seed(args.seed)
    span = args.seq + 1
    history, t0, step = [], time.time(), 0
    for step in range(1, args.steps + 1):
        # Cosine decay over the run: its progress is the larger of steps done and wall time used.
        progress = step / args.steps
        if args.minutes:
            progress = max(progress, (time.time() - t0) / (args.minutes * 60))
        progress = min(progress, 1.0)
        lr = args.lr * min(1.0, step / args.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))
        for group in opt.param_groups:
            group["lr"] = lr
        starts = torch.randint(0, len(train) - span, (args.batch,), generator=g)
        ids = torch.stack([train[s:s + span] for s in starts.tolist()]).long()
        logits, aux, loads = model(ids[:, :-1])
        ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1))
        loss = ce + args.aux * aux
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 25 == 0:
            el = time.time() - t0
            log(f"step {step} loss {ce.item():.3f} aux {aux.item():.3f} lr {lr:.2e} "
                f"{step * args.batch * args.seq / el:.0f} tok/s")
        if step % args.eval_every == 0 or step == args.steps:
            vl = evaluate(model, val, args.seq)
            history.append({"step": step, "train_loss": ce.item(), "val_loss": vl, "seconds": time.time() - t0})
            log(f"eval step {step}: val loss {vl:.3f} nats/token = {vl / math.log(2) * len(val) / len(val_text):.3f} bits/byte")
            save(model, c, args, history, train, val, val_text, len(train_text), tokens, merges, specials)
        if progress >= 1.0:
            log(f"stopping at step {step} (progress 1.0)")
            break
    # The shipped weights are BF16: evaluate exactly those.
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).to(torch.float32))
    vl = evaluate(model, val, args.seq, batches=64)
    history.append({"step": step, "val_loss_final": vl, "seconds": time.time() - t0, "weights": "bf16"})
    save(model, c, args, history, train, val, val_text, len(train_text), tokens, merges, specials)
    log(f"final val loss {vl:.3f} nats/token, perplexity {math.exp(vl):.1f}")


def save(model, c, args, history, train, val, val_text, train_bytes, tokens, merges, specials):
    out = args.out
    write_safetensors(os.path.join(out, "model.safetensors"), hf_state(model))
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(c, f, indent=2)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": c["bos_token_id"], "eos_token_id": c["eos_token_id"], "do_sample": False,
                   "transformers_version": c["transformers_version"]}, f, indent=2)
    added = {str(i): {"content": s, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                      "special": True} for i, s in specials}
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"add_prefix_space": False, "added_tokens_decoder": added,
                   "additional_special_tokens": ["<|im_start|>", "<|im_end|>"], "bos_token": None,
                   "chat_template": CHAT_TEMPLATE, "clean_up_tokenization_spaces": False,
                   "eos_token": "<|endoftext|>", "errors": "replace", "model_max_length": 4096,
                   "pad_token": "<|endoftext|>", "split_special_tokens": False,
                   "tokenizer_class": "Qwen2Tokenizer", "unk_token": None}, f, indent=2)
    bytes_per_token = len(val_text) / len(val)
    last = [h for h in history if "val_loss" in h or "val_loss_final" in h][-1]
    vl = last.get("val_loss_final", last.get("val_loss"))
    with open(os.path.join(out, "training.json"), "w") as f:
        json.dump({"command": " ".join(["scripts/train/train.py"] + sys.argv[1:]), "args": vars(args),
                   "torch": torch.__version__, "train_tokens": len(train), "val_tokens": len(val),
                   "train_bytes": train_bytes, "tokens_seen": history[-1]["step"] * args.batch * args.seq,
                   "val_bytes_per_token": bytes_per_token, "val_loss_nats_per_token": vl,
                   "val_perplexity": math.exp(vl), "val_bits_per_byte": vl / math.log(2) / bytes_per_token,
                   "history": history}, f, indent=2)


if __name__ == "__main__":
    main()
