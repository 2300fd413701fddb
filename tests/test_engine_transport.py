"""The engine's transport seam (engine/transport.py) and the rows it writes (sim3d.trace.TraceRow)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim3d.costs.cost_model import CostModel
from sim3d.engine import Engine
from sim3d.engine.replay import ReplayOptions
from sim3d.engine.transport import AnalyticalTransport, FlowTransport
from sim3d.scenario.load import load_scenario
from sim3d.schedule.ir import Kind
from sim3d.step import step_schedule
from sim3d.trace import TRACE_COLUMNS, TraceRow

MESH = Path(__file__).resolve().parents[1] / "scenarios" / "mesh-32.yaml"


def mesh_engine(network: str, full: bool = False) -> Engine:
    s = load_scenario(MESH, [f"costs.network={network}"])
    return Engine(step_schedule(s), CostModel(s, folded=not full), ReplayOptions.of(s), full_fidelity=full)


class CountingTransport(AnalyticalTransport):
    """The analytical transport, counting the messages it is asked to carry."""

    def __init__(self, engine):
        super().__init__(engine)
        self.messages: list[tuple[int, int]] = []

    def message(self, channel, src, dst, delivered, context):
        self.messages.append((src, dst))
        return super().message(channel, src, dst, delivered, context)


def test_the_network_picks_the_transport_once():
    assert type(mesh_engine("analytical").transport) is AnalyticalTransport
    flows = mesh_engine("flow")
    assert type(flows.transport) is FlowTransport
    assert flows.run().network.flows > 0 and mesh_engine("analytical").run().network is None


def test_every_pipeline_message_goes_through_the_transport():
    """One message per SEND of the lowered schedule (folded: one pipeline), each from a
    rank to the next or previous stage's rank, each with its SEND row."""
    engine = mesh_engine("analytical")
    engine.transport = counting = CountingTransport(engine)
    result = engine.run()
    sends = sum(a.kind in (Kind.SEND_F, Kind.SEND_B) for actions in engine.schedule.ranks for a in actions)
    assert sends > 0 and len(counting.messages) == sends
    assert sorted(counting.messages) == sorted((r.rank, r.peer) for r in result.rows if r.kind.startswith("SEND"))
    assert all(abs(src - dst) == engine.placement.stride("pp") for src, dst in counting.messages)


@pytest.mark.parametrize("network,full", [("analytical", False), ("flow", False), ("flow", True)])
def test_rows_are_trace_rows_and_each_receive_matches_its_send(network, full):
    """Every row is a TraceRow; every RECV row is its message seen from the receiver
    (sim3d.trace): from the later of the post and the transfer's start until the message is
    in, or, posted after the message came, a row of no time at the post."""
    rows = mesh_engine(network, full).run().rows
    assert rows and all(type(row) is TraceRow for row in rows)
    assert TraceRow._fields == TRACE_COLUMNS
    sends = {(r.rank, r.peer, r.microbatch, r.kind[-1]): r for r in rows if r.kind.startswith("SEND")}
    recvs = [r for r in rows if r.kind.startswith("RECV")]
    assert len(recvs) == len(sends) == sum(r.kind.startswith("SEND") for r in rows)  # 1F1B: one per key
    late = 0
    for recv in recvs:
        send = sends[recv.peer, recv.rank, recv.microbatch, recv.kind[-1]]
        assert recv.bytes == send.bytes > 0 and recv.start_s >= send.start_s
        if recv.end_s == send.end_s:
            assert recv.start_s <= recv.end_s
        else:  # posted after the message came
            assert recv.end_s > send.end_s and recv.start_s == recv.end_s
            late += 1
    assert late < len(recvs)
