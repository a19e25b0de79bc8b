"""Base-URL rules shared by `externalAPI.baseURL` and `InferencePoolMember.spec.url`."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit


def base_url_problem(url: str, *, allow_path: bool = True) -> str | None:
    """Why `url` is not an absolute http(s) URL with a host, no user info and a valid port."""
    if url != url.strip():
        return "must not have leading or trailing whitespace"
    if any(ch.isspace() or ord(ch) < 0x20 for ch in url):
        return "must not contain whitespace or control characters"
    scheme, sep, rest = url.partition("://")
    if not sep:
        return "must be an absolute http or https URL (e.g. https://host:8000)"
    if scheme.lower() not in ("http", "https"):
        return f"scheme must be http or https (got {scheme!r})"
    authority = rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    if "@" in authority:
        return "must not contain user information (credentials belong in a secret reference)"
    if not authority:
        return "must have a host"
    if authority.startswith("["):
        end = authority.find("]")
        if end < 0:
            return "IPv6 address has no closing ']'"
        try:
            ipaddress.IPv6Address(authority[1:end])
        except ValueError:
            return f"{authority[1:end]!r} is not a valid IPv6 address"
        host, port_part = authority[: end + 1], authority[end + 1 :]
        if port_part and not port_part.startswith(":"):
            return "unexpected characters after the IPv6 address"
        port_text = port_part[1:] if port_part else None
    else:
        if authority.count(":") > 1:
            return "IPv6 address must be enclosed in brackets"
        host, _, port_text_raw = authority.partition(":")
        port_text = port_text_raw if ":" in authority else None
        if not host:
            return "must have a host"
    if port_text is not None:
        if port_text == "":
            return "port must not be empty"
        if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
            return f"port must be a number from 1 to 65535 (got {port_text!r})"
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        return f"is not a valid URL ({exc})"
    if parts.fragment:
        return "must not have a fragment"
    if not allow_path and (parts.query or parts.path.strip("/")):
        return "must be a base URL without a path or query"
    return None


# Addresses Jetway never dials unless its own configuration allows it: link-local (cloud
# metadata services live there), and the well-known metadata endpoints. Private LAN and
# loopback addresses stay allowed: members are operator-declared and often local.
METADATA_ADDRESSES = frozenset({"169.254.169.254", "fd00:ec2::254", "100.100.100.200", "169.254.170.2"})


# IPv6 ranges whose addresses carry an IPv4 address the packet ends up at (or that a translator
# turns into one): each embedded address is held to the same policy, or ::a9fe:a9fe would reach
# the metadata service that 169.254.169.254 may not. Values: byte slices of the IPv4 address,
# every RFC 6052 layout a prefix of that length may use.
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
_IPV4_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")
_NAT64_WELL_KNOWN = ipaddress.IPv6Network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")
_RFC6052_LAYOUTS = (  # prefix /48, /56, /64, /96 (byte 8 is the reserved "u" octet)
    (slice(6, 8), slice(9, 11)),
    (slice(7, 8), slice(9, 12)),
    (slice(9, 13),),
    (slice(12, 16),),
)


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """IPv4 addresses an IPv6 address stands for: mapped, compatible, translated, NAT64, 6to4, Teredo."""
    packed = ip.packed
    found: list[ipaddress.IPv4Address] = []
    if ip.ipv4_mapped is not None:
        found.append(ip.ipv4_mapped)
    if ip in _IPV4_COMPATIBLE or ip in _IPV4_TRANSLATED or ip in _NAT64_WELL_KNOWN:
        found.append(ipaddress.IPv4Address(packed[12:]))
    if ip in _NAT64_LOCAL:
        found += [ipaddress.IPv4Address(b"".join(packed[part] for part in layout)) for layout in _RFC6052_LAYOUTS]
    if ip.sixtofour is not None:
        found.append(ip.sixtofour)
    if ip.teredo is not None:
        found += list(ip.teredo)  # (server, client): the client is de-obfuscated by ipaddress
    return found


def _refused_ip(ip: ipaddress.IPv4Address | ipaddress.IPv6Address, *, embedded: bool = False) -> str | None:
    if str(ip) in METADATA_ADDRESSES:
        return f"{ip} is a cloud metadata address"
    if ip.is_link_local:
        return f"{ip} is a link-local address"
    # Not for embedded candidates: the unused RFC 6052 layouts of a NAT64 address read as 0.0.0.0.
    if not embedded and (ip.is_multicast or ip.is_unspecified):
        return f"{ip} is not a unicast address"
    return None


def refused_address(address: str, *, allow_link_local: bool = False) -> str | None:
    """Why an IP address must not be dialled, or None when it may be."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return None  # a host name: checked again once resolved
    if allow_link_local:
        return None
    if isinstance(ip, ipaddress.IPv6Address):
        for inner in _embedded_ipv4(ip):
            why = _refused_ip(inner, embedded=True)
            if why:
                return why if ip.ipv4_mapped == inner else f"{ip} embeds an IPv4 address: {why}"
    return _refused_ip(ip)


def url_host(url: str) -> str:
    """The host of a URL, brackets removed; never raises (admission judges malformed URLs)."""
    authority = url.split("://", 1)[-1].split("/", 1)[0].split("?", 1)[0].rsplit("@", 1)[-1]
    if authority.startswith("["):
        end = authority.find("]")
        return authority[1:end] if end >= 0 else authority[1:]
    return authority.rsplit(":", 1)[0] if authority.count(":") == 1 else authority
