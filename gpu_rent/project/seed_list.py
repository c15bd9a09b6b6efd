"""`<project>/seed.yml`: what the VM is seeded with — extensions, autocomplete lists, models.

Optional; absent means nothing to seed. Every entry is checked here, before
anything is rented, and a mistake is one line naming the file, the entry and
what is expected (the same ConfigError as gpu-rent.vars).

    extensions:
      - https://github.com/someone/SwarmUI-SomeExtension.git
      - {url: https://github.com/someone/Other.git, version: v1.2}
    autocomplete:
      - {url: https://example.org/danbooru.csv, sha256: <64 hex>}
    models:
      - {url: https://example.org/models/model.safetensors, sha256: <64 hex>, folder: Stable-Diffusion}
      - {civitai: 128713, sha256: <64 hex>, folder: Lora, name: detail.safetensors}
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlparse

import yaml

from gpu_rent.project import text_file, yaml_loader
from gpu_rent.project.errors import ConfigError

SEED_FILE = "seed.yml"
_SHA256 = re.compile(r"[0-9a-fA-F]{64}")
# a file or folder name that stays where it is put: no path, no hidden or special names
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._ +()-]{0,199}")
_FOLDER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._ -]{0,63}(/[A-Za-z0-9][A-Za-z0-9._ -]{0,63}){0,3}")
NOTHING = {"extensions": [], "autocomplete": [], "models": []}


def _bad(where: str, problem: str) -> ConfigError:
    return ConfigError(SEED_FILE, f"{where}: {problem}")


def _url(where: str, value: Any, schemes: tuple[str, ...]) -> str:
    if not isinstance(value, str) or urlparse(value).scheme not in schemes or not urlparse(value).netloc:
        raise _bad(where, f"url must be a {' or '.join(schemes)} URL")
    return value


def _name_from(where: str, entry: dict, url: str | None, fallback: str | None = None) -> str:
    name = entry.get("name")
    if name is None:
        name = PurePosixPath(urlparse(url).path).name if url else fallback
        if name and name.endswith(".git"):
            name = name[: -len(".git")]
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise _bad(where, "name must be a plain file name (letters, digits, . _ - + ( ) and spaces); add name:")
    return name


def _entry(where: str, raw: Any, allowed: set[str]) -> dict:
    entry = {"url": raw} if isinstance(raw, str) else raw
    if not isinstance(entry, dict):
        raise _bad(where, "must be a URL or a mapping")
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise _bad(where, f"unknown key {unknown[0]} (allowed: {', '.join(sorted(allowed))})")
    return entry


def _sha256(where: str, value: Any, required: bool) -> str | None:
    if value is None and not required:
        return None
    if not isinstance(value, str) or not _SHA256.fullmatch(value):
        raise _bad(where, "sha256 must be 64 hex digits" + ("" if not required else " (models are always checked)"))
    return value.lower()


def _extension(where: str, raw: Any) -> dict:
    entry = _entry(where, raw, {"url", "version", "name"})
    url = _url(where, entry.get("url"), ("https", "http", "git", "ssh"))
    version = entry.get("version", "HEAD")
    if not isinstance(version, str) or not version.strip():
        raise _bad(where, "version must be a branch, tag or commit")
    return {"url": url, "version": version, "name": _name_from(where, entry, url)}


def _autocomplete(where: str, raw: Any) -> dict:
    entry = _entry(where, raw, {"url", "sha256", "name"})
    url = _url(where, entry.get("url"), ("https", "http"))
    return {"url": url, "sha256": _sha256(where, entry.get("sha256"), False), "name": _name_from(where, entry, url)}


def _model(where: str, raw: Any) -> dict:
    entry = _entry(where, raw, {"url", "civitai", "sha256", "folder", "name"})
    if ("url" in entry) == ("civitai" in entry):
        raise _bad(where, "give either url or civitai (a model version id)")
    civitai = entry.get("civitai")
    if civitai is not None and (isinstance(civitai, bool) or not isinstance(civitai, int) or civitai <= 0):
        raise _bad(where, "civitai must be a model version id, a whole number")
    url = _url(where, entry["url"], ("https", "http")) if "url" in entry else None
    folder = entry.get("folder")
    if not isinstance(folder, str) or not _FOLDER.fullmatch(folder) or ".." in folder.split("/"):
        raise _bad(where, "folder must be a folder under Models, e.g. Stable-Diffusion or Lora")
    name = _name_from(where, entry, url, None)
    return {
        "url": url,
        "civitai": civitai,
        "sha256": _sha256(where, entry.get("sha256"), True),
        "folder": folder,
        "name": name,
    }


_PARTS = {"extensions": _extension, "autocomplete": _autocomplete, "models": _model}


class _Loader(yaml_loader.SafeLoader):
    """SafeLoader that refuses a key given twice, as llm_models' does: PyYAML alone keeps the last and says nothing,
    so a second `models: []` would drop every model of the first."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base` then a key of its own overrides, by design
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                again = key in seen
            except TypeError:  # an unhashable key: SafeLoader's own construct_mapping says so
                continue
            if again:
                raise ConfigError(SEED_FILE, f"{key} is given twice (lines {seen[key]} and {line})", line=line)
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def load(project_dir: Path) -> dict[str, list[dict]]:
    """The checked seed list of a project; every part present (empty when not seeded)."""
    try:
        text = text_file.read(Path(project_dir) / SEED_FILE)
    except text_file.Unreadable as e:  # a directory, a FIFO: not "nothing to seed"
        raise ConfigError(SEED_FILE, e.problem, line=e.line) from None
    if text is None:
        return {k: list(v) for k, v in NOTHING.items()}
    try:
        data = yaml.load(text, Loader=_Loader)  # a SafeLoader: plain data only
    except yaml.YAMLError as e:
        raise ConfigError(SEED_FILE, f"is not readable YAML: {' '.join(str(e).split())[:200]}") from None
    data = data or {}
    if not isinstance(data, dict):
        raise ConfigError(SEED_FILE, "must be a mapping with extensions, autocomplete and/or models")
    unknown = sorted(set(data) - set(_PARTS))
    if unknown:
        raise ConfigError(SEED_FILE, f"unknown part {unknown[0]} (allowed: {', '.join(_PARTS)})")
    out: dict[str, list[dict]] = {}
    for part, check in _PARTS.items():
        items = data.get(part) or []
        if not isinstance(items, list):
            raise ConfigError(SEED_FILE, f"{part} must be a list")
        out[part] = [check(f"{part}[{i + 1}]", raw) for i, raw in enumerate(items)]
        names = [(e.get("folder", ""), e["name"]) for e in out[part]]
        if len(names) != len(set(names)):
            raise ConfigError(SEED_FILE, f"{part}: two entries have the same name")
    return out
