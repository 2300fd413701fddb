"""The expert group's collectives at an MoE layer's dispatch and combine, by dispatcher
(`training.moe_dispatcher`; ops.py builds the layer around them).

Megatron-Core's all-to-all dispatcher sends each token copy to its expert's rank, so the bytes
grow with top_k. Its allgather dispatcher (MoEAllGatherTokenDispatcher,
megatron/core/transformer/moe/token_dispatcher.py: gather_from_sequence_parallel_region in
token_dispatch, reduce_scatter_to_sequence_parallel_region in token_combine) gathers every
rank's tokens to every rank, which picks its own experts' copies from them: ep x the rank's
tokens, whatever top_k, and no second sort by expert after the exchange. DeepEP moves the
all-to-all's bytes over NVLink and fewer over the network (costs/moe_dispatch.py).
"""

from __future__ import annotations


def expert_collectives(ep: int, dispatcher: str, copies_bytes: float, own_bytes: float) -> tuple[dict, dict]:
    """(dispatch, combine) collective fields of an Op for an expert group of `ep` ranks: each
    rank's token copies (`copies_bytes`) or its own tokens (`own_bytes`) as they travel."""
    if ep == 1:
        return {}, {}
    if dispatcher == "allgather":
        gathered = own_bytes * ep
        return (dict(comm="all-gather", bwd_comm="reduce-scatter", comm_bytes=gathered, group="ep"),
                dict(comm="reduce-scatter", bwd_comm="all-gather", comm_bytes=gathered, group="ep"))
    exchange = dict(comm="all-to-all", bwd_comm="all-to-all", comm_bytes=copies_bytes, group="ep")
    return exchange, exchange
