"""`model.mla`: multi-head latent attention (DeepSeek-V2, arXiv:2405.04434 section 2.1;
DeepSeek-V3, arXiv:2412.19437 section 2.1.1), as Megatron-Core's MLASelfAttention builds it
(megatron/core/transformer/multi_latent_attention.py):

* the queries are compressed to `q_lora_rank` and expanded back (linear_q_down_proj, a norm,
  linear_q_up_proj), or projected directly when `q_lora_rank` is null (DeepSeek-V2-Lite);
* keys and values share one compressed latent of `kv_lora_rank`, produced together with one
  rotary key part of `qk_rope_head_dim` shared by all heads (linear_kv_down_proj), normalised
  and expanded to every head's key part of `qk_nope_head_dim` and value of `v_head_dim`
  (linear_kv_up_proj);
* each head attends with keys of qk_nope_head_dim + qk_rope_head_dim and values of v_head_dim.

The down projections are duplicated on every tensor-parallel rank (TELinear
parallel_mode="duplicated"); the up projections are column-parallel and the output projection
row-parallel. Megatron-Core's names (qk_head_dim, qk_pos_emb_head_dim) are accepted too.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

Rank = Annotated[int, Field(ge=1, le=1 << 20)]
HeadPart = Annotated[int, Field(ge=1, le=4096)]


class LatentAttention(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True, strict=True)
    q_lora_rank: Rank | None = None
    kv_lora_rank: Rank
    qk_nope_head_dim: HeadPart = Field(validation_alias=AliasChoices("qk_nope_head_dim", "qk_head_dim"))
    qk_rope_head_dim: HeadPart = Field(validation_alias=AliasChoices("qk_rope_head_dim", "qk_pos_emb_head_dim"))
    v_head_dim: HeadPart

    @property
    def qk_head_dim(self) -> int:
        """A query's and a key's width per head: the part without and the part with rotary positions."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def latent(self) -> int:
        """What the down projections write per token: the query latent (or nothing), the
        key-value latent and the shared rotary key."""
        return (self.q_lora_rank or 0) + self.kv_lora_rank + self.qk_rope_head_dim
