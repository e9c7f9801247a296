"""The Host and Origin check every door makes (templates/msnb_runtime/api/hosts.py): loopback's names on any port
pass, another host or a foreign web origin is refused with 403 and a Hint, an allowed host off loopback passes."""

from __future__ import annotations

import pytest

from msnb.templates.msnb_runtime.api.hosts import AllowedHosts, for_address, refused

LOOPBACK_HOSTS = ["localhost", "localhost:8080", "127.0.0.1:9", "[::1]:8080", "[::1]", "LOCALHOST:1"]
LOOPBACK_ORIGINS = ["http://localhost:3000", "http://127.0.0.1", "http://[::1]:8080", "https://localhost"]


@pytest.mark.parametrize("host", LOOPBACK_HOSTS)
def test_loopback_names_on_any_port_pass(host):
    assert refused(AllowedHosts(), {"host": host}) is None


@pytest.mark.parametrize("origin", LOOPBACK_ORIGINS)
def test_a_page_served_from_loopback_passes(origin):
    assert refused(AllowedHosts(), {"host": "127.0.0.1:8080", "origin": origin}) is None


@pytest.mark.parametrize(
    "headers",
    [
        {"host": "evil.example.com"},
        {"host": "evil.example.com:8080"},
        {"host": "127.0.0.1:8080", "origin": "http://evil.example.com"},
        {"host": "localhost", "origin": "null"},
        {"host": "10.0.0.5:8080"},
    ],
)
def test_another_host_or_a_foreign_origin_is_refused_with_403_and_a_hint(headers):
    status, kind, message = refused(AllowedHosts(), headers)
    assert (status, kind) == (403, "ForbiddenException")
    assert "is not allowed at this address" in message and "Hint:" in message and "--allowed-host" in message


def test_a_request_without_host_or_origin_passes():
    assert refused(AllowedHosts(), {}) is None


def test_an_address_off_loopback_accepts_its_allowed_hosts_and_its_own_address():
    allowed = for_address("10.0.0.5", "models.example.com, Other.Example.com")
    for host in ("models.example.com:8080", "other.example.com", "10.0.0.5:8080", "localhost"):
        assert refused(allowed, {"host": host}) is None, host
    assert refused(allowed, {"host": "models.example.com", "origin": "https://models.example.com"}) is None
    assert refused(allowed, {"host": "evil.example.com"})[0] == 403
    assert refused(for_address("0.0.0.0"), {"host": "0.0.0.0:8080"})[0] == 403  # the wildcard names no host
    assert refused(for_address("0.0.0.0", "*"), {"host": "anything", "origin": "http://anywhere"}) is None
