"""The physical range of every number a scenario gives (schema.py's fields take these types).

Each upper bound sits an order of magnitude or more above the largest real instance, so any
what-if fits, and far enough below float overflow that no product of sizes in the cost model
reaches 1e308: hidden 10^155 once overflowed the FLOP count, and 10^60 printed a 110-digit
step time. Each bound's reason is said beside it and in the refusal.
"""

from __future__ import annotations

import math
from typing import Annotated

from pydantic import AfterValidator, Field

# Rates, sizes of memory and latencies: wide enough for any what-if (a 1 Mb/s link, a 10 Pb/s
# one) and narrow enough that no divisor drives a prediction to 1e300 s or to infinity.
Gbps = Annotated[float, Field(ge=1e-3, le=1e12)]  # 1e9+ reads as "a free network"
Tflops = Annotated[float, Field(ge=1e-3, le=1e12)]
Gib = Annotated[float, Field(ge=1e-3, le=1e7)]
Tbps = Annotated[float, Field(ge=1e-4, le=1e9)]
LatencyUs = Annotated[float, Field(ge=0, le=1e6)]
Factor = Annotated[float, Field(ge=1e-3, le=1e3)]
Watts = Annotated[float, Field(gt=0, le=1e5)]  # a board's power limit; the preset's rated limit bounds it tighter


def shown(value) -> str:
    """An input as a refusal quotes it: a huge integer as its order of magnitude, since 10^300
    in full would fill a screen (and str() refuses ints past 4,300 digits)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**15:
        return f"about {'-' if value < 0 else ''}10^{int(math.log10(abs(value)))}"
    return repr(value)


def _at_most(limit: int, why: str):
    def check(value: int) -> int:
        if value > limit:
            raise ValueError(f"at most {limit:,} ({why})")
        return value
    return AfterValidator(check)


def count(limit: int, why: str):
    """A whole number from 1 to `limit`; `why` is the bound's reason, said when it refuses."""
    return Annotated[int, Field(gt=0), _at_most(limit, why)]


def index(limit: int, why: str):
    """A whole number from 0 to `limit` (a rank, node, NIC or leaf by its number)."""
    return Annotated[int, Field(ge=0), _at_most(limit, why)]


# The widest published dense model is GPT-1T (Narayanan et al. 2021, hidden 25,600).
MAX_HIDDEN = 2**18
HIDDEN_WHY = "ten times the widest published model, GPT-1T's 25,600"
# The deepest published models have ~130 layers (GPT-1T: 128); the work limit refuses far fewer.
MAX_LAYERS = 2**17
LAYERS_WHY = "a thousand times the deepest published model, GPT-1T's 128 layers"
# The most heads published: GPT-1T's 160.
MAX_HEADS = 2**13
HEADS_WHY = "fifty times the most attention heads published, GPT-1T's 160"
# Published head dimensions are 64-256 (Gemma: 256).
MAX_HEAD_DIM = 2**14
HEAD_DIM_WHY = "64 times the largest head dimension published, 256"
# The widest published MLP is GPT-1T's 4 x 25,600 = 102,400.
MAX_FFN = 2**20
FFN_WHY = "ten times the widest published MLP, GPT-1T's 102,400"
# The largest published vocabularies: Gemma's and Nemotron-4's 256,000 tokens.
MAX_VOCAB = 2**22
VOCAB_WHY = "sixteen times the largest published vocabulary, 256,000 tokens"
# The longest context announced for any model: 10M tokens (Llama 4 Scout).
MAX_SEQ_LEN = 2**27
SEQ_LEN_WHY = "thirteen times the longest context announced, 10M tokens"
# The most experts published: PEER (He 2024, arXiv:2407.04202) routes over 1024^2 tiny experts.
MAX_EXPERTS = 2**20
EXPERTS_WHY = "PEER's 1024^2 experts, the most published"
# The largest published batches are ~16k sequences (DeepSeek-V3: 15,360).
MAX_BATCH = 2**24
BATCH_WHY = "a thousand times the largest published batch, DeepSeek-V3's 15,360 sequences"
# The largest GPU clusters reported (2025) hold ~200,000 GPUs; the work limit refuses far fewer.
MAX_GPUS = 2**22
GPUS_WHY = "twenty times the largest GPU cluster reported, about 200,000 GPUs"
# A server holds 4-16 GPUs; a rack-scale NVLink domain is counted in nodes (domain_nodes).
MAX_GPUS_PER_NODE = 2**10
GPUS_PER_NODE_WHY = "servers hold 4-16 GPUs; 1,024 leaves room for any single-node what-if"
# NVL576 racks join 144 compute trays in one NVLink domain.
MAX_DOMAIN_NODES = 2**10
DOMAIN_NODES_WHY = "seven times the 144 trays of an NVL576 rack, the largest NVLink domain announced"
# Servers cable one or two NICs per GPU (DGX H100: 8 compute NICs and 2 for storage on 8 GPUs).
NICS_PER_GPU = 4
SERVER_NICS = 10
MAX_NICS = NICS_PER_GPU * MAX_GPUS_PER_NODE
NICS_WHY = f"{NICS_PER_GPU} per GPU of the largest node; servers cable one or two NICs per GPU"

Hidden = count(MAX_HIDDEN, HIDDEN_WHY)
Layers = count(MAX_LAYERS, LAYERS_WHY)
Heads = count(MAX_HEADS, HEADS_WHY)
HeadDim = count(MAX_HEAD_DIM, HEAD_DIM_WHY)
Ffn = count(MAX_FFN, FFN_WHY)
Vocab = count(MAX_VOCAB, VOCAB_WHY)
SeqLen = count(MAX_SEQ_LEN, SEQ_LEN_WHY)
Experts = count(MAX_EXPERTS, EXPERTS_WHY)
Batch = count(MAX_BATCH, BATCH_WHY)
Degree = count(MAX_GPUS, "a parallel degree cannot exceed the GPUs, " + GPUS_WHY)
Nodes = count(MAX_GPUS, GPUS_WHY + ", even at one GPU per node")
GpusPerNode = count(MAX_GPUS_PER_NODE, GPUS_PER_NODE_WHY)
DomainNodes = count(MAX_DOMAIN_NODES, DOMAIN_NODES_WHY)
Nics = count(MAX_NICS, NICS_WHY)
Rank = index(MAX_GPUS, GPUS_WHY)
Nic = index(MAX_NICS, NICS_WHY)
