"""The outbound address guard: every request Gryvia makes to an address a tenant chose goes through here.

Webhooks use it now and agents' HTTP tools later. One request:
1. The URL is parsed; only `https` (and `http` to operator allow-listed ranges), no userinfo, a host.
2. The host is resolved once. A literal IP in any spelling `inet_aton` accepts (`2130706433`, `0177.0.0.1`,
   `0x7f.1`) is normalised through it. Every address the name resolves to must be global: loopback, private
   (RFC 1918, fc00::/7), link-local (169.254/16 with the cloud metadata address, fe80::/10), CGNAT 100.64/10,
   unspecified, multicast, reserved, IPv4-mapped/compatible/NAT64/6to4 forms of those, and anything else
   `ipaddress` does not call global are refused, unless the operator allow-listed its range.
3. The connection goes to the address that was checked (no second lookup: no DNS-rebinding gap), with the
   original name as the Host header and as the TLS server name (certificates are verified against it).
4. No redirect is followed unless the caller asks, and then each hop is checked again from step 1.
5. The response is read up to a size limit, within a total time limit; no proxy from the environment is used.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
import time
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import httpx

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

METADATA = ipaddress.ip_address("169.254.169.254")
_REFUSED_V4 = [
    ipaddress.ip_network(n)
    for n in (
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.0.0.0/24",
        "192.168.0.0/16",
        "198.18.0.0/15",
        "224.0.0.0/4",
        "240.0.0.0/4",
    )
]
_REFUSED_V6 = [ipaddress.ip_network(n) for n in ("::/128", "::1/128", "fc00::/7", "fe80::/10", "ff00::/8")]
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
REDIRECTS = frozenset({301, 302, 303, 307, 308})


class GuardError(Exception):
    """A request the guard would not make, or one that failed; `code` says which (for delivery logs)."""

    code = "request_failed"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class AddressRefused(GuardError):
    """The URL's scheme, or an address its host is or resolves to, may not be reached."""

    code = "address_refused"


@dataclass(frozen=True)
class Target:
    """A parsed URL the guard accepted statically (the scheme and, for a literal IP, the address)."""

    scheme: str
    host: str  # as written (a name, or the IP's canonical text)
    port: int
    path: str  # path and query, never empty
    ip: IPAddress | None  # set when the host is a literal address


@dataclass
class GuardedResponse:
    status_code: int
    headers: dict[str, str]
    body: bytes  # at most max_bytes
    truncated: bool
    elapsed_s: float
    address: str  # the IP that answered
    url: str  # the URL that answered (after any redirects followed)
    redirects: list[str] = field(default_factory=list)


def networks(cidrs: Iterable[str]) -> list[Network]:
    """Parse allow-list entries ("127.0.0.0/8", "10.1.2.3", "::1"); a single address becomes /32 or /128."""
    return [ipaddress.ip_network(c.strip(), strict=False) for c in cidrs if c and c.strip()]


def literal_ip(host: str) -> IPAddress | None:
    """The address `host` spells, in any form the C resolver would accept, or None for a name."""
    host = host.strip("[]")
    try:
        return _unmap(ipaddress.ip_address(host))
    except ValueError:
        pass
    if any(c.isspace() for c in host) or not host or not all(c in "0123456789abcdefABCDEFxX." for c in host):
        return None
    try:  # decimal, octal, hex and short forms: 2130706433, 0177.0.0.1, 0x7f.1, 127.1
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        return None


def _unmap(ip: IPAddress) -> IPAddress:
    """The IPv4 address an IPv6 form carries (::ffff:a.b.c.d, ::a.b.c.d, 64:ff9b::a.b.c.d, 6to4), else `ip`."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        if ip.sixtofour is not None:
            return ip.sixtofour
        if ip in _NAT64 or (int(ip) >> 32 == 0 and int(ip) > 1):  # NAT64 and the deprecated IPv4-compatible form
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip


def refusal(ip: IPAddress, allow: Iterable[Network] = ()) -> str | None:
    """Why `ip` may not be reached (None: it may). Allow-listed ranges are always reachable."""
    plain = _unmap(ip)
    if any(plain in net or ip in net for net in allow if net.version in (plain.version, ip.version)):
        return None
    if plain == METADATA:
        return f"{ip} is the cloud metadata address"
    refused = _REFUSED_V4 if plain.version == 4 else _REFUSED_V6
    for net in refused:
        if plain in net:
            return f"{ip} is in the non-public range {net}"
    if not plain.is_global:
        return f"{ip} is not a public address"
    return None


def parse(url: str, *, allow: Iterable[Network] = ()) -> Target:
    """Check what can be checked without DNS: the scheme, userinfo, and a literal address. Raises AddressRefused."""
    allow = list(allow)
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise AddressRefused(f"not a valid URL: {exc}") from exc
    scheme = parts.scheme.lower()
    if scheme not in ("https", "http"):
        raise AddressRefused(f"the scheme must be https, not {scheme or 'missing'!r}")
    if parts.username is not None or parts.password is not None:
        raise AddressRefused("the URL may not carry a user name or password")
    host = parts.hostname or ""
    if not host:
        raise AddressRefused("the URL has no host")
    ip = literal_ip(host)
    if ip is not None:
        _check(ip, scheme, allow, host)
        host = str(ip)
    path = parts.path or "/"
    if parts.query:
        path = f"{path}?{parts.query}"
    return Target(scheme=scheme, host=host, port=port or (443 if scheme == "https" else 80), path=path, ip=ip)


def _check(ip: IPAddress, scheme: str, allow: list[Network], host: str) -> None:
    why = refusal(ip, allow)
    if why is not None:
        shown = host if host == str(ip) else f"{host} ({ip})"
        raise AddressRefused(f"refused to connect to {shown}: {why}")
    if scheme == "http" and not any(_unmap(ip) in net or ip in net for net in allow):
        raise AddressRefused(f"plain http is allowed only to operator allow-listed ranges; use https for {host}")


def resolve(target: Target, *, allow: Iterable[Network] = ()) -> IPAddress:
    """The one address to connect to: every address the host resolves to must pass, or none is used."""
    allow = list(allow)
    if target.ip is not None:
        return target.ip
    try:
        infos = socket.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise GuardError(f"cannot resolve {target.host}: {exc}", code="dns_error") from exc
    addresses: list[IPAddress] = []
    for _family, _type, _proto, _canon, sockaddr in infos:
        ip = ipaddress.ip_address(str(sockaddr[0]).split("%")[0])
        if ip not in addresses:
            addresses.append(ip)
    if not addresses:
        raise GuardError(f"{target.host} resolves to no address", code="dns_error")
    for ip in addresses:  # a name with one refused address is refused: it may be the one a retry gets
        _check(ip, target.scheme, allow, target.host)
    return addresses[0]


def request(
    method: str,
    url: str,
    *,
    headers: Mapping[str, str] | None = None,
    content: bytes = b"",
    allow: Iterable[str | Network] = (),
    timeout_s: float = 10.0,
    max_bytes: int = 64 * 1024,
    max_redirects: int = 0,
    user_agent: str = "gryvia",
) -> GuardedResponse:
    """Make one guarded request (see the module docstring). A 3xx is returned as it is unless `max_redirects`
    allows following it, each hop checked again. Raises AddressRefused, or GuardError(code=timeout,
    connect_error, tls_error, dns_error, request_failed)."""
    allowed = [a if not isinstance(a, str) else ipaddress.ip_network(a, strict=False) for a in allow]
    deadline = time.monotonic() + timeout_s
    started = time.monotonic()
    redirects: list[str] = []
    while True:
        target = parse(url, allow=allowed)
        ip = resolve(target, allow=allowed)
        response = _send(method, target, ip, headers or {}, content, deadline, max_bytes, user_agent)
        location = response.headers.get("location")
        if response.status_code in REDIRECTS and location and len(redirects) < max_redirects:
            url = urllib.parse.urljoin(url, location)
            redirects.append(url)
            if response.status_code == 303:
                method, content = "GET", b""
            continue
        response.elapsed_s = time.monotonic() - started
        response.url, response.redirects = url, redirects
        return response


def _send(
    method: str,
    target: Target,
    ip: IPAddress,
    headers: Mapping[str, str],
    content: bytes,
    deadline: float,
    max_bytes: int,
    user_agent: str,
) -> GuardedResponse:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise GuardError("the time limit was reached", code="timeout")
    netloc = f"[{ip}]" if ip.version == 6 else str(ip)
    default_port = 443 if target.scheme == "https" else 80
    host_header = target.host if target.port == default_port else f"{target.host}:{target.port}"
    if ":" in target.host and target.ip is not None:  # a literal IPv6 host
        host_header = f"[{target.host}]" if target.port == default_port else f"[{target.host}]:{target.port}"
    sent = {"User-Agent": user_agent, **headers, "Host": host_header, "Connection": "close"}
    extensions = {"sni_hostname": target.host} if target.scheme == "https" and target.ip is None else {}
    timeout = httpx.Timeout(remaining)
    try:
        with httpx.Client(trust_env=False, follow_redirects=False, verify=ssl.create_default_context()) as client:
            request = client.build_request(
                method,
                f"{target.scheme}://{netloc}:{target.port}{target.path}",
                headers=sent,
                content=content,
                timeout=timeout,
                extensions=extensions,
            )
            response = client.send(request, stream=True)
            try:
                body, truncated = bytearray(), False
                for chunk in response.iter_raw():
                    body += chunk
                    if len(body) > max_bytes:
                        del body[max_bytes:]
                        truncated = True
                        break
                    if time.monotonic() > deadline:
                        raise GuardError("the response did not finish within the time limit", code="timeout")
            finally:
                response.close()
            return GuardedResponse(
                status_code=response.status_code,
                headers={k.lower(): v for k, v in response.headers.items()},
                body=bytes(body),
                truncated=truncated,
                elapsed_s=0.0,
                address=str(ip),
                url="",
            )
    except httpx.TimeoutException as exc:
        raise GuardError(f"no answer from {target.host} within the time limit", code="timeout") from exc
    except httpx.ConnectError as exc:
        code = "tls_error" if isinstance(exc.__cause__, ssl.SSLError) or "SSL" in str(exc) else "connect_error"
        raise GuardError(f"cannot connect to {target.host} ({ip}): {exc}", code=code) from exc
    except httpx.HTTPError as exc:
        raise GuardError(f"request to {target.host} failed: {exc}", code="request_failed") from exc
