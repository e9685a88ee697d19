"""Deterministic generators of realistic dumps for benchmarks (no network, no files needed)."""

from __future__ import annotations

import random
from datetime import date, timedelta

# Technical terms (many of them tag-rule keywords) are about one word in twelve,
# as in real abstracts: the seeds average 3-4 rule tags per entry.
TERMS = (
    "sparse attention kernel GPU LLM serving cache scheduling compiler FPGA spiking neural network "
    "accelerator quantization mixture experts routing parallelism distributed training inference "
    "secure coherence simulation reinforcement learning agent verification hardware"
).split()
FILLER = (
    "we the a of and to in for with on this that by is are our from as which results show method "
    "approach problem system design performance evaluation propose present existing novel improves "
    "across while reduces achieves compared baseline workloads study analysis framework data models "
    "model time cost large scale efficient memory bandwidth latency throughput energy pipeline cluster "
    "benchmark practical significant overhead enables provides demonstrates evaluate implement"
).split()
WORDS = FILLER * 3 + TERMS
TAGS = ["GPU", "LLM", "AI", "MoE", "FPGA", "SNN", "Compilers", "Security", "Serving", "RL"]


def _sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n)).capitalize() + "."


def dump_text(n_entries: int, *, seed: int, start: int = 0, repos_every: int = 10) -> str:
    """A dump of *n_entries* distinct entries (numbered from *start*), about 700 bytes each."""
    rng = random.Random(seed)
    blocks = ["Filtered by: " + " × ".join(rng.sample(TAGS, 3)) + " × Clear all"]
    day = date(2026, 6, 14)
    for i in range(start, start + n_entries):
        published = (day - timedelta(days=i % 30)).isoformat()
        summary = " ".join(_sentence(rng, rng.randint(12, 25)) for _ in range(4))
        if repos_every and i % repos_every == 0:
            name = f"org{i % 977}/project-{i}"
            stars = f"{rng.randint(10, 90000):,}"
            blocks += [
                name,
                f"org{i % 977} {published} {stars} Python\n{name} Python\nA tool for {rng.choice(WORDS)}\n{stars} {rng.randint(1, 9000):,}",
                summary,
                "Code",
            ]
        else:
            title = f"{_sentence(rng, rng.randint(5, 10))[:-1]} (study {i})"
            authors = ", ".join(f"Author{rng.randint(1, 5000)} Name{rng.randint(1, 5000)}" for _ in range(rng.randint(1, 6)))
            blocks += [title, f"{authors} {published}", summary, "PDF"]
    return "\n\n".join(blocks)
