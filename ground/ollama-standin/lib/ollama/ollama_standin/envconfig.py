"""envconfig/config.go: the environment the server reads, parsed as upstream parses it.

OLLAMA_HOST (Host), OLLAMA_MODELS (Models), OLLAMA_KEEP_ALIVE (KeepAlive), OLLAMA_NOPRUNE
(NoPrune), OLLAMA_CONTEXT_LENGTH (ContextLength). Var strips spaces, then quotes, as upstream does.
"""

import ipaddress
import os
from typing import NamedTuple

from .gotypes import MAX_DURATION, SECOND, parse_bool, parse_duration


class URL(NamedTuple):
    scheme: str
    host: str  # host:port, as url.URL.Host
    path: str

    def __str__(self) -> str:  # url.URL.String: a path gets its leading slash
        path = self.path if not self.path or self.path.startswith("/") else "/" + self.path
        return f"{self.scheme}://{self.host}{path}"


def var(key: str) -> str:
    return os.environ.get(key, "").strip().strip("\"'")


def split_host_port(hostport: str) -> tuple[str, str]:
    """net.SplitHostPort: ValueError where Go returns an error."""
    i = hostport.rfind(":")
    if i < 0:
        raise ValueError("missing port in address")
    j = k = 0
    if hostport.startswith("["):
        end = hostport.find("]")
        if end < 0:
            raise ValueError("missing ']' in address")
        if end + 1 == len(hostport):
            raise ValueError("missing port in address")
        if end + 1 != i:
            raise ValueError("too many colons in address" if hostport[end + 1] == ":" else "missing port in address")
        host, j, k = hostport[1:end], 1, end + 1
    else:
        host = hostport[:i]
        if ":" in host:
            raise ValueError("too many colons in address")
    if "[" in hostport[j:]:
        raise ValueError("unexpected '[' in address")
    if "]" in hostport[k:]:
        raise ValueError("unexpected ']' in address")
    return host, hostport[i + 1 :]


def join_host_port(host: str, port: str) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _parse_ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _go_int(text: str) -> int | None:
    """strconv.ParseInt(s, 10, 32): an optional sign and ASCII digits, within int32."""
    body = text[1:] if text[:1] in ("+", "-") else text
    if not body or not body.isascii() or not body.isdigit():
        return None
    n = int(text)
    return n if -(1 << 31) <= n < 1 << 31 else None


def host() -> URL:
    """Host: scheme and host:port the server listens on and clients call; default http://127.0.0.1:11434."""
    default_port = "11434"
    s = var("OLLAMA_HOST").strip()
    scheme, sep, hostport = s.partition("://")
    if not sep:
        scheme, hostport = "http", s
        if s == "ollama.com":
            scheme, hostport = "https", "ollama.com:443"
    elif scheme == "http":
        default_port = "80"
    elif scheme == "https":
        default_port = "443"
    hostport, _, path = hostport.partition("/")
    try:
        name, port = split_host_port(hostport)
    except ValueError:
        name, port = "127.0.0.1", default_port
        ip = _parse_ip(hostport.strip("[]"))
        if ip is not None:
            name = str(ip)
        elif hostport:
            name = hostport
    n = _go_int(port)
    if n is None or n > 65535 or n < 0:
        port = default_port
    return URL(scheme, join_host_port(name, port), path)


def models() -> str:
    """Models: OLLAMA_MODELS, else $HOME/.ollama/models (os.UserHomeDir: $HOME, and Go panics without it)."""
    if s := var("OLLAMA_MODELS"):
        return s
    home = os.environ.get("HOME", "")
    if not home:
        raise RuntimeError("$HOME is not defined")
    return os.path.join(home, ".ollama", "models")


def keep_alive() -> int:
    """KeepAlive in nanoseconds: a Go duration or whole seconds; negative is forever; default 5m."""
    value = 5 * 60 * SECOND
    if s := var("OLLAMA_KEEP_ALIVE"):
        try:
            value = parse_duration(s)
        except ValueError:
            n = _go_int64(s)
            if n is not None:
                value = n * SECOND
    return MAX_DURATION if value < 0 else value


def _go_int64(text: str) -> int | None:
    body = text[1:] if text[:1] in ("+", "-") else text
    if not body or not body.isascii() or not body.isdigit():
        return None
    n = int(text)
    return n if -(1 << 63) <= n < 1 << 63 else None


def flag(key: str) -> bool:
    """Bool(key)(): unset is false; a value ParseBool rejects counts as true."""
    s = var(key)
    if not s:
        return False
    try:
        return parse_bool(s)
    except ValueError:
        return True


def no_prune() -> bool:
    return flag("OLLAMA_NOPRUNE")


def context_length() -> int:
    """ContextLength: Uint("OLLAMA_CONTEXT_LENGTH", 0); an invalid value keeps the default."""
    s = var("OLLAMA_CONTEXT_LENGTH")
    return int(s) if s.isascii() and s.isdigit() else 0
