"""How a model's transformer layers split over the global pipeline stages."""

from __future__ import annotations

import re
from functools import lru_cache

# Megatron-Core's --pipeline-model-parallel-layout letters (megatron/core/transformer/
# pipeline_parallel_layer_layout.py, parse_str_to_list): E the embedding, t a transformer
# layer, m a multi-token-prediction module (model.mtp_layers), L the loss.
LAYOUT_LETTERS = "EtmL"
MAX_LAYOUT_LETTERS = 100_000


@lru_cache(maxsize=4096)  # a layout search asks for the same few splits 100,000 times
def middle_heavy_layers(layers: int, stages: int) -> tuple[int, ...]:
    """An even split; the extra layers of an uneven one go to the middle stages, away from
    the first (embedding) and last (LM head) stages."""
    base, extra = divmod(layers, stages)
    order = sorted(range(stages), key=lambda s: (abs(s - (stages - 1) / 2), s))
    bonus = set(order[:extra])
    return tuple(base + (s in bonus) for s in range(stages))


def layout_stages(layout: str) -> list[str]:
    """A pipeline layout as Megatron-Core parses it: commas are cosmetic, `(...)*n` and `x*n`
    repeat, `|` ends a virtual stage; stage g (in layer order) is chunk g // pp of pipeline rank
    g % pp. ValueError for letters it does not know."""
    text = layout.replace(",", "")
    for pattern in (r"\(([^)]+)\)\*(\d+)", r"(.)\*(\d+)"):
        unrolled = len(text) + sum(len(m.group(1)) * int(m.group(2)) for m in re.finditer(pattern, text))
        if unrolled > MAX_LAYOUT_LETTERS:
            raise ValueError(f"parallel.pipeline_layout: unrolls to over {MAX_LAYOUT_LETTERS:,} letters "
                             "(a model of that many layers and stages is not one sim3d lays out)")
        text = re.sub(pattern, lambda m: m.group(1) * int(m.group(2)), text)
    stages = text.split("|")
    unknown = sorted({c for stage in stages for c in stage} - set(LAYOUT_LETTERS))
    if unknown:
        raise ValueError(f"parallel.pipeline_layout: unknown letter(s) {', '.join(unknown)} (E embedding, "
                         "t transformer layer, m multi-token prediction, L loss, | between stages)")
    return stages


@lru_cache(maxsize=256)
def layout_stage_mtp(layout: str) -> tuple[int, ...]:
    """The multi-token-prediction modules (`m`) of each stage of a layout."""
    return tuple(stage.count("m") for stage in layout_stages(layout))


def _layout_stage_layers(s) -> tuple[tuple[int, ...], str | None]:
    """Each global stage's transformer layers as the layout places them, or the problem."""
    par, where = s.parallel, "parallel.pipeline_layout"
    try:
        stages = layout_stages(par.pipeline_layout)
    except ValueError as e:
        return (), str(e)
    if len(stages) % s.pp:
        return (), f"{where}: {len(stages)} stages are not a multiple of pp={s.pp} (each pipeline rank holds vpp of them)"
    if len(stages) != s.pp * s.vpp:
        return (), (f"{where}: {len(stages)} stages on pp={s.pp} ranks make vpp={len(stages) // s.pp} "
                    f"(Megatron takes vpp = stages / pp), but parallel.vpp is {s.vpp}")
    joined = "".join(stages)
    if joined.count("E") != 1 or joined.count("L") != 1 or not stages[0].startswith("E") or not stages[-1].endswith("L"):
        return (), f"{where}: the embedding (E) opens the first stage and the loss (L) closes the last, once each"
    if joined.count("t") != s.model.layers:
        return (), f"{where}: {joined.count('t')} transformer layers (t), but model.layers is {s.model.layers}"
    if joined.count("m") != s.model.mtp_layers:
        return (), (f"{where}: {joined.count('m')} multi-token-prediction module(s) (m), but model.mtp_layers "
                    f"is {s.model.mtp_layers}")
    if "m" in joined:
        # Megatron-Core's validate_layer_layout (pipeline_parallel_layer_layout.py)
        holders = [g for g, stage in enumerate(stages) if "m" in stage]
        if not joined.rindex("t") < joined.index("m") <= joined.rindex("m") < joined.index("L"):
            return (), f"{where}: the multi-token-prediction modules (m) come after the last layer (t) and before the loss (L)"
        if len(holders) > 1 or holders[0] // s.pp != s.vpp - 1:
            return (), (f"{where}: the multi-token-prediction modules (m) share one stage, the last chunk of "
                        "a pipeline rank (Megatron-Core's rule)")
    # a stage may hold nothing (Megatron's grammar allows "||"): it passes the activations on
    return tuple(stage.count("t") for stage in stages), None


def megatron_stage_layers(s) -> tuple[tuple[int, ...], str | None]:
    """A pipeline layout as given (`parallel.pipeline_layout`), else Megatron-Core's
    `get_num_layers_to_build` (megatron/core/transformer/transformer_block.py): the first /
    last pipeline rank builds the given number of layers and the others split the rest
    evenly; or the embedding and / or the loss count as one layer each and the first / last
    stage builds one layer fewer. Each rank's layers split evenly over its vpp chunks; in
    Megatron's interleaved order global stage g is chunk g // pp of pipeline rank g % pp."""
    par, pp, vpp, total = s.parallel, s.pp, s.vpp, s.model.layers
    if par.pipeline_layout is not None:
        others = [k for k in ("decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers",
                              "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split")
                  if getattr(par, k)]
        if others:
            return (), f"parallel.pipeline_layout: places every layer itself; drop {', '.join(others)} (Megatron does)"
        return _layout_stage_layers(s)
    first, last = par.decoder_first_pipeline_num_layers, par.decoder_last_pipeline_num_layers
    account = par.account_for_embedding_in_pipeline_split, par.account_for_loss_in_pipeline_split
    where = "parallel.decoder_first/last_pipeline_num_layers"
    if first is not None or last is not None:
        if any(account):
            return (), (f"{where}: cannot be combined with account_for_embedding/loss_in_pipeline_split "
                        "(Megatron rejects it too)")
        rest, left = total - (first or 0) - (last or 0), pp - (first is not None) - (last is not None)
        if rest < 0 or (left == 0 and rest) or (left and rest % left) or (left and rest == 0):
            return (), (f"{where}: {total} layers minus first={first} and last={last} leave {rest} layers "
                        f"for {left} other pipeline rank(s): not an even split of at least 1 each")
        per_rank = [rest // left if left else 0] * pp
        if first is not None:
            per_rank[0] = first
        if last is not None:
            per_rank[-1] = last
        if pp == 1 and first is not None and last is not None and first != last:
            return (), f"{where}: pp=1 has one stage, first={first} and last={last} differ"
        bad = [r for r, n in enumerate(per_rank) if n % vpp]
        if bad:
            return (), (f"{where}: pipeline rank {bad[0]} gets {per_rank[bad[0]]} layers, "
                        f"not divisible by vpp={vpp}")
        return tuple(per_rank[g % pp] // vpp for g in range(pp * vpp)), None
    counted = total + account[0] + account[1]
    if counted % (pp * vpp):
        return (), (f"parallel.account_for_*_in_pipeline_split: {total} layers + {account[0] + account[1]} "
                    f"(embedding/loss) = {counted} is not divisible by pp*vpp = {pp * vpp}")
    per = counted // (pp * vpp)
    layers = [per] * (pp * vpp)
    layers[0] -= account[0]
    layers[-1] -= account[1]
    # one counted layer per stage leaves the first stage the embedding alone and the last the
    # loss alone (zero transformer layers), as Megatron-Core builds them
    # (transformer_block.py get_num_layers_to_build); a middle stage needs a layer
    if min(layers[1:-1], default=1) < 1 or min(layers) < 0 or (len(layers) == 1 and layers[0] < 1):
        return (), (f"parallel.account_for_*_in_pipeline_split: a stage would get {min(layers)} layers "
                    f"({counted} counted layers over {pp * vpp} stages)")
    return tuple(layers), None
