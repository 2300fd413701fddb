"""The notes column of a published-runs CSV read as settings: `key=value` pairs of this run
(not of later recipes the notes quote), booleans in the spellings sources use, and a setting
named as a bare word."""

from __future__ import annotations

import re

from ..cluster.gpus import PRESETS


def _text(value) -> str:
    return value if isinstance(value, str) else ""


# ---- what a row's notes say ------------------------------------------------------------
# `key=value` tokens (num_query_groups=8, ub_tp_comm_overlap=true, precision=bf16, ...); a value
# ends at white space, `;`, `,` or a parenthesis. Keys sim3d does not know are ignored.
_SETTING = re.compile(r"(?<![\w.-])([A-Za-z_][\w.-]*)=([^\s;,()]+)")


# what a note says of other runs than the row's ("later recipe ... uses recompute_modules=...",
# "... not pinned to this run"): from "later recipe", or the sentence saying "not pinned to this
# run", to the end of its clause
_OTHER_RUNS = re.compile(r"\blater recipe\b[^;]*|[^;.]*\bnot pinned to this run\b[^;]*", re.I)


def this_runs_notes(notes: str) -> str:
    """A notes cell without what it says of other runs."""
    return _OTHER_RUNS.sub("", notes or "")


def note_settings(notes: str) -> dict[str, str]:
    """The `key=value` tokens of a notes cell, keys lower-cased (the first of a repeated key
    wins), leaving out those said of other runs."""
    out: dict[str, str] = {}
    for key, value in _SETTING.findall(this_runs_notes(notes)):
        out.setdefault(key.lower(), value)
    return out


# recompute_modules=[mla_up_proj,mlp] (Megatron's names; dgxc-benchmarking's tables spell the key
# RecomputeModule), a bracketed list or one name
_MODULES = re.compile(r"(?<![\w.-])(?:recompute_modules|recomputemodule)=(\[[^\]]*\]|[^\s;,()]+)", re.I)


def _recompute_modules(notes: str) -> list[str] | None:
    found = _MODULES.search(this_runs_notes(notes))
    return [m for m in re.split(r"[\s,+/|]+", found[1].strip("[]")) if m] if found else None


_TRUE, _FALSE = ("true", "1", "1.0", "yes", "on"), ("false", "0", "0.0", "no", "off")


def _truth(value) -> bool | None:
    """A yes/no cell or setting however it is spelt (true, 1, yes, on, ...); None when it is
    neither (empty, "not stated")."""
    text = str(value).strip().lower()
    return True if text in _TRUE else False if text in _FALSE else None


def _flag(notes: str, settings: dict[str, str], key: str, mentioned: bool = False) -> bool | None:
    """A boolean setting: `key=true|false|1|0|yes|no|on|off` decides; otherwise, with
    `mentioned`, the bare word (e.g. "... with overlap_grad_sync/overlap_param_sync") means on;
    else None (unknown)."""
    value = _truth(settings.get(key.lower(), ""))
    if value is None and mentioned and re.search(rf"(?<![\w-]){re.escape(key)}(?![\w-])", notes or ""):
        return True
    return value


def precision_of(settings: dict[str, str], gpu: str | None) -> str:
    """`precision=` of the notes: fp8 (Transformer Engine's recipes: "fp8", "fp8-mixed",
    "fp8_hybrid"), fp16, fp32, else bf16. "fp16/bf16-mixed" (not stated in the sources) and
    missing values give bf16: both have the same tensor-core peak on A100 and H100, and bf16
    needs no loss scaling; fp16 on a GPU without bf16 (V100), as those runs trained."""
    value = settings.get("precision", "").lower()
    if value.startswith("fp8"):
        return "fp8"
    unsaid = "fp16" if gpu in PRESETS and PRESETS[gpu].bf16_tflops is None else "bf16"
    return {"fp16": "fp16", "fp16-mixed": "fp16", "16-mixed": "fp16", "fp32": "fp32", "32": "fp32",
            "bf16": "bf16", "bf16-mixed": "bf16"}.get(value, unsaid)
