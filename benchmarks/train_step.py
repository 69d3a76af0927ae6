"""Training throughput of our Transformer against torch.nn.Transformer, measured in one run.

Both models get the same configuration, the same (shared, tied) embeddings, the same real
Multi30k batches, the same loss (label-smoothed cross-entropy) and the same Adam step; they
differ only in the encoder and decoder stacks. Steps alternate between the two models after a
warm-up, and the median over the repeats is reported. The last line prints the ratio
ours / nn.Transformer in target tokens per second.

    python benchmarks/train_step.py                      # paper's base config, CPU
    python benchmarks/train_step.py --config tiny --repeats 20
    python benchmarks/train_step.py --device cuda --amp  # bf16 autocast on a GPU
"""

import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer.data import load_multi30k
from transformer.embeddings import TransformerEmbedding
from transformer.masks import padding_mask
from transformer.model import Transformer, TransformerConfig
from transformer.tokenizer import BOS_ID, EOS_ID, PAD_ID, multi30k_tokenizer

CONFIGS = {  # name -> TransformerConfig overrides (vocab from the shared tokenizer)
    "base": {},  # the paper's base model: 6+6 layers, d_model 512, 8 heads, d_ff 2048
    "tiny": dict(d_model=128, n_heads=4, d_ff=512, n_layers=2),
}


class TorchReference(nn.Module):
    """The same embeddings and tied projection around torch.nn.Transformer's stacks."""

    def __init__(self, c: TransformerConfig):
        super().__init__()
        self.pad_id = c.pad_id
        self.embed = TransformerEmbedding(c.src_vocab_size, c.d_model, c.max_len, c.dropout)
        self.transformer = nn.Transformer(
            c.d_model,
            c.n_heads,
            c.n_layers,
            c.n_layers,
            c.d_ff,
            c.dropout,
            batch_first=True,
            norm_first=c.norm_first,
        )
        if not c.norm_first:  # nn.Transformer always adds final norms; the post-LN paper has none
            self.transformer.encoder.norm = nn.Identity()
            self.transformer.decoder.norm = nn.Identity()
        self.generator = nn.Linear(c.d_model, c.tgt_vocab_size, bias=False)
        self.generator.weight = self.embed.token.embedding.weight

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:  # -> (batch, T, vocab)
        src_pad, tgt_pad = ~padding_mask(src, self.pad_id), ~padding_mask(tgt_in, self.pad_id)
        causal = torch.ones(tgt_in.size(1), tgt_in.size(1), dtype=torch.bool, device=src.device)
        h = self.transformer(
            self.embed(src),
            self.embed(tgt_in),
            tgt_mask=causal.triu(1),
            tgt_is_causal=True,  # torch: True = may NOT attend
            src_key_padding_mask=src_pad,
            tgt_key_padding_mask=tgt_pad,
            memory_key_padding_mask=src_pad,
        )
        return self.generator(h)


def pad(seqs: list[Tensor]) -> Tensor:  # -> (batch, longest)
    return nn.utils.rnn.pad_sequence(seqs, batch_first=True, padding_value=PAD_ID)


def real_batches(n: int, token_budget: int, device: str) -> list[tuple[Tensor, Tensor, Tensor]]:
    """n padded (src, tgt_in, tgt_out) batches of similar-length Multi30k en-de train pairs."""
    tok = multi30k_tokenizer()
    pairs = load_multi30k("train", "en", "de")
    ids = sorted(
        zip(tok.encode([s for s, _ in pairs]), tok.encode([t for _, t in pairs]), strict=True),
        key=lambda p: (len(p[1]), len(p[0])),
    )
    batches = []
    for k in range(n):  # windows spread evenly over the length distribution
        start, group = (k + 1) * len(ids) // (n + 2), []
        while (len(group) + 1) * (max(len(ids[start][0]), len(ids[start][1])) + 1) <= token_budget:
            group.append(ids[start])
            start += 1
        src, tgt_in, tgt_out = (
            pad([torch.tensor(seq) for seq in column])
            for column in zip(*[(s, [BOS_ID, *t], [*t, EOS_ID]) for s, t in group], strict=True)
        )  # teacher forcing: the decoder reads BOS y_1 .. y_n and predicts y_1 .. y_n EOS
        batches.append((src.to(device), tgt_in.to(device), tgt_out.to(device)))
    return batches


def make_step(model: nn.Module, amp: bool, device: str):
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)

    def step(src: Tensor, tgt_in: Tensor, tgt_out: Tensor) -> None:
        with torch.autocast(device, dtype=torch.bfloat16, enabled=amp):
            logits = model(src, tgt_in)  # (batch, T, vocab)
            loss = F.cross_entropy(
                logits.flatten(0, 1).float(),
                tgt_out.flatten(),
                ignore_index=PAD_ID,
                label_smoothing=0.1,
            )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step


def timed(step, batches, device: str) -> float:
    """Seconds for one pass over the batches."""
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for batch in batches:
        step(*batch)
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", choices=sorted(CONFIGS), default="base")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--amp", action="store_true", help="bf16 autocast")
    parser.add_argument("--token-budget", type=int, default=2048, help="padded tokens per batch")
    parser.add_argument("--batches", type=int, default=3, help="distinct batches per repeat")
    parser.add_argument("--warmup", type=int, default=1, help="untimed passes per model")
    parser.add_argument("--repeats", type=int, default=5, help="timed passes per model")
    args = parser.parse_args()

    torch.manual_seed(0)
    tok = multi30k_tokenizer()
    config = TransformerConfig(
        tok.vocab_size, tok.vocab_size, pad_id=PAD_ID, **CONFIGS[args.config]
    )
    models = {"ours": Transformer(config), "nn.Transformer": TorchReference(config)}
    batches = real_batches(args.batches, args.token_budget, args.device)
    n_tokens = sum(int((tgt_out != PAD_ID).sum()) for _, _, tgt_out in batches)
    steps = {}
    for name, model in models.items():
        model.to(args.device).train()
        steps[name] = make_step(model, args.amp, args.device)
        n_params = sum(p.numel() for p in model.parameters())
        print(f"{name:>15}: {n_params / 1e6:.2f}M parameters")
    for _ in range(args.warmup):
        for step in steps.values():
            timed(step, batches, args.device)
    times = {name: [] for name in steps}
    for _ in range(args.repeats):  # alternate, so drifts in machine load hit both alike
        for name, step in steps.items():
            times[name].append(timed(step, batches, args.device))
    print(
        f"config {args.config}, device {args.device}, amp {args.amp}, "
        f"{len(batches)} batches, {n_tokens} target tokens per pass, {args.repeats} repeats"
    )
    rate = {}
    for name, ts in times.items():
        rate[name] = n_tokens / statistics.median(ts)
        print(
            f"{name:>15}: {rate[name]:>9.0f} target tokens/s "
            f"(median {statistics.median(ts):.3f} s, spread {min(ts):.3f}-{max(ts):.3f} s)"
        )
    print(f"ours / nn.Transformer: {rate['ours'] / rate['nn.Transformer']:.2f}x")


if __name__ == "__main__":
    main()
