"""types/model/name.go: model names, {host}/{namespace}/{model}:{tag}, and where their manifests live."""

import os
from dataclasses import dataclass, replace

DEFAULT_HOST = "registry.ollama.ai"
DEFAULT_NAMESPACE = "library"
DEFAULT_TAG = "latest"
DEFAULT_SCHEME = "https"
MISSING_PART = "!MISSING!"  # a part promised by its separator but empty: never valid
HOST, NAMESPACE, MODEL, TAG = range(4)


@dataclass(frozen=True)
class Name:
    host: str = ""
    namespace: str = ""
    model: str = ""
    tag: str = ""
    scheme: str = ""

    def is_fully_qualified(self) -> bool:
        parts = (self.host, self.namespace, self.model, self.tag)
        return all(_valid_part(kind, part) for kind, part in enumerate(parts))

    is_valid = is_fully_qualified

    def filepath(self) -> str:
        return os.path.join(self.host, self.namespace, self.model, self.tag)

    def __str__(self) -> str:
        text = "".join(part + "/" for part in (self.host, self.namespace) if part) + self.model
        return text + (":" + self.tag if self.tag else "")

    def display_shortest(self) -> str:
        if self.host.lower() != DEFAULT_HOST:
            prefix = f"{self.host}/{self.namespace}/"
        elif self.namespace.lower() != DEFAULT_NAMESPACE:
            prefix = f"{self.namespace}/"
        else:
            prefix = ""
        return f"{prefix}{self.model}:{self.tag}"

    def display_namespace_model(self) -> str:
        return f"{self.namespace}/{self.model}"

    def base_url(self) -> str:
        return f"{self.scheme}://{self.host}"


def _cut_promised(s: str, sep: str) -> tuple[str, str, bool]:
    i = s.rfind(sep)
    if i < 0:
        return s, "", False
    return s[:i] or MISSING_PART, s[i + len(sep) :] or MISSING_PART, True


def parse_name_bare(s: str) -> Name:
    """ParseNameBare: no defaults merged."""
    tag = namespace = host = scheme = ""
    if s.rfind(":") > s.rfind("/"):  # "/" cannot be in a tag, so a later ":" starts one
        s, tag, _ = _cut_promised(s, ":")
    s, model, promised = _cut_promised(s, "/")
    if not promised:
        return Name(model=s, tag=tag)
    s, namespace, promised = _cut_promised(s, "/")
    if not promised:
        return Name(namespace=s, model=model, tag=tag)
    scheme, sep, host = s.partition("://")
    if not sep:
        scheme, host = "", scheme
    return Name(host, namespace, model, tag, scheme)


def parse_name(s: str) -> Name:
    """ParseName: ParseNameBare merged with DefaultName."""
    n = parse_name_bare(s)
    return replace(n, host=n.host or DEFAULT_HOST, namespace=n.namespace or DEFAULT_NAMESPACE,
                   tag=n.tag or DEFAULT_TAG, scheme=n.scheme or DEFAULT_SCHEME)  # fmt: skip


def parse_name_from_filepath(rel: str) -> Name:
    parts = rel.split(os.sep)
    if len(parts) != 4:
        return Name()
    n = Name(*parts)
    return n if n.is_fully_qualified() else Name()


def _alnum_(c: str) -> bool:
    return c.isascii() and (c.isalnum() or c == "_")


def _valid_part(kind: int, s: str) -> bool:
    if not 1 <= len(s) <= (350 if kind == HOST else 80):
        return False
    if not _alnum_(s[0]):
        return False
    for c in s[1:]:
        if c in "_-":
            continue
        if c == ".":
            if kind == NAMESPACE:
                return False
        elif c == ":":
            if kind != HOST:
                return False
        elif not _alnum_(c):
            return False
    return True
