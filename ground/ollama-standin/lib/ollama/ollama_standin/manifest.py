"""The models directory as upstream keeps it, and what upstream reads out of it.

- manifest/paths.go: $OLLAMA_MODELS/manifests/<host>/<namespace>/<model>/<tag>, $OLLAMA_MODELS/blobs/sha256-<hex>
  (BlobsPath accepts only sha256 digests), PruneDirectory;
- manifest/manifest.go: a manifest's digest is the sha256 of its file, its size the sum of its layers and config;
  Manifests globs manifests/*/*/*/*; Remove and RemoveLayers (blobs no other manifest uses);
- server/images.go: PruneLayers (at start, blobs no manifest names, and partial downloads, older than an hour),
  GetModel (which layer is the model, template, system, params, license);
- server/fixblobs.go: "sha256:<hex>" blob files renamed "sha256-<hex>";
- server/model_list_cache.go: the /api/tags summary (config blob, GGUF header, capabilities);
- fs/ggml/type.go FileType.String: quantization names.
"""

import contextlib
import glob
import hashlib
import json
import os
import re
import struct
import time
from dataclasses import dataclass, field

from . import envconfig
from .gotypes import format_time
from .names import Name, parse_name_from_filepath

BLOB_DIGEST = re.compile(r"^sha256[:-][0-9a-fA-F]{64}$")
LAYER_PRUNE_GRACE_SECONDS = 3600  # images.go layerPruneGracePeriod
MEDIA_MODEL = "application/vnd.ollama.image.model"
DEFAULT_TEMPLATE = "{{ .Prompt }}"  # template.DefaultTemplate
# fs/ggml/type.go FileType.String, by value (None: removed types, printed as "unknown")
FILE_TYPES = ["F32", "F16", "Q4_0", "Q4_1", None, None, None, "Q8_0", "Q5_0", "Q5_1", "Q2_K", "Q3_K_S", "Q3_K_M",
              "Q3_K_L", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K", "IQ2_XXS", "IQ2_XS", "Q2_K_S", "IQ3_XS",
              "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ3_M", "IQ2_S", "IQ2_M", "IQ4_XS", "IQ1_M", "BF16", None, None,
              None, "TQ1_0", "TQ2_0", "MXFP4_MOE", "NVFP4", "Q1_0"]  # fmt: skip


class InvalidDigest(ValueError):
    def __init__(self):
        super().__init__("invalid digest format")  # paths.go ErrInvalidDigestFormat


def manifests_path() -> str:
    path = os.path.join(envconfig.models(), "manifests")
    os.makedirs(path, 0o755, exist_ok=True)
    return path


def blobs_path(digest: str = "") -> str:
    if digest and not BLOB_DIGEST.match(digest):
        raise InvalidDigest()
    path = os.path.join(envconfig.models(), "blobs", digest.replace(":", "-"))
    os.makedirs(path if not digest else os.path.dirname(path), 0o755, exist_ok=True)
    return path


@dataclass
class Manifest:
    name: Name
    path: str
    raw: bytes
    mtime_ns: int
    data: dict = field(default_factory=dict)

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.raw).hexdigest()

    @property
    def config(self) -> dict:
        return self.data.get("config") or {}

    @property
    def layers(self) -> list[dict]:
        return self.data.get("layers") or []

    def size(self) -> int:
        return sum(int(layer.get("size", 0)) for layer in [*self.layers, self.config])


def parse_named(name: Name) -> Manifest:
    """ParseNamedManifest: FileNotFoundError when there is none; ValueError when it is not JSON."""
    if not name.is_fully_qualified():
        raise ValueError(f"unqualified name: {name}")
    path = os.path.join(manifests_path(), name.filepath())
    with open(path, "rb") as f:
        raw = f.read()
        mtime_ns = os.fstat(f.fileno()).st_mtime_ns
    return Manifest(name, path, raw, mtime_ns, json.loads(raw))


def all_manifests(continue_on_error: bool = True) -> dict[Name, Manifest]:
    root = manifests_path()
    found = {}
    for match in glob.glob(os.path.join(glob.escape(root), "*", "*", "*", "*")):
        if os.path.isdir(match):
            continue
        name = parse_name_from_filepath(os.path.relpath(match, root))
        try:
            if not name.is_valid():
                raise ValueError(f"bad manifest name {match}")
            found[name] = parse_named(name)
        except (OSError, ValueError):
            if not continue_on_error:
                raise
    return found


def existing_name(n: Name) -> Name:
    """routes.go getExistingName: each part spelled as an existing manifest spells it (case-insensitively)."""
    parts = {"host": n.host, "namespace": n.namespace, "model": n.model, "tag": n.tag}
    for e in all_manifests():
        for key in parts:
            if getattr(e, key).lower() == parts[key].lower():
                parts[key] = getattr(e, key)
    return Name(scheme=n.scheme, **parts)


def prune_directory(path: str) -> None:
    """PruneDirectory: empty directories removed, bottom up, the top one too."""
    if not os.path.isdir(path) or os.path.islink(path):
        return
    for entry in os.listdir(path):
        prune_directory(os.path.join(path, entry))
    if not os.listdir(path):
        os.rmdir(path)


def fix_blobs(blobs: str) -> None:
    for root, _, files in os.walk(blobs):
        for name in files:
            kind, sep, digest = name.partition(":")
            if sep and kind == "sha256":
                os.rename(os.path.join(root, name), os.path.join(root, f"sha256-{digest}"))


def prune_layers() -> None:
    """PruneLayers: blobs older than the grace period that no manifest names go; so do partial downloads."""
    blobs = blobs_path()
    unused = set()
    for entry in os.scandir(blobs):
        if entry.is_dir() or time.time() - entry.stat().st_mtime < LAYER_PRUNE_GRACE_SECONDS:
            continue
        digest = entry.name.replace("-", ":")
        if not BLOB_DIGEST.match(digest):
            os.remove(entry.path)
            continue
        unused.add(digest)
    delete_unused_layers(unused)


def delete_unused_layers(digests: set[str]) -> None:
    for m in all_manifests().values():
        for layer in [*m.layers, m.config]:
            digests.discard(layer.get("digest", ""))
    for digest in digests:
        try:
            os.remove(blobs_path(digest))
        except (OSError, ValueError):
            continue


def remove(m: Manifest) -> None:
    """Manifest.Remove then RemoveLayers, as DeleteHandler calls them."""
    os.remove(m.path)
    prune_directory(manifests_path())
    in_use = {layer.get("digest") for other in all_manifests().values() for layer in [*other.layers, other.config]}
    for layer in [*m.layers, m.config]:
        digest = layer.get("digest", "")
        if digest and digest not in in_use:
            with contextlib.suppress(FileNotFoundError):
                os.remove(blobs_path(digest))


# GGUF value types (fs/gguf, model_list_cache.go modelListGGUFType*): struct format, or None for string/array
_GGUF_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
GGUF_MAGIC = b"GGUF"


def read_gguf_kv(path: str, verbose: bool = False) -> dict:
    """The key-values of a GGUF header (getModelData: unless verbose, arrays longer than 5 come back empty).
    ValueError("invalid file magic") for anything else, as fs/ggml does."""
    with open(path, "rb") as f:
        if f.read(4) != GGUF_MAGIC:
            raise ValueError("invalid file magic")
        (version,) = struct.unpack("<I", f.read(4))
        count = "<II" if version == 1 else "<QQ"
        _, n_kv = struct.unpack(count, f.read(struct.calcsize(count)))

        def string() -> str:
            (length,) = struct.unpack("<Q", f.read(8))
            data = f.read(length)
            return (data[:-1] if version == 1 and data.endswith(b"\0") else data).decode("utf-8", "replace")

        def value(kind: int):
            if kind in _GGUF_SCALARS:
                fmt = "<" + _GGUF_SCALARS[kind]
                return struct.unpack(fmt, f.read(struct.calcsize(fmt)))[0]
            if kind == 8:
                return string()
            if kind == 9:
                item_kind, n = struct.unpack("<IQ", f.read(12))
                items = [value(item_kind) for _ in range(n)]
                return items if verbose or len(items) <= 5 else []
            raise ValueError(f"unsupported gguf value type {kind}")

        kv = {}
        for _ in range(n_kv):
            key = string()
            (kind,) = struct.unpack("<I", f.read(4))
            kv[key] = value(kind)
        return kv


def file_type_name(value: int) -> str:
    known = FILE_TYPES[value] if 0 <= value < len(FILE_TYPES) else None
    return known or "unknown"


def read_blob(digest: str) -> bytes:
    with open(blobs_path(digest), "rb") as f:
        return f.read()


@dataclass
class Model:
    """What server/images.go GetModel reads out of a manifest and its blobs."""

    name: Name
    manifest: Manifest
    config: dict
    model_path: str = ""
    parent_model: str = ""
    template: str = DEFAULT_TEMPLATE
    system: str = ""
    options: dict = field(default_factory=dict)
    licenses: list = field(default_factory=list)
    projectors: int = 0

    @property
    def short_name(self) -> str:
        return self.name.display_shortest()

    def gguf(self) -> dict:
        return read_gguf_kv(self.model_path) if self.model_path else {}

    def details(self) -> dict:
        """api.ModelDetails as GetModelInfo and PsHandler fill it (families null when the config has none)."""
        return {"parent_model": self.parent_model, "format": self.config.get("model_format", ""),
                "family": self.config.get("model_family", ""), "families": self.config.get("model_families"),
                "parameter_size": self.config.get("model_type", ""),
                "quantization_level": self.config.get("file_type", "")}  # fmt: skip

    def capabilities(self) -> list[str]:
        """model_list_cache.go buildModelListSummary: the GGUF header, the config's, the template's, projectors.
        The template is searched for .Tools and .Suffix rather than parsed as a Go template."""
        caps = []
        try:
            kv = self.gguf()
        except (OSError, ValueError, struct.error):
            kv = None
        if kv is not None and self.model_path:
            arch = kv.get("general.architecture", "")
            if f"{arch}.vision.block_count" in kv:
                caps.append("vision")
            if f"{arch}.audio.block_count" in kv:
                caps.append("audio")
            caps.append("embedding" if f"{arch}.pooling_type" in kv else "completion")
        caps += [c for c in self.config.get("capabilities") or [] if c not in caps]
        template_vars = {v.lower() for v in re.findall(r"\.([A-Za-z_]\w*)", self.template)}
        for var, cap in (("tools", "tools"), ("suffix", "insert")):
            if var in template_vars and cap not in caps:
                caps.append(cap)
        if self.projectors and "vision" not in caps:
            caps.append("vision")
        return caps

    def train_context(self) -> int:
        try:
            kv = self.gguf()
        except (OSError, ValueError, struct.error):
            return 0
        value = kv.get(f"{kv.get('general.architecture', '')}.context_length", 0)
        return value if isinstance(value, int) else 0

    def summary(self) -> dict:
        """api.ListModelResponse, as /api/tags answers it."""
        details = {**self.details(), "families": self.config.get("model_families")}
        try:
            kv = self.gguf()
        except (OSError, ValueError, struct.error):
            kv = {}
        arch = kv.get("general.architecture", "")
        if context := self.config.get("context_length") or kv.get(f"{arch}.context_length"):
            details["context_length"] = context
        if embedding := self.config.get("embedding_length") or kv.get(f"{arch}.embedding_length"):
            details["embedding_length"] = embedding
        if details["quantization_level"] in ("", "unknown") and "general.file_type" in kv:
            details["quantization_level"] = file_type_name(kv["general.file_type"])
        entry = {"name": self.short_name, "model": self.short_name}
        entry |= {"modified_at": _mtime(self.manifest), "size": self.manifest.size(), "digest": self.manifest.digest,
                  "details": details}  # fmt: skip
        if caps := self.capabilities():
            entry["capabilities"] = caps
        return entry


def _mtime(m: Manifest) -> str:
    return format_time(m.mtime_ns)


def get_model(name: Name) -> Model:
    """GetModel: FileNotFoundError when the manifest or one of its blobs is missing."""
    m = parse_named(name)
    config = json.loads(read_blob(m.config["digest"])) if m.config.get("digest") else {}
    model = Model(name, m, config)
    for layer in m.layers:
        media, digest = layer.get("mediaType", ""), layer.get("digest", "")
        if media == MEDIA_MODEL:
            model.model_path, model.parent_model = blobs_path(digest), layer.get("from", "")
        elif media == "application/vnd.ollama.image.projector":
            model.projectors += 1
        elif media in ("application/vnd.ollama.image.prompt", "application/vnd.ollama.image.template"):
            model.template = read_blob(digest).decode()
        elif media == "application/vnd.ollama.image.system":
            model.system = read_blob(digest).decode()
        elif media == "application/vnd.ollama.image.params":
            model.options = json.loads(read_blob(digest))
        elif media == "application/vnd.ollama.image.license":
            model.licenses.append(read_blob(digest).decode())
    return model


def list_models() -> list[dict]:
    """modelListCache.List: every manifest that reads, most recently modified first (by the second)."""
    models = []
    for name, m in all_manifests().items():
        try:
            models.append((m.mtime_ns // 1_000_000_000, get_model(name).summary()))
        except (OSError, ValueError, KeyError):
            continue
    models.sort(key=lambda pair: -pair[0])
    return [summary for _, summary in models]
