"""Where the server listens: the address checked before any model is loaded (a taken port is one line, at once), and
the warning a host other than loopback earns (the API then faces the network)."""

from __future__ import annotations

import errno


def check_address(host: str, port: int) -> None:
    """Refuse (ConfigError, one line) a port outside 0-65535 (0: any free port), a host that cannot be bound, or an
    address already in use, by binding it once, as uvicorn will (address reuse on: a port in TIME_WAIT is not
    refused)."""
    import socket

    from ..config import ConfigError

    if not 0 <= port <= 65535:
        raise ConfigError(f"--port must be between 0 and 65535 (0: any free port), got {port}")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as err:
        raise ConfigError(f"--host {host}: not an address this machine can bind ({err.strerror})") from None
    family, _, _, _, address = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as err:
            why = "already in use (another server?)" if err.errno == errno.EADDRINUSE else err.strerror
            raise ConfigError(f"{host}:{port}: cannot serve there: {why}; choose another --port or --host") from None


def is_loopback(host: str) -> bool:
    """Whether every address `host` names is this machine's loopback (127.0.0.0/8, ::1): only then is the server out
    of the network's reach."""
    import ipaddress
    import socket

    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return False
    return all(ipaddress.ip_address(str(info[4][0]).split("%")[0]).is_loopback for info in infos)


def network_warning(host: str, *, keys: bool = False) -> str | None:
    """The warning `serve` prints for a host other than loopback (None for loopback, or with API keys): without
    keys the API has no authentication, so anyone who can reach the machine can use the model."""
    if keys or is_loopback(host):
        return None
    return (
        f"warning: --host {host} makes the server reachable from the network, and its API has no authentication: "
        "anyone who can reach this machine can use the model (the default, 127.0.0.1, is this machine only)"
    )
