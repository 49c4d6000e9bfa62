"""Which public connections the edge holds: caps in total and per client address, and who
makes room when a cap is reached.

A public connection is *waiting* while the edge waits for a request head on it (a new
connection, a keep-alive connection between requests, a client sending its head slowly) and
*busy* while a request is being served (or, for TCP endpoints, always). At a cap, the
connection that has been waiting longest is closed to make room for the new one (in that
client address's connections for the per-address cap, among all for the total); when none is
waiting, the new connection is refused (closed at once). A busy connection is never evicted.
"""

import collections
from typing import Dict, Optional, Protocol

MAX_PUBLIC_CONNECTIONS = 10_000  # public connections held at once, all addresses
MAX_CONNECTIONS_PER_ADDRESS = 512  # ... from one client address


class Closable(Protocol):
    """What a cap closes to make room: an asyncio transport, or a TCP port's connection the
    core handed over (edge/tcp_front.py; busy, never evicted)."""

    def abort(self) -> None: ...


class Ticket:
    """One admitted connection (``release`` it when the connection ends)."""

    __slots__ = ("address", "transport", "waiting")

    def __init__(self, address: str, transport: Optional[Closable]):
        self.address = address
        self.transport = transport
        self.waiting = False


class Admission:
    def __init__(
        self,
        max_total: int = MAX_PUBLIC_CONNECTIONS,
        max_per_address: int = MAX_CONNECTIONS_PER_ADDRESS,
    ):
        self.max_total = max_total
        self.max_per_address = max_per_address
        self.total = 0
        self._per_address: Dict[str, int] = {}
        # waiting connections, oldest first: all of them, and by address
        self._waiting: "collections.OrderedDict[Ticket, None]" = collections.OrderedDict()
        self._waiting_by_address: Dict[str, "collections.OrderedDict[Ticket, None]"] = {}
        self.evicted = 0
        self.refused = 0

    def admit(self, address: str, transport: Closable) -> Optional[Ticket]:
        """A ticket for a new connection from ``address``, or None (refused: close it)."""
        if self._per_address.get(address, 0) >= self.max_per_address and not self._evict(
            self._waiting_by_address.get(address)
        ):
            self.refused += 1
            return None
        if self.total >= self.max_total and not self._evict(self._waiting):
            self.refused += 1
            return None
        ticket = Ticket(address, transport)
        self.total += 1
        self._per_address[address] = self._per_address.get(address, 0) + 1
        return ticket

    def _evict(self, waiting: "Optional[collections.OrderedDict[Ticket, None]]") -> bool:
        if not waiting:
            return False
        oldest = next(iter(waiting))
        transport = oldest.transport
        self.release(oldest)
        if transport is not None:
            transport.abort()
        self.evicted += 1
        return True

    def waiting(self, ticket: Ticket) -> None:
        """The connection waits for a request head (it may be evicted from now on)."""
        if ticket.waiting or ticket.transport is None:
            return
        ticket.waiting = True
        self._waiting[ticket] = None
        self._waiting_by_address.setdefault(ticket.address, collections.OrderedDict())[ticket] = (
            None
        )

    def busy(self, ticket: Ticket) -> None:
        """A request is being served on it (never evicted while so)."""
        if ticket.waiting:
            ticket.waiting = False
            self._unwait(ticket)

    def release(self, ticket: Ticket) -> None:
        """The connection ended (idempotent)."""
        if ticket.transport is None:
            return
        if ticket.waiting:
            ticket.waiting = False
            self._unwait(ticket)
        self.total -= 1
        left = self._per_address.get(ticket.address, 0) - 1
        if left > 0:
            self._per_address[ticket.address] = left
        else:
            self._per_address.pop(ticket.address, None)
        ticket.transport = None

    def _unwait(self, ticket: Ticket) -> None:
        self._waiting.pop(ticket, None)
        by_address = self._waiting_by_address.get(ticket.address)
        if by_address is not None:
            by_address.pop(ticket, None)
            if not by_address:
                del self._waiting_by_address[ticket.address]
