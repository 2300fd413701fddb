"""YAML as a careful reader takes it: duplicate keys refused, aliases bounded, no cycles.

PyYAML shares one node between all uses of an anchor, so a "billion laughs" document is
cheap to parse but explodes when the scenario is copied or validated, and `&a [*a]` builds a
list that contains itself. The composed node graph is therefore measured first (memoised,
so measuring is linear in the document) and refused above `MAX_EXPANDED_NODES`.
"""

from __future__ import annotations

import re

import yaml
from yaml.constructor import ConstructorError

# A scenario has a few hundred values; a thousand times that is still read in milliseconds.
MAX_EXPANDED_NODES = 100_000
ALIASED = -1  # a key no id() takes: set in _expanded_size's table when an alias was followed


class YamlInputError(ValueError):
    """The text is not a YAML document sim3d will read; `str()` names the line."""


class UnboundedYaml(YamlInputError):
    """Aliases that expand without bound or refer to themselves."""


class _Loader(yaml.SafeLoader):
    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # `<<: *base` then overriding a key is how merges are meant to be used
                key = self.construct_object(key_node, deep=True)
                if not isinstance(key, (str, int, float, bool)) and key is not None:
                    raise ConstructorError(None, None, f"a key must be a name, got {type(key).__name__} {key!r}",
                                           key_node.start_mark)
                if key in seen:
                    raise ConstructorError(None, None, f"duplicate key {key!r} (first at line "
                                           f"{seen[key].line + 1})", key_node.start_mark)
                seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


# YAML 1.1 (PyYAML) reads 1e3 and 1e-300 as strings; YAML 1.2 and every user read them as numbers.
_Loader.add_implicit_resolver("tag:yaml.org,2002:float",
                              re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
                              list("-+0123456789"))


def _construct_int(loader, node):
    """Decimal integers only: YAML 1.1 reads 010 as 8, 0x600 as 1536 and 1:30 as 90, which no
    scenario author means."""
    text = loader.construct_scalar(node)
    digits = text.replace("_", "")
    if re.fullmatch(r"[-+]?(?:0|[1-9][0-9]*)", digits):
        return int(digits)
    raise ConstructorError(None, None, f"{text!r} is a number only in YAML 1.1's octal, hexadecimal or base-60 "
                           "forms; write it in decimal (or quote it as text)", node.start_mark)


_Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)


def _expanded_size(node, sizes: dict[int, int], open_nodes: set[int]) -> int:
    """Nodes the document would have with every alias copied out. `sizes` also records, under
    ALIASED, whether a node was met twice (an alias)."""
    key = id(node)
    if key in sizes:
        sizes[ALIASED] = 1
        return sizes[key]
    if key in open_nodes:
        raise UnboundedYaml(f"line {node.start_mark.line + 1}: an alias refers to a node that contains it "
                             "(a self-referential document)")
    open_nodes.add(key)
    if isinstance(node, yaml.MappingNode):
        children = [n for pair in node.value for n in pair]
    elif isinstance(node, yaml.SequenceNode):
        children = node.value
    else:
        children = []
    total = 1
    for child in children:
        total += _expanded_size(child, sizes, open_nodes)
        if total > MAX_EXPANDED_NODES:
            if ALIASED in sizes:
                raise UnboundedYaml(f"line {node.start_mark.line + 1}: aliases expand this document past "
                                     f"{MAX_EXPANDED_NODES:,} values (an alias bomb?)")
            raise UnboundedYaml(f"line {node.start_mark.line + 1}: the document holds more than "
                                 f"{MAX_EXPANDED_NODES:,} values (the limit; a scenario holds a few hundred)")
    open_nodes.discard(key)
    sizes[key] = total
    return total


def read_yaml_text(text: str):
    """The document in `text` (None when empty); YamlInputError with the line for anything
    malformed, duplicated or unbounded."""
    try:
        loader = _Loader(text)  # the reader rejects control characters here already
    except yaml.YAMLError as err:
        raise YamlInputError(f"malformed YAML: {err}".splitlines()[0]) from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _expanded_size(node, {}, set())
        return loader.construct_document(node)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise YamlInputError(f"{where}malformed YAML: {problem}") from None
    except RecursionError:
        raise UnboundedYaml("malformed YAML: nested too deeply") from None
    finally:
        loader.dispose()
