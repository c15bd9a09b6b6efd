"""A little GGUF v3 file for the llama.cpp stand-in (whose loader, in llama-server, reads its header back).

Byte layout as ggml's docs/gguf.md (and gguf-py's GGUFWriter) give it, little-endian throughout:
  magic "GGUF" (0x46554747 as uint32), uint32 version (3), uint64 tensor_count, uint64 metadata_kv_count,
  then each KV: gguf_string key (uint64 length + UTF-8 bytes), uint32 value type, the value.
Value types used here (gguf.md gguf_metadata_value_type): UINT32 = 4, STRING = 8, UINT64 = 10.
No tensors: the tensor-info list is empty and the data section after the header (aligned to
general.alignment, default 32) holds nothing; the file is padded with zeros to the size asked for (a sparse file).

    python3 gguf.py PATH SIZE [--name NAME]     prints the file's sha256
"""

import argparse
import hashlib
import struct
from pathlib import Path

MAGIC = b"GGUF"
VERSION = 3
TYPE_UINT32, TYPE_STRING, TYPE_UINT64 = 4, 8, 10
CONTEXT_LENGTH = 2048  # llama.context_length: the "trained" context the stand-in's slots are capped at


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def header(name: str = "tiny", context_length: int = CONTEXT_LENGTH) -> bytes:
    kvs = [
        ("general.architecture", TYPE_STRING, _string("llama")),
        ("general.name", TYPE_STRING, _string(name)),
        ("llama.context_length", TYPE_UINT32, struct.pack("<I", context_length)),
    ]
    out = bytearray(MAGIC + struct.pack("<IQQ", VERSION, 0, len(kvs)))
    for key, kind, value in kvs:
        out += _string(key) + struct.pack("<I", kind) + value
    return bytes(out)


def write_model(path: Path, size: int, name: str = "tiny") -> str:
    """Writes a GGUF v3 file of `size` bytes (at least its header) at `path`; returns its sha256 hex."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = header(name)
    with path.open("wb") as f:
        f.write(data)
        f.truncate(max(size, len(data)))  # zeros, sparse where the file system can
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path")
    parser.add_argument("size", type=int)
    parser.add_argument("--name", default="tiny")
    args = parser.parse_args()
    print(write_model(Path(args.path), args.size, args.name))


if __name__ == "__main__":
    main()
