"""SwarmUI's FDS files (Data/Settings.fds, Data/Backends.fds): `key: value` lines, sections nested
by indentation (FreneticDataSyntax, as SwarmUI writes them)."""


def parse_fds(text: str) -> dict:
    root: dict = {}
    stack = [(-1, root)]
    for raw in text.splitlines():
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        indent = len(raw) - len(raw.lstrip())
        key, _, value = raw.strip().partition(":")
        while stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        value = value.strip()
        if value:
            parent[key.strip()] = value.strip('"')
        else:
            parent[key.strip()] = {}
            stack.append((indent, parent[key.strip()]))
    return root


def section(data: dict, *path: str) -> dict:
    """The nested section at path ({} when absent or not a section)."""
    for key in path:
        data = data.get(key) if isinstance(data, dict) else None
    return data if isinstance(data, dict) else {}
