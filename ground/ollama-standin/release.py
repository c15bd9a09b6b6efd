"""The stand-in's release, in the shape upstream publishes a Linux release of v0.32.15.

.github/workflows/release.yaml: each Linux bundle is `tar c -C dist/linux-<arch> -T <list> --owner 0 --group 0 |
zstd -19 -T0 > ollama-linux-<arch>.tar.zst`, its members bin/ollama* and lib/ollama/... (paths relative, no
leading ./); the release's sha256sum.txt is `find . -type f -not -name sha256sum.txt | xargs sha256sum` run in dist/,
so each line reads "<hex>  ./<file>". scripts/install.sh fetches ollama-linux-<arch>.tar.zst (the .tgz only when
no .tar.zst exists, for releases before v0.14.0) and runs `zstd -d | tar -xf - -C /usr/local`.

Python has no zstd compressor before 3.14: the frame is written with raw (stored) blocks, RFC 8878 3.1.1, which
every zstd decoder reads; the archive is only not smaller than its tar. Member times are the tag's commit time so
that the same sources give the same archive and checksum.

    python3 release.py OUT_DIR [--arch amd64]
"""

import argparse
import hashlib
import io
import struct
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
TAG_TIME = 1787179216  # b7871fc0 (v0.32.15), 2026-08-19 18:40:16 -0400
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
ZSTD_BLOCK = 128 * 1024  # Block_Maximum_Size; the window below is that size


def zstd_frame(data: bytes) -> bytes:
    """One zstd frame: Frame_Content_Size on 8 bytes, a 128 KiB window, no checksum, raw blocks."""
    out = bytearray(ZSTD_MAGIC)
    out.append(0b11000000)  # Frame_Header_Descriptor: FCS flag 3 (8 bytes), not single segment, no dictionary
    out.append(7 << 3)  # Window_Descriptor: exponent 7, mantissa 0: 2^(10+7) bytes
    out += struct.pack("<Q", len(data))
    offset = 0
    while True:
        block = data[offset : offset + ZSTD_BLOCK]
        offset += len(block)
        last = offset >= len(data)
        out += (int(last) | (0 << 1) | (len(block) << 3)).to_bytes(3, "little")  # Block_Type 0: Raw_Block
        out += block
        if last:
            return bytes(out)


def _members() -> list[tuple[str, Path]]:
    """bin/ollama, then lib/ollama/ with the stand-in's package (no byte code)."""
    found = [("bin/ollama", HERE / "bin" / "ollama")]
    package = HERE / "lib" / "ollama" / "ollama_standin"
    found.append(("lib/ollama/ollama_standin", package))
    found += [(f"lib/ollama/ollama_standin/{p.name}", p) for p in sorted(package.glob("*.py"))]
    return found


def build_tar() -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, path in _members():
            info = tarfile.TarInfo(name)
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mtime = TAG_TIME
            if path.is_dir():
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
                continue
            data = path.read_bytes()
            info.size, info.mode = len(data), 0o755 if name.startswith("bin/") else 0o644
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def build_release(out_dir: str | Path, arch: str = "amd64") -> Path:
    """Writes ollama-linux-<arch>.tar.zst and sha256sum.txt into out_dir; returns the archive's path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    archive = out / f"ollama-linux-{arch}.tar.zst"
    archive.write_bytes(zstd_frame(build_tar()))
    sums = [f"{hashlib.sha256(p.read_bytes()).hexdigest()}  ./{p.name}\n"
            for p in sorted(out.iterdir()) if p.is_file() and p.name != "sha256sum.txt"]  # fmt: skip
    (out / "sha256sum.txt").write_text("".join(sums))
    return archive


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--arch", default="amd64", choices=["amd64", "arm64"])
    args = parser.parse_args()
    sys.stdout.write(f"{build_release(args.out_dir, args.arch)}\n")


if __name__ == "__main__":
    main()
