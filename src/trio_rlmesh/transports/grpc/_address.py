"""Endpoint addresses: what users type, parsed once.

>>> str(parse_address("127.0.0.1:50051"))
'tcp://127.0.0.1:50051'
"""

from __future__ import annotations

import os
from typing import Literal

import attrs

__all__ = ["Address", "parse_address", "parse_bind_address"]


@attrs.frozen
class Address:
    """A parsed endpoint address: TCP ``host:port``, a Unix socket path, or an in-memory
    name (``memory://name``, served and reached by the trio backend within one trio run).

    ``str(address)`` is the display form (``tcp://host:port``, ``unix:///path`` or
    ``memory://name``) used in every error message.
    """

    kind: Literal["tcp", "unix", "memory"]
    host: str | None = None
    port: int | None = None
    path: str | None = None

    @classmethod
    def tcp(cls, host: str, port: int) -> Address:
        """A TCP address."""
        return cls("tcp", host=host, port=port)

    @classmethod
    def unix(cls, path: str) -> Address:
        """A Unix socket address (the path is kept as given)."""
        return cls("unix", path=path)

    @classmethod
    def memory(cls, name: str) -> Address:
        """An in-memory address (the name is kept as given)."""
        return cls("memory", path=name)

    @property
    def authority(self) -> str:
        """``host:port`` for TCP (IPv6 hosts bracketed); the path or name otherwise."""
        if self.kind != "tcp":
            return str(self.path)
        host = str(self.host)
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return f"{host}:{self.port}"

    def __str__(self) -> str:
        if self.kind == "unix":
            return f"unix://{self.path}"
        if self.kind == "memory":
            return f"memory://{self.path}"
        return f"tcp://{self.authority}"


def _split_host_port(text: str, original: str) -> tuple[str, int]:
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise ValueError(f"invalid address {original!r}: expected [ipv6]:port")
        port_text = rest[1:]
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            raise ValueError(f"invalid address {original!r}: expected host:port")
    if "/" in port_text:
        port_text = port_text.rstrip("/")
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(
            f"invalid address {original!r}: port {port_text!r} is not a number"
        ) from None
    if not 0 <= port <= 65535:
        raise ValueError(f"invalid address {original!r}: port {port} is out of range")
    return host, port


def _unix_path(rest: str, original: str) -> str:
    if not rest:
        raise ValueError(f"invalid address {original!r}: empty unix socket path")
    return rest if os.path.isabs(rest) else os.path.abspath(rest)


def _memory_name(rest: str, original: str) -> str:
    if not rest:
        raise ValueError(f"invalid address {original!r}: empty memory:// name")
    return rest


def parse_address(address: str) -> Address:
    """Parse a connect target: ``host:port``, ``tcp://host:port``, ``http://host:port``,
    or ``unix:///path``.

    Raises:
        ValueError: for ``https://``, any other scheme, an empty host, or a bad port.

    >>> str(parse_address("localhost:50051"))
    'tcp://localhost:50051'
    >>> str(parse_address("unix:///tmp/env.sock"))
    'unix:///tmp/env.sock'
    """
    text = address.strip()
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "tcp", text
    scheme = scheme.lower()
    if scheme == "unix":
        return Address.unix(_unix_path(rest, address))
    if scheme == "memory":
        return Address.memory(_memory_name(rest, address))
    if scheme == "https":
        raise ValueError(
            f"invalid address {address!r}: https:// is not supported (rlmesh-wire-v1 is cleartext)"
        )
    if scheme not in ("tcp", "http"):
        raise ValueError(
            f"invalid address {address!r}: unknown scheme {scheme!r} "
            "(use host:port, tcp://host:port or unix:///path)"
        )
    host, port = _split_host_port(rest, address)
    if not host:
        raise ValueError(f"invalid address {address!r}: empty host")
    return Address.tcp(host, port)


def parse_bind_address(address: str) -> Address:
    """Parse a bind target: a bare ``port``, ``host:port``, ``tcp://host:port`` or
    ``unix:///path``. An empty host or ``localhost`` binds ``127.0.0.1``; port 0
    lets the OS choose.

    >>> str(parse_bind_address("0"))
    'tcp://127.0.0.1:0'
    >>> str(parse_bind_address("localhost:7000"))
    'tcp://127.0.0.1:7000'
    """
    text = address.strip()
    if text.isdigit():
        port = int(text)
        if port > 65535:
            raise ValueError(f"invalid bind address {address!r}: port {port} is out of range")
        return Address.tcp("127.0.0.1", port)
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "tcp", text
    scheme = scheme.lower()
    if scheme == "unix":
        return Address.unix(_unix_path(rest, address))
    if scheme == "memory":
        return Address.memory(_memory_name(rest, address))
    if scheme != "tcp":
        raise ValueError(
            f"invalid bind address {address!r}: use port, host:port, tcp://host:port "
            "or unix:///path"
        )
    host, port = _split_host_port(rest, address)
    if host in ("", "localhost"):
        host = "127.0.0.1"
    return Address.tcp(host, port)
