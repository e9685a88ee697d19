"""What the seed dumps contain, written by reading them (DUMPS.md), not by running the code."""

EIDOLA = "Eidola: Modeling Multi-GPU Network Communication Traffic in Distributed AI Workloads"
FOREMOE = "Harnessing Routing Foresight for Micro-step-level MoE load balancing in RL Post-training"
MINIMAX = "MiniMax Sparse Attention"
MAESTRO = "Maestro: Workload-Aware Cross-Cluster Scheduling for LLM-Based Multi-Agent Systems"
NOMP = "nomp: A Framework for Building Domain Specific Compilers"
AGING = "Characterizing Software Aging in GPU-Based LLM Serving Systems"
GFDIT = "GF-DiT: Scheduling Parallelism for Diffusion Transformer Serving"
ARBOR = "Arbor: Tree Search as a Cognition Layer for Autonomous Agents"
LMCACHE = "LMCache/LMCache"
TESTBENCH = "Structured Testbench Generation for LLM-Driven HDL Design and Verification-Oriented Data Curation"
RESET = "ReSET: Accurate Latency-Critical NVFP4 Reasoning via Step-Aware Temperature Scaling"
PARTITIONED = "Partitioned Tags, Shared Data: Reconciling Strict Cache Isolation with Write-Shared Coherence"
SUPRASNN = (
    "SupraSNN: Exploiting Synapse-Level Parallelism in Spiking Neural Network Accelerators "
    "through Co-Optimized Mapping and Scheduling"
)
RESCOM = "ReSCom: A Reconfigurable Spiking Neural Network Accelerator Using Stochastic Computing"
NONPARAM = (
    "Non-Parametric Dual-Manifold Mapping via 8-Bit Bounded Transformation Matrices: "
    "Challenging FP-centric Hardware Paradigms in Low-Energy AI"
)
LIMITS = "On the Limits of Performance Portability in Directive-Based GPU Programming"

# Titles per dump, in the order the dump lists them.
DUMP_TITLES = [
    [EIDOLA, FOREMOE, MINIMAX, MAESTRO, NOMP],
    [EIDOLA, FOREMOE, MAESTRO, AGING, GFDIT],
    [
        EIDOLA,
        ARBOR,
        MAESTRO,
        LMCACHE,
        MINIMAX,
        TESTBENCH,
        NOMP,
        RESET,
        PARTITIONED,
        SUPRASNN,
        AGING,
        FOREMOE,
        GFDIT,
        RESCOM,
        NONPARAM,
        LIMITS,
    ],
    [FOREMOE, MINIMAX, MAESTRO, AGING],
]
NEW_PER_DUMP = [5, 2, 9, 0]
HEADER_TAGS = [(), (), (), ("GPU", "LLM", "AI")]
ALL_TITLES = {t for titles in DUMP_TITLES for t in titles}
assert len(ALL_TITLES) == 16

# What each example subscriber gets per day of the seed replay (entries, by day).
EXPECTED = {
    "ada@example.org": [
        {EIDOLA, FOREMOE, MINIMAX, MAESTRO, NOMP},
        {AGING, GFDIT},
        {ARBOR, LMCACHE, TESTBENCH, RESET, PARTITIONED, SUPRASNN, RESCOM, NONPARAM, LIMITS},
        set(),
    ],
    "grace@example.org": [{FOREMOE, MINIMAX, MAESTRO}, {AGING}, {LMCACHE, RESET}, set()],
    "carver@example.org": [set(), set(), {SUPRASNN, RESCOM, NONPARAM}, set()],
    "edsger@example.org": [{MINIMAX}, set(), {LMCACHE}, set()],
}
