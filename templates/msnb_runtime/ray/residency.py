"""Which of a replica set's models are loaded in one replica now: at most ``max_num_models_per_replica`` (Ray Serve's
multiplexing name for the same limit), the least recently used idle one evicted first.

A replica set lists more models than its replicas may hold loaded at once when its limit says so; a model evicted is
loaded again by its next request, which waits for that load (as TorchServe's register without workers loads a model
on demand). A model with a request in flight (``begin`` .. ``end``) is never evicted: the limit is then exceeded
until it is idle, and met again by the next ``victims``.
Depends on the standard library only, never on msnb or Ray.
"""

from __future__ import annotations

from collections import Counter, OrderedDict


class Residency:
    """The loaded models of one replica in the order they were last used (``limit``: at most that many loaded;
    None: no limit)."""

    def __init__(self, limit: int | None = None):
        self.limit = limit
        self._order: OrderedDict[str, None] = OrderedDict()  # least recently used first
        self._busy: Counter[str] = Counter()  # requests in flight per model

    def loaded(self, app: str) -> None:
        """``app`` loaded now (the most recently used)."""
        self._order[app] = None
        self._order.move_to_end(app)

    def forget(self, app: str) -> None:
        """``app`` unloaded (evicted, or out of the set)."""
        self._order.pop(app, None)
        self._busy.pop(app, None)

    def begin(self, app: str) -> None:
        """A request of ``app`` starts: it is the most recently used and cannot be evicted until it ends."""
        self._busy[app] += 1
        if app in self._order:
            self._order.move_to_end(app)

    def end(self, app: str) -> None:
        self._busy[app] -= 1
        if self._busy[app] <= 0:
            del self._busy[app]

    def busy(self, app: str) -> bool:
        return self._busy[app] > 0

    def victims(self) -> list[str]:
        """The models to evict so that at most ``limit`` stay loaded: idle ones, least recently used first."""
        over = len(self._order) - self.limit if self.limit is not None else 0
        idle = [app for app in self._order if not self._busy[app]]
        return idle[: max(0, over)]

    def resident(self) -> list[str]:
        """The loaded models, least recently used first."""
        return list(self._order)


def limit_of(value: object) -> int | None:
    """The user_config's ``max_num_models_per_replica``: a positive count, or None (no limit) when absent or 0."""
    if value in (None, "", 0, "0"):
        return None
    count = int(value)  # type: ignore[call-overload]
    if count < 0:
        raise ValueError(f"max_num_models_per_replica must be 0 (no limit) or more, not {count}")
    return count
