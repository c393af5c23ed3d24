"""The scoring protocols as objects: `protocol_for(name)` gives the `Protocol` of "reference" or "cs3"."""

from __future__ import annotations

from cs3_tasks.scoring.protocols.base import Protocol
from cs3_tasks.scoring.protocols.cs3 import Cs3Protocol
from cs3_tasks.scoring.protocols.reference import ReferenceProtocol
from cs3_tasks.scoring.records import PROTOCOLS, check_protocol

_PROTOCOLS: dict[str, Protocol] = {"reference": ReferenceProtocol(), "cs3": Cs3Protocol()}
assert set(_PROTOCOLS) == set(PROTOCOLS)


def protocol_for(name: str | Protocol) -> Protocol:
    """The protocol object of a name (ValueError naming the choices for another); a Protocol is returned
    as is."""
    if isinstance(name, Protocol):
        return name
    check_protocol(name)
    return _PROTOCOLS[name]


__all__ = ["Protocol", "protocol_for"]
