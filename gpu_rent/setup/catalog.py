"""Which flavors and images of a cloud suit a GPU rental: pure classification, no cloud calls.

Input is shaped like the API's JSON: a flavor is a mapping with id, name, vcpus, ram (MB) and extra_specs
(Nova 2.61+); an image is a mapping with id, name, status and its other properties at the top level (Glance v2).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# GPU model names as clouds put them in flavor names (g1.a100.1, gpu.l4.1, 1xRTX4090)
_MODEL_TOKENS = {
    "a2", "a10", "a16", "a30", "a40", "a100", "a800", "h100", "h200", "h800", "l4", "l40", "l40s",
    "v100", "t4", "p4", "p40", "p100", "k80", "b200", "mi210", "mi250", "mi300x",
}  # fmt: skip
_RTX = re.compile(r"^(rtx|gtx|quadro)\w*$")
_TIMES = re.compile(r"^(?:(\d+)x)?(.*)$")
_COUNT_IN_NAME = re.compile(r"(\d+)\s*x?\s*gpus?\b|\bgpus?\s*x?\s*(\d+)\b", re.IGNORECASE)
_IMAGE_HINTS = ("gpu", "nvidia", "cuda")
# properties the image service fills in itself: they repeat the name (owner_specified.openstack.object), not a hint
_SERVICE_PROPERTIES = ("owner_specified.", "stores", "os_hash", "checksum", "direct_url", "locations")


@dataclass(frozen=True)
class GpuFlavor:
    id: str
    name: str
    vcpus: int
    ram_mb: int
    gpu_count: int | None = None
    gpu_model: str | None = None

    @property
    def label(self) -> str:
        """What the user types: the name, which on Selectel is the numeric id itself."""
        return self.name or self.id

    def describe(self) -> str:
        gpu = f"{self.gpu_count}× " if self.gpu_count else ""
        gpu += self.gpu_model or ("GPU" if gpu else "")
        return f"{self.label} ({', '.join(p for p in (gpu, f'{self.vcpus} vCPU', f'{self.ram_mb // 1024} GB') if p)})"


def _int(value: Any) -> int | None:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def _alias_gpu(value: str) -> tuple[int | None, str | None]:
    """pci_passthrough:alias such as "GPU-L4:1" or "a100:2,t4:1": the first alias's model and the total count."""
    count, model = 0, None
    for part in value.split(","):
        alias, _, number = part.strip().partition(":")
        if not alias:
            continue
        model = model or re.sub(r"^(gpu|nvidia)[-_]?", "", alias, flags=re.IGNORECASE) or alias
        count += _int(number) or 1
    return (count or None), model


def _gpu_word(key: str) -> bool:
    return "gpu" in key or "nvidia" in key


def _gpu_trait(key: str, value: Any) -> bool:
    return key.startswith("trait:custom_") and _gpu_word(key) and str(value).lower() == "required"


def _spec_gpu(specs: Mapping[str, Any]) -> tuple[bool, int | None, str | None]:
    """(is a GPU flavor, count, model) from extra specs; the only place a Selectel flavor tells its GPU."""
    found, count, model = False, _int(specs.get("gpu:count")), specs.get("gpu:model") or None
    for key, value in specs.items():
        low = key.lower()
        if low == "pci_passthrough:alias":
            found = True
            alias_count, alias_model = _alias_gpu(str(value))
            count, model = count or alias_count, model or alias_model
        elif low in ("resources:vgpu", "resources:pgpu") or (low.startswith("resources:custom_") and _gpu_word(low)):
            found = True
            count = count or _int(value)
            # resources:CUSTOM_GPU_A100 names the model; resources:VGPU does not
            tail = key.split(":", 1)[1].upper().removeprefix("CUSTOM_").removeprefix("GPU_").removesuffix("_GPU")
            model = model or (tail if low.startswith("resources:custom_") and tail not in ("", "GPU") else None)
        elif _gpu_trait(low, value) or low.startswith("gpu:"):
            found = True
    return found or bool(count), count, model


def _name_gpu(name: str) -> tuple[bool, int | None, str | None]:
    tokens = [t for t in re.split(r"[^a-z0-9]+", name.lower()) if t]
    count = None
    model = None
    for token in tokens:
        times, bare = _TIMES.match(token).groups()  # "1xrtx4090": one RTX 4090
        if bare in _MODEL_TOKENS or _RTX.match(bare):
            model, count = bare.upper(), _int(times)
            break
    hinted = model is not None or any("gpu" in t for t in tokens)
    match = _COUNT_IN_NAME.search(name)
    return hinted, count or (_int(match[1] or match[2]) if match else None), model


def gpu_flavor(flavor: Mapping[str, Any]) -> GpuFlavor | None:
    """The flavor as a GpuFlavor when its extra specs or its name say it has a GPU; None otherwise."""
    name = str(flavor.get("name") or "")
    by_spec, spec_count, spec_model = _spec_gpu(flavor.get("extra_specs") or {})
    by_name, name_count, name_model = _name_gpu(name)
    if not (by_spec or by_name):
        return None  # a numeric Selectel id with no GPU spec is a plain CPU flavor
    return GpuFlavor(
        id=str(flavor.get("id") or name),
        name=name,
        vcpus=_int(flavor.get("vcpus")) or 0,
        ram_mb=_int(flavor.get("ram")) or 0,
        gpu_count=spec_count or name_count,
        gpu_model=spec_model or name_model,
    )


def gpu_flavors(flavors: Iterable[Mapping[str, Any]]) -> list[GpuFlavor]:
    """The GPU flavors, smallest first (GPU count, then RAM), so the cheap choice is named first."""
    found = [f for f in (gpu_flavor(x) for x in flavors) if f is not None]
    return sorted(found, key=lambda f: (f.gpu_count or 1, f.ram_mb, f.vcpus, f.label))


def find_flavor(flavors: Iterable[GpuFlavor], wanted: str) -> GpuFlavor | None:
    """By name first, then by id, as Nova's own lookup does."""
    flavors = list(flavors)
    return next((f for f in flavors if f.name == wanted), None) or next((f for f in flavors if f.id == wanted), None)


def _image_hinted(image: Mapping[str, Any]) -> bool:
    if any(h in str(image.get("name") or "").lower() for h in _IMAGE_HINTS):
        return True
    for key, value in image.items():
        if key in ("id", "name") or key.startswith(_SERVICE_PROPERTIES):
            continue
        text = f"{key}={value}".lower() if isinstance(value, str | bool | int) else key.lower()
        if any(h in text for h in _IMAGE_HINTS):
            return True
    return False


def usable_images(images: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Active images, GPU-looking ones first (name or a property says gpu, nvidia or cuda), each group by name."""
    active = [i for i in images if str(i.get("status", "active")).lower() == "active"]
    return sorted(active, key=lambda i: (not _image_hinted(i), str(i.get("name") or i.get("id"))))


def find_image(images: Iterable[Mapping[str, Any]], wanted: str) -> Mapping[str, Any] | None:
    images = list(images)
    return next((i for i in images if i.get("name") == wanted), None) or next(
        (i for i in images if i.get("id") == wanted), None
    )


def image_label(image: Mapping[str, Any]) -> str:
    return str(image.get("name") or image.get("id"))
