"""One dispatch from an action's kind to the method that carries it out.

The simpy engine and the torch executor both walk a rank's lowered action list through a
subclass of `Interpreter` (in the spirit of `torch.fx.Interpreter`, whose `run_node` calls
the method named after a node's op). A new kind is taught here, in `METHOD`, and Python
refuses to build either subclass until it implements the new method.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from .ir import Action, Kind

METHOD = {
    Kind.F: "forward",
    Kind.B: "backward",
    Kind.BI: "backward_input",
    Kind.BW: "backward_weight",
    Kind.SEND_F: "send",
    Kind.SEND_B: "send",
    Kind.RECV_F: "recv",
    Kind.RECV_B: "recv",
    Kind.DP_REDUCE: "reduce_gradients",
    Kind.PARAM_GATHER: "gather_parameters",
    Kind.OPT_STEP: "optimizer_step",
}


class Interpreter(ABC):
    """Subclasses implement one method per entry of `METHOD`; what a method returns is the
    subclass's business (the engine returns what its simpy process yields from)."""

    def __init__(self):
        self._methods = {kind: getattr(self, name) for kind, name in METHOD.items()}

    def dispatch(self, action: Action) -> Any:
        return self._methods[action.kind](action)

    @abstractmethod
    def forward(self, action: Action) -> Any: ...

    @abstractmethod
    def backward(self, action: Action) -> Any: ...

    @abstractmethod
    def backward_input(self, action: Action) -> Any: ...

    @abstractmethod
    def backward_weight(self, action: Action) -> Any: ...

    @abstractmethod
    def send(self, action: Action) -> Any: ...

    @abstractmethod
    def recv(self, action: Action) -> Any: ...

    @abstractmethod
    def reduce_gradients(self, action: Action) -> Any: ...

    @abstractmethod
    def gather_parameters(self, action: Action) -> Any: ...

    @abstractmethod
    def optimizer_step(self, action: Action) -> Any: ...
