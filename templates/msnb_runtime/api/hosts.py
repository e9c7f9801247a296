"""Who may knock: the ``Host`` and ``Origin`` check every HTTP door msnb opens makes before anything else (DNS
rebinding: a web page the user opens resolves its own name to 127.0.0.1 and calls the door from the browser).

On a loopback address a request naming another host, or sent from a web page of another origin, is refused with 403
and a Hint; ``localhost``, ``127.0.0.1`` and ``[::1]`` (any port) are always accepted. An address off loopback
(``0.0.0.0``, an interface's address) accepts the names of its allowed-hosts list besides them (config.properties'
``allowed_hosts``, ``--allowed-host``; ``*``: any). A request with neither header (HTTP/1.0, a plain client) passes.
MCP's streamable HTTP transport asks this of every server (it MUST validate ``Origin``).

Depends only on the standard library.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1"})
ANY = "*"
FORBIDDEN = "ForbiddenException"
ARGS_KEY = "allowed_hosts"  # the list as the replicas' and the router's arguments carry it
HINT = (
    "call this address by localhost, 127.0.0.1 or [::1]; a name or web page of another host is refused here "
    "(DNS rebinding). To serve other hosts, bind an address off loopback and list them: allowed_hosts=NAME,... in "
    "config.properties, or --allowed-host NAME"
)


def host_name(value: str) -> str:
    """The host of a ``Host`` header or an ``Origin``'s authority, lower-cased, without port or brackets."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


@dataclass(frozen=True)
class AllowedHosts:
    """The host names a door answers besides loopback's (``ANY`` among them: every name and origin)."""

    names: frozenset[str] = frozenset()

    @classmethod
    def of(cls, names: Iterable[str] | str | None) -> AllowedHosts:
        """From a list or a comma-separated text (config.properties' ``allowed_hosts``)."""
        if isinstance(names, str):
            names = names.split(",")
        return cls(frozenset(host_name(n) for n in names or () if n.strip()))

    def allows(self, host: str) -> bool:
        return ANY in self.names or host in LOOPBACK or host in self.names

    def refusal(self, host: str | None, origin: str | None) -> str | None:
        """Why a request with these ``Host`` and ``Origin`` headers is refused (its 403's message), or None."""
        if host and not self.allows(host_name(host)):
            return f"Host {host!r} is not allowed at this address"
        if origin and ANY not in self.names:
            seen = urlsplit(origin.strip()).hostname if "://" in origin else None
            if seen is None or not self.allows(seen.lower()):
                return f"Origin {origin!r} is not allowed at this address"
        return None

    def listing(self) -> str:
        """The names accepted, as a start message says them."""
        return ", ".join(["localhost", "127.0.0.1", "[::1]", *sorted(self.names)])

    def as_args(self) -> list[str]:
        return sorted(self.names)


def refused(allowed: AllowedHosts, headers: dict[str, str]) -> tuple[int, str, str] | None:
    """``(403, TorchServe's exception type, message with its Hint)`` for a request the door refuses (``headers``
    with lower-case names), or None; a /v1 or /mcp door words ``allowed.refusal``'s reason in its own protocol's
    shape (api.v1.refused)."""
    why = allowed.refusal(headers.get("host"), headers.get("origin"))
    return None if why is None else (403, FORBIDDEN, hinted(why))


def hinted(why: str) -> str:
    return f"{why}.\nHint: {HINT}."


def for_address(bind_host: str, names: Iterable[str] | str | None = None) -> AllowedHosts:
    """What a door bound on ``bind_host`` accepts: loopback's names, ``names``, and the address itself when it names
    one interface (not ``0.0.0.0`` or ``::``)."""
    listed = AllowedHosts.of(names)
    own = host_name(bind_host)
    return listed if own in ("0.0.0.0", "::", "") else AllowedHosts(listed.names | {own})


def off_loopback(host: str) -> bool:
    """Whether a door bound on ``host`` is reached by other machines (it then takes an allowed-hosts list)."""
    return host_name(host) not in LOOPBACK


__all__ = [
    "ANY",
    "ARGS_KEY",
    "FORBIDDEN",
    "HINT",
    "LOOPBACK",
    "AllowedHosts",
    "for_address",
    "hinted",
    "host_name",
    "off_loopback",
    "refused",
]
