"""How a model's transformer layers split over the global pipeline stages."""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=4096)  # a layout search asks for the same few splits 100,000 times
def middle_heavy_layers(layers: int, stages: int) -> tuple[int, ...]:
    """An even split; the extra layers of an uneven one go to the middle stages, away from
    the first (embedding) and last (LM head) stages."""
    base, extra = divmod(layers, stages)
    order = sorted(range(stages), key=lambda s: (abs(s - (stages - 1) / 2), s))
    bonus = set(order[:extra])
    return tuple(base + (s in bonus) for s in range(stages))


def megatron_stage_layers(s) -> tuple[tuple[int, ...], str | None]:
    """Megatron-Core's `get_num_layers_to_build` (megatron/core/transformer/
    transformer_block.py): the first / last pipeline rank builds the given number of
    layers and the others split the rest evenly; or the embedding and / or the loss count
    as one layer each and the first / last stage builds one layer fewer. Each rank's layers
    split evenly over its vpp chunks; in Megatron's interleaved order global stage g is
    chunk g // pp of pipeline rank g % pp."""
    par, pp, vpp, total = s.parallel, s.pp, s.vpp, s.model.layers
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
