"""cmd/cmd.go and main.go: the `ollama` command line, as far as the stand-in goes.

- `ollama serve` (alias `start`): the server (server.py).
- `ollama -v` / `--version` (versionHandler): asks the server at OLLAMA_HOST for its version: "ollama version is
  X"; without a server "Warning: could not connect to a running Ollama instance"; when the two differ, or there
  is no server, "Warning: client version is X". Exit status 0 either way.
- Errors as cobra.CheckErr prints them: "Error: ..." on stderr, exit status 1 (an unknown command too).
Upstream's other commands (run, pull, list, ps, ...) are not imitated: they fail with a line saying so.
"""

import json
import sys
import urllib.request

from . import VERSION, envconfig

COMMANDS = ["serve", "create", "show", "run", "stop", "pull", "push", "signin", "signout", "list", "ps", "cp", "rm",
            "launch", "help", "start", "ls", "login", "logout"]  # fmt: skip
USAGE = """Large language model runner

Usage:
  ollama [flags]
  ollama [command]

Available Commands:
  serve       Start Ollama

Flags:
  -h, --help      help for ollama
  -v, --version   Show version information

The Ollama stand-in of the gpu-rent test ground imitates `serve` and `--version` only.
"""


def server_version() -> str:
    """api.ClientFromEnvironment: the client calls envconfig.Host() (an empty host dials this machine, as Go's)."""
    url = envconfig.host()
    host = url.host if not url.host.startswith(":") else "127.0.0.1" + url.host
    path = "/" + url.path if url.path else ""
    try:
        with urllib.request.urlopen(f"{url.scheme}://{host}{path}/api/version", timeout=10) as reply:
            return json.loads(reply.read()).get("version", "")
    except (OSError, ValueError):
        return ""


def version() -> int:
    found = server_version()
    if not found:
        print("Warning: could not connect to a running Ollama instance")
    else:
        print(f"ollama version is {found}")
    if found != VERSION:
        print(f"Warning: client version is {VERSION}")
    return 0


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE, end="")
        return 0
    if argv[0] in ("-v", "--version"):
        return version()
    if argv[0] in ("serve", "start"):
        from .server import serve

        try:
            return serve()
        except RuntimeError as e:  # envconfig.Models panics without $HOME
            print(f"panic: {e}", file=sys.stderr)
            return 2
    if argv[0] in COMMANDS:
        print(f"Error: the Ollama stand-in does not imitate `ollama {argv[0]}`; use the HTTP API", file=sys.stderr)
        return 1
    print(f'Error: unknown command "{argv[0]}" for "ollama"', file=sys.stderr)
    return 1
