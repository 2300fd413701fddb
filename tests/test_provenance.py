"""Provenance records: what priced each cost, filed explicitly as the cost model prices."""

import pytest

from sim3d.costs.provenance import ANALYTICAL, PROFILE, ProvenanceRecorder, Source


def test_records_group_by_what_and_dedupe():
    recorder = ProvenanceRecorder()
    recorder.record("pipeline p2p", ANALYTICAL)
    recorder.record("pipeline p2p", ANALYTICAL)
    recorder.record("dp collectives", PROFILE)
    recorder.record("dp collectives", ANALYTICAL)
    assert recorder.records == {Source("pipeline p2p", ANALYTICAL), Source("dp collectives", PROFILE),
                                Source("dp collectives", ANALYTICAL)}
    assert recorder.by_what() == {"pipeline p2p": {ANALYTICAL}, "dp collectives": {PROFILE, ANALYTICAL}}


def test_priced_by_profile_only_with_a_profile_record():
    recorder = ProvenanceRecorder()
    assert not recorder.priced_by_profile()
    recorder.record("compute: GEMMs (16-bit)", ANALYTICAL)
    assert not recorder.priced_by_profile()
    recorder.record("compute: GEMMs (16-bit)", PROFILE)
    assert recorder.priced_by_profile()


def test_unknown_origin_is_refused():
    with pytest.raises(ValueError):
        Source("pipeline p2p", "guessed")
