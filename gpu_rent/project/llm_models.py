"""`<project>/ollama-models.yaml`: the models the opt-in LLM runtime (LLM_RUNTIME) brings to the VM.

Read only when LLM_RUNTIME is ollama or llamacpp; absent means no models. One file for both runtimes, a
part each, so that switching LLM_RUNTIME needs no other file; both parts are checked, the one of
LLM_RUNTIME is used:

    ollama:                                   # pulled by name; Ollama's own name rules
      - llama3.2:1b
      - name: qwen3:4b
        digest: sha256:<64 hex>               # optional: the manifest the pull must give
      - name: 10.0.0.5:5000/library/tiny:latest
        insecure: true                        # plain HTTP: only to a registry host the name gives
    llamacpp:                                 # GGUF files; llama-server serves the one marked serve: true
      - url: https://huggingface.co/<repo>/resolve/main/model-Q4_K_M.gguf
        sha256: <64 hex>
        serve: true
      - {url: https://example.org/other.gguf, sha256: <64 hex>, name: other.gguf}

Every mistake is one line naming the file, the line and what is expected, before anything is rented.
This module imports nothing of gpu_rent but leaf modules (ollama_name, text_file, yaml_loader): config imports
it (never the reverse) and turns its ModelsFileError into its own ConfigError.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlparse

import yaml

from gpu_rent.on_vm import ollama_name
from gpu_rent.project import text_file, yaml_loader

MODELS_FILE = "ollama-models.yaml"
RUNTIMES = ("ollama", "llamacpp")
# how each runtime is named to the user
NAMES = {"ollama": "Ollama", "llamacpp": "llama.cpp"}
_SHA256 = re.compile(r"[0-9a-fA-F]{64}")
# a file name that stays where it is put, as seed.yml's names; a GGUF file by its extension
_GGUF_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._ +()-]{0,199}\.gguf", re.IGNORECASE)


class ModelsFileError(ValueError):
    """One line: `ollama-models.yaml[:<line>]: <what is wrong and what is expected>` (ConfigError's shape)."""

    def __init__(self, message: str, *, line: int | None = None, file: str = MODELS_FILE):
        self.file, self.line = file, line
        self.message = " ".join(message.split())  # YAML's own messages span lines; the CLI promises one
        super().__init__(str(self))

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{where}: {self.message}"


# --- Ollama's model names, as its types/model/name.go (ParseName, Name.IsValid) reads them -------------------------

_PART_RULES = {
    "host": ("-_.:", 350, "letters, digits and _ - . :"),
    "namespace": ("-_", 80, "letters, digits and _ -"),
    "model": ("-_.", 80, "letters, digits and _ - ."),
    "tag": ("-_.", 80, "letters, digits and _ - ."),
}


def ollama_name_parts(name: str) -> dict[str, str]:
    """host, namespace, model and tag of an Ollama model name, defaults filled in (name.go ParseName)."""
    return ollama_name.parts(name)


def _part_problem(kind: str, part: str) -> str | None:
    extra, longest, allowed = _PART_RULES[kind]
    if part == ollama_name.MISSING:
        return f"its {kind} is missing (nothing beside a '/' or ':')"
    first_ok = part[:1].isascii() and (part[:1].isalnum() or part[:1] == "_")
    rest_ok = all(c.isascii() and (c.isalnum() or c in extra) for c in part[1:])
    if not (1 <= len(part) <= longest and first_ok and rest_ok):
        return f"its {kind} {part!r} is not 1-{longest} of {allowed}, starting with a letter, digit or _"
    return None


def ollama_name_problem(name: object) -> str | None:
    """Why Ollama would refuse name (its pull answers "invalid model name"), in words; None: a valid name."""
    if not isinstance(name, str) or not name.strip():
        return "name must be an Ollama model name such as llama3.2:1b"
    name = name.strip()  # internal/modelref ParseRef trims it too
    if "@" in name:
        return f"name {name!r} has an '@': a digest goes in digest:, not in the name"
    # internal/modelref parseSourceSuffix: ":cloud" and a "-cloud" tag are models run on ollama.com, not here
    tail = name[name.rfind(":") + 1 :].lower() if name.rfind(":") > name.rfind("/") else ""
    if tail == "cloud" or tail.endswith("-cloud"):
        return f"{name!r} is an Ollama cloud model: it runs on ollama.com, not on this VM's GPU"
    if tail == "local":  # ParseRef strips an explicit ":local"
        name = name[: name.rfind(":")]
    parts = ollama_name_parts(name)
    for kind in ("host", "namespace", "model", "tag"):
        problem = _part_problem(kind, parts[kind])
        if problem:
            return f"name {name!r} is not an Ollama model name: {problem}"
    return None


def _ollama_key(name: str) -> tuple[str, ...]:
    """What makes two names one model: every part, case folded (name.go Name.EqualFold)."""
    return ollama_name.key(name)


# --- reading the file, with the line of everything ------------------------------------------------------------------


class _Map(dict):
    line: int = 0
    key_lines: dict


class _Seq(list):
    line: int = 0
    item_lines: list


class _Loader(yaml_loader.SafeLoader):
    """SafeLoader that keeps the line of every mapping, key and list item, and refuses a key given twice
    (PyYAML alone keeps the last and says nothing)."""


def _construct_map(loader: _Loader, node: yaml.MappingNode) -> _Map:
    loader.flatten_mapping(node)
    found = _Map()
    found.line, found.key_lines = node.start_mark.line + 1, {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        if not isinstance(key, str):
            raise ModelsFileError(f"key {key!r} is not a name", line=line)
        if key in found:
            raise ModelsFileError(f"{key} is given twice (lines {found.key_lines[key]} and {line})", line=line)
        found[key] = loader.construct_object(value_node, deep=True)
        found.key_lines[key] = line
    return found


def _construct_seq(loader: _Loader, node: yaml.SequenceNode) -> _Seq:
    found = _Seq(loader.construct_object(child, deep=True) for child in node.value)
    found.line, found.item_lines = node.start_mark.line + 1, [child.start_mark.line + 1 for child in node.value]
    return found


_Loader.add_constructor("tag:yaml.org,2002:map", _construct_map)
_Loader.add_constructor("tag:yaml.org,2002:seq", _construct_seq)


def _read(path: Path) -> Any:
    try:
        text = text_file.read(path)
    except text_file.Unreadable as e:  # a directory, a FIFO: not "no models"
        raise ModelsFileError(e.problem, line=e.line) from None
    if text is None:
        return None
    try:
        return yaml.load(text, Loader=_Loader)  # a SafeLoader: plain data only
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        said = " ".join(filter(None, (e.context, e.problem)))
        raise ModelsFileError(f"is not readable YAML: {said}", line=mark.line + 1 if mark else None) from None
    except yaml.YAMLError as e:
        raise ModelsFileError(f"is not readable YAML: {e}") from None


# --- the entries ----------------------------------------------------------------------------------------------------


def _entry(where: str, raw: Any, line: int, allowed: tuple[str, ...], shorthand: str) -> _Map:
    """A mapping of known keys; a plain text stands for {shorthand: text}."""
    if isinstance(raw, str):
        entry = _Map({shorthand: raw})
        entry.line, entry.key_lines = line, {shorthand: line}
        return entry
    if not isinstance(raw, _Map):
        raise ModelsFileError(f"{where}: must be a {shorthand} or a mapping of {', '.join(allowed)}", line=line)
    unknown = [key for key in raw if key not in allowed]
    if unknown:
        raise ModelsFileError(
            f"{where}: unknown key {unknown[0]} (allowed: {', '.join(allowed)})", line=raw.key_lines[unknown[0]]
        )
    return raw


def _line_of(entry: _Map, key: str) -> int:
    return entry.key_lines.get(key, entry.line)


def _ollama(where: str, raw: Any, line: int) -> dict:
    entry = _entry(where, raw, line, ("name", "digest", "insecure"), "name")
    problem = ollama_name_problem(entry.get("name"))
    if problem:
        raise ModelsFileError(f"{where}: {problem}", line=_line_of(entry, "name"))
    insecure = entry.get("insecure", False)
    if not isinstance(insecure, bool):
        raise ModelsFileError(f"{where}: insecure must be true or false", line=_line_of(entry, "insecure"))
    # plain HTTP only to a registry the entry names itself: never to Ollama's own, by a slip of the pen
    host = ollama_name_parts(entry["name"])["host"].lower().rsplit(":", 1)[0]  # a port is no other registry
    if insecure and (entry["name"].count("/") < 2 or host in (ollama_name.DEFAULTS[0], "ollama.com")):
        raise ModelsFileError(
            f"{where}: insecure: true needs a registry host of your own in the name (host:port/namespace/model:tag)",
            line=_line_of(entry, "insecure"),
        )
    digest = entry.get("digest")
    if digest is not None:
        # Ollama's /api/tags names a model's manifest by its sha256 without the "sha256:" that pulls print
        hexdigits = digest[len("sha256:") :] if isinstance(digest, str) and digest.startswith("sha256:") else digest
        if not isinstance(hexdigits, str) or not _SHA256.fullmatch(hexdigits):
            raise ModelsFileError(f"{where}: digest must be sha256:<64 hex digits>", line=_line_of(entry, "digest"))
        digest = f"sha256:{hexdigits.lower()}"
    return {"name": entry["name"].strip(), "digest": digest, "insecure": insecure}


def _llamacpp(where: str, raw: Any, line: int) -> dict:
    entry = _entry(where, raw, line, ("url", "sha256", "name", "serve"), "url")
    url = entry.get("url")
    if not isinstance(url, str) or urlparse(url).scheme not in ("https", "http") or not urlparse(url).netloc:
        raise ModelsFileError(f"{where}: url must be a https or http URL of a GGUF file", line=_line_of(entry, "url"))
    sha256 = entry.get("sha256")
    if not isinstance(sha256, str) or not _SHA256.fullmatch(sha256):
        raise ModelsFileError(
            f"{where}: sha256 must be 64 hex digits (a model file is always checked)", line=_line_of(entry, "sha256")
        )
    name = entry.get("name", PurePosixPath(urlparse(url).path).name)
    if not isinstance(name, str) or not _GGUF_NAME.fullmatch(name):
        raise ModelsFileError(
            f"{where}: name {name!r} must be a plain file name ending in .gguf (letters, digits, . _ - + ( ) and "
            "spaces); add name:",
            line=_line_of(entry, "name" if "name" in entry else "url"),
        )
    serve = entry.get("serve", False)
    if not isinstance(serve, bool):
        raise ModelsFileError(f"{where}: serve must be true or false", line=_line_of(entry, "serve"))
    return {"url": url, "sha256": sha256.lower(), "name": name, "serve": serve}


_PARTS = {"ollama": _ollama, "llamacpp": _llamacpp}


def _part(data: _Map, part: str) -> list[dict]:
    items = data.get(part)
    if items is None:
        return []
    if not isinstance(items, _Seq):
        raise ModelsFileError(f"{part} must be a list", line=data.key_lines[part])
    checked = [_PARTS[part](f"{part}[{i + 1}]", raw, items.item_lines[i]) for i, raw in enumerate(items)]
    seen: dict[Any, int] = {}
    for i, entry in enumerate(checked):
        same = [_ollama_key(entry["name"])] if part == "ollama" else [entry["name"].casefold(), entry["url"]]
        for key in same:
            if key in seen:
                first = seen[key]
                raise ModelsFileError(
                    f"{part}[{i + 1}]: {entry['name']} is {part}[{first + 1}] again (line {items.item_lines[first]})",
                    line=items.item_lines[i],
                )
            seen[key] = i
    if part == "llamacpp" and checked:
        served = [i for i, entry in enumerate(checked) if entry["serve"]]
        if len(served) != 1:
            lines = ", ".join(str(items.item_lines[i]) for i in served)
            said = f"{len(served)} are (lines {lines})" if served else "none is"
            raise ModelsFileError(
                f"llamacpp: exactly one model is marked serve: true (the one llama-server serves); {said}",
                line=items.item_lines[served[1]] if len(served) > 1 else data.key_lines[part],
            )
    return checked


def load(project_dir: Path, runtime: str) -> list[dict]:
    """The checked models of runtime (ollama or llamacpp); none when the file is absent or runtime is none.

    ollama: [{"name", "digest" (sha256:<hex> or None)}]; llamacpp: [{"url", "sha256", "name", "serve"}].
    """
    if runtime not in RUNTIMES:
        return []
    data = _read(Path(project_dir) / MODELS_FILE)
    if data is None:
        return []
    if not isinstance(data, _Map):
        raise ModelsFileError("must be a mapping with ollama and/or llamacpp, each a list of models", line=1)
    unknown = [key for key in data if key not in _PARTS]
    if unknown:
        raise ModelsFileError(
            f"unknown part {unknown[0]} (allowed: {', '.join(_PARTS)})", line=data.key_lines[unknown[0]]
        )
    checked = {part: _part(data, part) for part in _PARTS}
    return checked[runtime]
