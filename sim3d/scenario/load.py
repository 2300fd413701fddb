"""Scenario files: YAML -> typed, validated `Scenario` (docs/contracts.md#scenario-file; the
model tree is in schema.py).

Loading never shows a traceback to a user: every problem becomes a `ScenarioError` whose
lines each name the field path and the numbers involved.
"""

from __future__ import annotations

import numbers
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, BaseModel, ValidationError

from ..cluster.gpus import suggest
from .safe_yaml import UnboundedYaml, YamlInputError, read_yaml_text
from .bounds import shown
from .checks import consistency_problems
from .schema import Scenario
from .sharding import SHARDING_SPELLINGS, zero_stages_of
from ..errors import ScenarioError

__all__ = ["Scenario", "ScenarioError", "load_scenario", "scenario_from_dict", "parse_override", "canonical_key",
           "local_world_size", "read_scenario_yaml"]

MAX_SCENARIO_BYTES = 1_000_000


# ---- loading ----------------------------------------------------------------------------

def _fmt_loc(loc: tuple) -> str:
    return ".".join(str(p) for p in loc if not str(p).startswith("function-")) or "(top level)"


def _known_keys(model_cls: type[BaseModel]) -> list[str]:
    names = []
    for name, field in model_cls.model_fields.items():
        names.append(name)
        if isinstance(field.validation_alias, AliasChoices):
            names += [a for a in field.validation_alias.choices if isinstance(a, str)]
    return names


def _model_at(loc: tuple) -> type[BaseModel] | None:
    cls: Any = Scenario
    for part in loc:
        if isinstance(part, int):
            continue
        field = cls.model_fields.get(part) if isinstance(cls, type) and issubclass(cls, BaseModel) else None
        if field is None:
            for f in cls.model_fields.values():
                if isinstance(f.validation_alias, AliasChoices) and part in f.validation_alias.choices:
                    field = f
        if field is None:
            return None
        ann = field.annotation
        for cand in getattr(ann, "__args__", (ann,)):
            if isinstance(cand, type) and issubclass(cand, BaseModel):
                cls = cand
                break
            inner = getattr(cand, "__args__", ())
            if inner and isinstance(inner[0], type) and issubclass(inner[0], BaseModel):
                cls = inner[0]
                break
        else:
            return None
    return cls


def _explain(err: ValidationError) -> list[str]:
    problems = []
    for e in err.errors():
        loc, kind = e["loc"], e["type"]
        path = _fmt_loc(loc)
        if kind == "extra_forbidden":
            parent = _model_at(loc[:-1])
            hint = suggest(str(loc[-1]), _known_keys(parent)) if parent else ""
            problems.append(f"{path}: unknown key{hint}")
        elif kind == "missing":
            problems.append(f"{path}: required but missing")
        elif isinstance(e.get("input"), dict):  # a section-level check: its message names the key
            problems.append(f"{path}: {e['msg'].removeprefix('Value error, ')}")
        else:
            problems.append(f"{path}: {e['msg'].removeprefix('Value error, ')} (got {shown(e.get('input'))})")
    return problems


def _set_path(raw: dict, dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = raw
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ScenarioError(f"--set {dotted}: {part} is not a section")
        node = child
    node[parts[-1]] = value


def parse_override(text: str, option: str = "--set", form: str = "KEY=VALUE, e.g. parallel.tp=4") -> tuple[str, Any]:
    """`a.b=value` -> ("a.b", typed value); the value is read as YAML (1, 2.5, true, null, [1,2]).
    `option` and `form` are what a refusal names: the option the text came from, and its form."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip() or any(not part.strip() for part in key.split(".")):
        raise ScenarioError(f"{option} {text!r}: expected {form}")
    try:
        typed = read_yaml_text(value) if value.strip() else ""
    except UnboundedYaml as err:
        raise ScenarioError(f"{option} {key.strip()}: {err}") from None
    except YamlInputError:
        typed = value  # not YAML: the text itself (e.g. a path with a colon)
    return key.strip(), typed


def scenario_from_dict(raw: dict, overrides: list[str] | tuple[str, ...] = (),
                       values: dict[str, Any] | None = None) -> Scenario:
    """`overrides`: a list of "a.b=value" texts (the value read as YAML; one str alone is refused,
    since it would read as one override per character); `values`: {"a.b": value} already typed
    (the library API)."""
    if not isinstance(raw, dict):
        raise ScenarioError(f"(top level): a scenario is a mapping of sections, got {type(raw).__name__}")
    if isinstance(overrides, str):
        raise ScenarioError(f"overrides: expected a list of KEY=VALUE texts, got the string {overrides!r} "
                            f"(write [{overrides!r}])")
    raw = _canonical(_flat_megatron(_plain(raw)), Scenario, "")
    typed = [(key, _plain(value, key.count(".") + 1)) for key, value in (values or {}).items()]
    sharding_set: dict[str, object] = {}  # spelling -> value, of the overrides that set the sharding
    for key, value in [parse_override(text) for text in overrides] + typed:
        if key.startswith(STRAGGLER):
            _set_straggler(raw, key, value)
            continue
        key = canonical_key(key)
        spelling = key.partition(".")[2]
        if key.startswith("parallel.") and spelling in SHARDING_SPELLINGS and zero_stages_of(spelling, value):
            sharding_set[key] = value
            if len(sharding_set) > 1:  # the last would silently win, by order (issue 49): say both
                said = " and ".join(f"{k}={v!r}" for k, v in sharding_set.items())
                raise ScenarioError(f"overrides: {said} both set how data parallelism shards the model "
                                    "states; give one (parallel.zero 0-3)")
        _replace_sharding(raw, key)
        _set_path(raw, key, value)
    try:
        scenario = Scenario.model_validate(raw)
    except ValidationError as err:
        raise ScenarioError(_explain(err)) from None
    problems = consistency_problems(scenario)
    if problems:
        raise ScenarioError(problems)
    return scenario


# `--set straggler.rank=17 --set straggler.slowdown=1.3` (and `--grid` over either): the
# scenario's one straggler, made if it has none (rank 0, slowdown 1: no straggler until slowed)
STRAGGLER = "straggler."


def _set_straggler(raw: dict, key: str, value) -> None:
    field = key[len(STRAGGLER):]
    if field not in ("rank", "slowdown"):
        raise ScenarioError(f"--set {key}: a straggler has a rank and a slowdown (straggler.rank, straggler.slowdown)")
    faults = raw.get("faults") or []
    if not isinstance(faults, list):
        raise ScenarioError(f"--set {key}: faults is not a list")
    stragglers = [f for f in faults if isinstance(f, dict) and isinstance(f.get("straggler"), dict)]
    if len(stragglers) > 1:
        raise ScenarioError(f"--set {key}: the scenario has {len(stragglers)} stragglers; say which with "
                            "--set 'faults=[...]'")
    if not stragglers:
        stragglers = [{"straggler": {"rank": 0, "slowdown": 1.0}}]
        faults = [*faults, *stragglers]
    stragglers[0]["straggler"][field] = value
    raw["faults"] = faults


def _replace_sharding(raw: dict, key: str) -> None:
    """An override of the sharding, in any spelling, replaces what the scenario said in any
    other (`--set parallel.zero=3` on a file with distributed_optimizer: true)."""
    section, _, name = key.partition(".")
    if section == "parallel" and name in SHARDING_SPELLINGS and isinstance(raw.get("parallel"), dict):
        for other in SHARDING_SPELLINGS:
            raw["parallel"].pop(other, None)


def _aliases(model_cls: type[BaseModel]) -> dict[str, str]:
    """alias -> field name, e.g. tensor_model_parallel_size -> tp."""
    out = {}
    for name, field in model_cls.model_fields.items():
        if isinstance(field.validation_alias, AliasChoices):
            out.update({a: name for a in field.validation_alias.choices if isinstance(a, str) and a != name})
    return out


def _canonical(raw, model_cls, path: str):
    """Rename Megatron aliases to sim3d's names, so that a file may use either and `--set`
    with either name overrides the same value. Both names at once is an error."""
    if not isinstance(raw, dict) or model_cls is None:
        return raw
    aliases, out = _aliases(model_cls), {}
    for key, value in raw.items():
        name = aliases.get(key, key)
        if name in out:
            raise ScenarioError(f"{path}{name}: given twice (as {name} and {key})")
        out[name] = _canonical(value, _model_at((*path.split(".")[:-1], name)) if path else _model_at((name,)),
                               f"{path}{name}.")
    return out


def _flat_megatron(raw: dict) -> dict:
    """Megatron-LM argument names where Megatron and NeMo users put them, moved to sim3d's
    place: at the top level (a flat argument dict, as Megatron's args namespace has them) or
    inside a section they do not belong to (NeMo puts `num_experts`, `bf16`, `swiglu`,
    `recompute_granularity` under `model:`). `tensor_model_parallel_size: 8` is `parallel.tp: 8`,
    `swiglu: true` is `model.activation: swiglu` (sim3d.scenario.importers holds the table)."""
    from .importers import IRRELEVANT, SWITCH_FLAGS, VALUE_FLAGS, WITHOUT_EFFECT
    megatron = set(VALUE_FLAGS) | set(SWITCH_FLAGS)
    if any(key in VALUE_FLAGS and key not in Scenario.model_fields for key in raw):
        # a Megatron argument dict: what its namespace holds beside the layout (learning rates,
        # paths, recompute_method) does not change a step here; the padded vocabulary is the one
        # Megatron builds, so it wins over the unpadded vocab_size
        fused_loss = raw.get("cross_entropy_loss_fusion") is True
        unfused_accumulation = raw.get("gradient_accumulation_fusion") is False
        raw = {key: value for key, value in raw.items()
               if key not in IRRELEVANT and key not in WITHOUT_EFFECT
               and not (key == "vocab_size" and raw.get("padded_vocab_size") is not None)}
        training = raw.get("training") or {}
        kernels = (training.get("kernels") or {}) if isinstance(training, dict) else None
        kernels = {"stack": kernels} if isinstance(kernels, str) else kernels  # `kernels: te`, the stack alone
        if isinstance(kernels, dict):
            # Megatron's loss without --cross-entropy-loss-fusion, as the importer reads it, and
            # --no-gradient-accumulation-fusion: Megatron's hook adds each gradient into main_grad
            defaults = {"loss": None if fused_loss else "vocab_parallel",
                        "grad_accumulation": "main_grad" if unfused_accumulation else None}
            kernels = {**{k: v for k, v in defaults.items() if v is not None}, **kernels}
            raw["training"] = {**training, "kernels": kernels} if kernels else training
    out = {key: value for key, value in raw.items() if key in Scenario.model_fields or key not in megatron}
    moves = [(key, value) for key, value in raw.items() if key not in out]
    for section in ("model", "parallel", "training"):
        body = out.get(section)
        if not isinstance(body, dict):
            continue
        cls = _model_at((section,))
        own = set(cls.model_fields) | set(_aliases(cls)) | _SECTION_SWITCHES.get(section, set())
        strays = [key for key in body if key not in own and key in megatron]
        if strays:
            out[section] = {k: v for k, v in body.items() if k not in strays}
            moves += [(key, body[key]) for key in strays]
    for key, value in moves:
        if key in VALUE_FLAGS:
            path = VALUE_FLAGS[key]
        elif isinstance(value, bool):
            path, meaning = SWITCH_FLAGS[key]
            if not value and not isinstance(meaning, bool):
                continue  # `swiglu: false` leaves the default
            value = meaning if value else not meaning
        else:
            raise ScenarioError(f"{key}: a Megatron switch, expected true or false, got {value!r}")
        node = out
        *parents, leaf = path.split(".")
        for part in parents:
            if not isinstance(node.setdefault(part, {}), dict):
                raise ScenarioError(f"{part}: expected a section (a mapping) to hold {key}")
            node = node[part]
        if leaf in node:
            raise ScenarioError(f"{path}: given twice (as {path} and as the Megatron name {key})")
        node[leaf] = value
    return out


# Megatron switches a section's own validator reads (Model: --swiglu / --squared-relu;
# Training: use_flash_attn): left where they are.
_SECTION_SWITCHES = {"model": {"swiglu", "squared_relu"}, "training": {"use_flash_attn"}}


def canonical_key(dotted: str) -> str:
    """A dotted override key with Megatron aliases resolved (e.g. parallel.tensor_model_parallel_size -> parallel.tp;
    a top-level Megatron name, tensor_model_parallel_size -> parallel.tp)."""
    from .importers import VALUE_FLAGS
    if "." not in dotted and dotted not in Scenario.model_fields and dotted in VALUE_FLAGS:
        dotted = VALUE_FLAGS[dotted]
    parts, cls = [], Scenario
    for part in dotted.split("."):
        name = _aliases(cls).get(part, part) if cls is not None else part
        parts.append(name)
        cls = _model_at(tuple(parts))
    return ".".join(parts)


# A scenario nests four levels (faults.0.nic.gbps); a few more leave room for a value that is
# itself a list of lists. Deeper input is refused before any recursion could overflow.
MAX_DEPTH = 32


def _plain(obj, depth: int = 0, enclosing: frozenset = frozenset()):
    """A copy of the dicts and lists, refused past MAX_DEPTH levels or where one contains
    itself, with numpy's and other `numbers.Integral` integers as int: the strict fields take
    only int for an integer, refusing 4.0, Decimal("4") or Fraction(4) as they refuse `4.0` in
    YAML, and any finite real number (numpy floats, Decimal, Fraction) for a float."""
    if isinstance(obj, (dict, list)):
        if id(obj) in enclosing:
            raise ScenarioError("(top level): the scenario contains itself (a self-referential dict or list)")
        if depth >= MAX_DEPTH:
            raise ScenarioError(f"(top level): nested more than {MAX_DEPTH} levels deep (the limit; a scenario "
                                "nests four, as in faults.0.nic.gbps)")
        inner = enclosing | {id(obj)}
        if isinstance(obj, dict):
            return {k: _plain(v, depth + 1, inner) for k, v in obj.items()}
        return [_plain(v, depth + 1, inner) for v in obj]
    if isinstance(obj, numbers.Integral) and not isinstance(obj, (bool, int)):
        return int(obj)
    if type(obj).__module__ == "numpy" and type(obj).__name__ in ("bool", "bool_"):  # np.True_: no Integral
        return bool(obj)
    return obj


def local_world_size(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> int:
    """tp*pp*dp*cp as written in the file and overrides (dp defaults to 1 here: a local run
    has no cluster to derive it from)."""
    raw = read_scenario_yaml(Path(path))
    raw = _canonical(_plain(raw), Scenario, "") if isinstance(raw, dict) else {}
    for text in overrides:
        key, value = parse_override(text)
        _set_path(raw, canonical_key(key), value)
    par = raw.get("parallel") or {}
    if not isinstance(par, dict):
        return 1  # let the real validation report the bad section
    sizes = [par.get(axis, 1) or 1 for axis in ("tp", "pp", "dp", "cp")]
    if not all(isinstance(v, int) and v > 0 for v in sizes):
        return 1  # let the real validation report the bad value
    return sizes[0] * sizes[1] * sizes[2] * sizes[3]


def read_scenario_yaml(path: Path):
    if path.is_dir():
        raise ScenarioError(f"{path}: is a folder, expected a scenario YAML file")
    if not path.is_file():
        raise ScenarioError(f"{path}: no such scenario file" if not path.exists() else
                            f"{path}: not a regular file, expected a scenario YAML file")
    if path.stat().st_size > MAX_SCENARIO_BYTES:
        raise ScenarioError(f"{path}: {path.stat().st_size:,} bytes; a scenario is a few kB (the limit is "
                            f"{MAX_SCENARIO_BYTES:,} bytes)")
    try:
        raw = read_yaml_text(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as err:
        raise ScenarioError(f"{path}: not UTF-8 text (byte 0x{err.object[err.start]:02x} at offset {err.start}); "
                            "a scenario is a YAML file") from None
    except OSError as err:
        raise ScenarioError(f"{path}: cannot be read ({err.strerror})") from None
    except YamlInputError as err:
        raise ScenarioError(f"{path}: {err}") from None
    if raw is None:
        raise ScenarioError(f"{path}: the file is empty")
    return raw


def load_scenario(path: str | Path, overrides: list[str] | tuple[str, ...] = (),
                  values: dict[str, Any] | None = None) -> Scenario:
    path = Path(path)
    raw = read_scenario_yaml(path)
    try:
        return scenario_from_dict(raw, overrides, values)
    except ScenarioError as err:
        raise ScenarioError([f"{path}: {line}" for line in err.problems]) from None
