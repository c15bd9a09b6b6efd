"""Ollama's model names as its types/model/name.go reads them (ParseName, EqualFold).

Python stdlib only: the same file checks ollama-models.yaml on the laptop (llm_models) and, in the on_vm package
beside llm_pull.py, matches /api/tags entries on the VM, where only python3 is installed.
"""

from __future__ import annotations

DEFAULTS = ("registry.ollama.ai", "library", "latest")  # name.go DefaultName: host, namespace, tag
MISSING = "!MISSING!"  # name.go MissingPart: a part a separator promised and nothing filled


def _cut_promised(text: str, sep: str) -> tuple[str, str, bool]:
    """name.go cutPromised: cut at the last sep; an empty side is a part that is missing."""
    at = text.rfind(sep)
    if at < 0:
        return text, "", False
    return text[:at] or MISSING, text[at + len(sep) :] or MISSING, True


def parts(name: str) -> dict[str, str]:
    """host, namespace, model and tag of an Ollama model name, defaults filled in (name.go ParseName)."""
    tag = ""
    if name.rfind(":") > name.rfind("/"):  # "/" is no tag character: a ":" before it belongs to the host
        name, tag, _ = _cut_promised(name, ":")
    rest, model, promised = _cut_promised(name, "/")
    namespace = host = ""
    if not promised:
        model = rest
    else:
        rest, namespace, promised = _cut_promised(rest, "/")
        if not promised:
            namespace = rest
        else:
            host = rest.split("://", 1)[-1]  # a protocol scheme before the host is allowed and not checked
    default_host, default_namespace, default_tag = DEFAULTS
    return {
        "host": host or default_host,
        "namespace": namespace or default_namespace,
        "model": model,
        "tag": tag or default_tag,
    }


def key(name: str) -> tuple[str, str, str, str]:
    """What makes two names one model: every part, case folded (name.go Name.EqualFold; a pull of another
    spelling reuses the model's own, routes.go getExistingName). An explicit ":local" is no part of the name
    (internal/modelref ParseRef)."""
    name = name.strip()
    if name.lower().endswith(":local"):
        name = name[: -len(":local")]
    found = parts(name)
    return tuple(found[k].casefold() for k in ("host", "namespace", "model", "tag"))  # type: ignore[return-value]
