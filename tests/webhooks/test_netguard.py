"""The address guard (apps.core.netguard): every address in the issue's list is refused, names are resolved once
and every address they resolve to is checked, the checked address is the one connected to, redirects are not
followed to unchecked addresses, and refused attempts are recorded as such."""

from __future__ import annotations

import ipaddress
import socket

import pytest

from apps.core import netguard
from apps.webhooks.delivery import deliver_webhooks
from apps.webhooks.models import AttemptStatus, Delivery
from tests.jobs.factories import make_job

REFUSED_URLS = [
    "https://127.0.0.1/hook",
    "https://10.0.0.1/hook",
    "https://172.16.0.1/hook",
    "https://192.168.1.1/hook",
    "https://169.254.169.254/latest/meta-data/",
    "https://100.64.0.1/hook",
    "https://0.0.0.0/hook",
    "https://[::1]/hook",
    "https://[fc00::1]/hook",
    "https://[fe80::1]/hook",
    "https://[::ffff:127.0.0.1]/hook",
    "https://[::ffff:7f00:1]/hook",  # the same, written in hex
    "https://2130706433/hook",  # decimal 127.0.0.1
    "https://0177.0.0.1/hook",  # octal 127.0.0.1
    "https://0x7f.1/hook",  # hex, short form
    "https://127.1/hook",
    "https://[64:ff9b::a00:1]/hook",  # NAT64 of 10.0.0.1
    "https://224.0.0.1/hook",
    "https://255.255.255.255/hook",
]


def _addrinfo(*addresses: str):
    def fake(host, port, *args, **kwargs):
        out = []
        for address in addresses:
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            sockaddr = (address, port, 0, 0) if family == socket.AF_INET6 else (address, port)
            out.append((family, socket.SOCK_STREAM, 6, "", sockaddr))
        return out

    return fake


@pytest.mark.parametrize("url", REFUSED_URLS)
def test_literal_refused_addresses(url):
    with pytest.raises(netguard.AddressRefused) as caught:
        netguard.parse(url)
    assert caught.value.code == "address_refused"
    with pytest.raises(netguard.AddressRefused):
        netguard.request("POST", url, timeout_s=1)


def test_decimal_and_octal_spellings_are_the_loopback_address():
    assert netguard.literal_ip("2130706433") == ipaddress.ip_address("127.0.0.1")
    assert netguard.literal_ip("0177.0.0.1") == ipaddress.ip_address("127.0.0.1")
    assert netguard.literal_ip("[::ffff:127.0.0.1]") == ipaddress.ip_address("127.0.0.1")
    assert netguard.literal_ip("hooks.example.com") is None
    assert netguard.literal_ip("1.2.3.4 junk") is None  # inet_aton would accept it


def test_public_addresses_pass():
    for address in ("8.8.8.8", "1.1.1.1", "2606:4700:4700::1111"):
        assert netguard.refusal(ipaddress.ip_address(address)) is None
    assert netguard.parse("https://8.8.8.8:8443/x?y=1").path == "/x?y=1"


def test_localhost_by_name_is_refused():
    with pytest.raises(netguard.AddressRefused, match="localhost"):
        netguard.request("POST", "https://localhost/hook", timeout_s=1)


def test_a_name_resolving_to_a_private_address(monkeypatch):
    monkeypatch.setattr(socket, "getaddrinfo", _addrinfo("10.1.2.3"))
    with pytest.raises(netguard.AddressRefused, match=r"internal\.example\.com \(10\.1\.2\.3\)"):
        netguard.request("POST", "https://internal.example.com/hook", timeout_s=1)


def test_a_name_resolving_public_first_then_private_is_refused(monkeypatch):
    calls = []

    def fake(host, port, *args, **kwargs):
        calls.append(host)
        return _addrinfo("93.184.216.34", "192.168.0.10")(host, port)

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    with pytest.raises(netguard.AddressRefused, match="192.168.0.10"):
        netguard.request("POST", "https://rebind.example.com/hook", timeout_s=1)
    assert calls == ["rebind.example.com"]  # resolved once


def test_the_checked_address_is_the_one_connected_to(monkeypatch, receiver):
    """A name is resolved once; the connection goes to that address with the name as Host (no second lookup)."""
    calls = []

    def fake(host, port, *args, **kwargs):
        calls.append(host)
        return _addrinfo("127.0.0.1")(host, port)

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    port = receiver.server.server_address[1]
    response = netguard.request(
        "POST", f"http://hooks.test:{port}/hook", content=b"{}", allow=["127.0.0.0/8"], timeout_s=5
    )
    assert response.status_code == 200 and response.address == "127.0.0.1"
    # The name was looked up once; the socket layer only parses the checked literal address.
    assert calls.count("hooks.test") == 1 and set(calls) <= {"hooks.test", "127.0.0.1"}
    assert receiver.requests[0].headers["host"] == f"hooks.test:{port}"


def test_plain_http_only_to_allow_listed_ranges(receiver):
    with pytest.raises(netguard.AddressRefused, match="127.0.0.1"):
        netguard.request("POST", receiver.url, timeout_s=2)  # loopback, not allow-listed
    with pytest.raises(netguard.AddressRefused, match="plain http"):
        netguard.parse("http://8.8.8.8/hook", allow=netguard.networks(["127.0.0.0/8"]))
    assert netguard.request("POST", receiver.url, allow=["127.0.0.0/8"], timeout_s=5).status_code == 200


def test_a_redirect_to_a_private_address_is_refused(receiver):
    receiver.answer(302, headers={"Location": "http://10.0.0.1/steal"}, times=2)
    not_followed = netguard.request("POST", receiver.url, allow=["127.0.0.0/8"], timeout_s=5)
    assert not_followed.status_code == 302  # webhooks follow none
    with pytest.raises(netguard.AddressRefused, match="10.0.0.1"):  # a caller that follows checks each hop
        netguard.request("POST", receiver.url, allow=["127.0.0.0/8"], timeout_s=5, max_redirects=3)


def test_response_size_and_time_limits(receiver):
    receiver.answer(200, body=b"x" * 5000)
    response = netguard.request("POST", receiver.url, allow=["127.0.0.0/8"], timeout_s=5, max_bytes=100)
    assert len(response.body) == 100 and response.truncated

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)  # accepts the connection, never answers
    try:
        with pytest.raises(netguard.GuardError) as caught:
            netguard.request(
                "POST", f"http://127.0.0.1:{silent.getsockname()[1]}/", allow=["127.0.0.0/8"], timeout_s=0.5
            )
        assert caught.value.code == "timeout"
    finally:
        silent.close()


@pytest.mark.django_db
def test_a_refused_delivery_is_recorded_as_refused(monkeypatch, settings, tenant_a, make_endpoint):
    settings.GRYVIA_WEBHOOK_ALLOW_CIDRS = []
    endpoint, _secret = make_endpoint(tenant_a, "https://internal.example.com/hook")
    from apps.jobs import services as jobs

    jobs.job_events_record([(make_job(tenant_a, "doomed"), "Failed", "OOMKilled", "Warning")])
    monkeypatch.setattr(socket, "getaddrinfo", _addrinfo("10.0.0.7"))
    deliver_webhooks()
    delivery = Delivery.all_tenants.get(endpoint=endpoint)
    attempt = delivery.attempt_log.get()
    assert (attempt.status, attempt.error_code) == (AttemptStatus.REFUSED, "address_refused")
    assert "10.0.0.7" in attempt.error and delivery.status == "pending"  # retried later: DNS may change


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["https://10.0.0.1/hook", "https://[::ffff:127.0.0.1]/x", "https://2130706433/"])
def test_a_literal_refused_address_is_a_400_naming_url(settings, client_a, url):
    settings.GRYVIA_WEBHOOK_ALLOW_CIDRS = []
    response = client_a.post("/api/v1/webhooks/", {"url": url, "events": ["job.failed"]}, format="json")
    assert response.status_code == 400, response.content
    assert "url" in response.json()["error"]["fields"]
