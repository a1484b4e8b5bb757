"""The calls this balancer has running, and whether the monitor knows each of them.

The monitor is the one source of truth for in-flight work (Chimera 3.5), but it holds that truth in
memory: after it restarts, its engine table comes back from the engines' reports and its in-flight
map from the balancers, which tell it again every call they still run. A call whose admit failed
while the monitor was away is told the same way once it answers. Each monitor process has an epoch;
a call counts as registered under the epoch that acknowledged it.
"""

from __future__ import annotations

from hetflow.v1 import monitor_pb2


class Registrations:
    def __init__(self) -> None:
        self.epoch = ""
        """The newest monitor epoch seen; "" before any answer."""
        self._calls: dict[str, monitor_pb2.AdmitRequest] = {}
        self._unregistered: set[str] = set()
        """Running calls the monitor of ``epoch`` has not acknowledged."""

    def __len__(self) -> int:
        return len(self._calls)

    def __contains__(self, request_id: str) -> bool:
        return request_id in self._calls

    def add(self, request_id: str, admit: monitor_pb2.AdmitRequest) -> None:
        """A call whose admit is on its way."""
        self._calls[request_id] = admit

    def failed(self, request_id: str) -> None:
        """Its admit did not reach the monitor: the call runs, and is told again once the monitor answers."""
        if request_id in self._calls:
            self._unregistered.add(request_id)

    def registered(self, request_id: str, epoch: str) -> None:
        """The monitor of ``epoch`` acknowledged it (an acknowledgement from a monitor since replaced
        leaves the call to be told again)."""
        if epoch == self.epoch:
            self._unregistered.discard(request_id)

    def needs_telling(self) -> bool:
        return bool(self._unregistered)

    def remove(self, request_id: str) -> None:
        self._calls.pop(request_id, None)
        self._unregistered.discard(request_id)

    def saw_epoch(self, epoch: str) -> bool:
        """Note the epoch a monitor answer carried; True when it is a restarted monitor's (every
        running call is then unregistered)."""
        if not epoch or epoch == self.epoch:
            return False
        restarted = bool(self.epoch)
        self.epoch = epoch
        self._unregistered = set(self._calls)
        return restarted

    def unregistered(self) -> list[tuple[str, monitor_pb2.AdmitRequest]]:
        """The running calls to tell the monitor again, each as a re-registration."""
        out = []
        for request_id in sorted(self._unregistered):
            again = monitor_pb2.AdmitRequest()
            again.CopyFrom(self._calls[request_id])
            again.reregister = True
            out.append((request_id, again))
        return out
