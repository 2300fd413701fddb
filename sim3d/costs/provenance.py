"""Where each price came from: explicit records that the pricing code files as it prices, so
that `--explain` and the check "did the profile price anything?" read records, not strings."""

from __future__ import annotations

from dataclasses import dataclass

PROFILE = "profile"
ANALYTICAL = "analytical"


@dataclass(frozen=True)
class Source:
    """One kind of price (`what`: "compute: GEMMs (16-bit)", "dp collectives", "pipeline p2p",
    "tp overlap: bulk" ...) and what priced it (`by`: PROFILE or ANALYTICAL). The words that
    describe the profile or the analytical model are asked of them when explained, not here:
    recording sits on the pricing path."""
    what: str
    by: str

    def __post_init__(self):
        if self.by not in (PROFILE, ANALYTICAL):
            raise ValueError(f"a price comes from {PROFILE!r} or {ANALYTICAL!r}, not {self.by!r}")


class ProvenanceRecorder:
    """The set of Sources a cost model has used so far, handed to the parts that price."""

    def __init__(self):
        self._records: set[Source] = set()

    def record(self, what: str, by: str) -> None:
        self._records.add(Source(what, by))

    @property
    def records(self) -> frozenset[Source]:
        return frozenset(self._records)

    def by_what(self) -> dict[str, set[str]]:
        """what -> the set of sources that priced it."""
        grouped: dict[str, set[str]] = {}
        for source in self._records:
            grouped.setdefault(source.what, set()).add(source.by)
        return grouped

    def priced_by_profile(self) -> bool:
        return any(source.by == PROFILE for source in self._records)
