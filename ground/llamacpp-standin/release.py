"""The stand-in's release, in the shape upstream publishes an Ubuntu Vulkan build of b10621.

.github/workflows/release.yml, job ubuntu-vulkan: `cp LICENSE ./build/bin/` then
`tar -czvf llama-<tag>-bin-ubuntu-vulkan-<arch>.tar.gz --transform "s,^\\.,llama-<tag>," -C ./build/bin .`: the
members are the directory `llama-<tag>/` (tar's `.`) and `llama-<tag>/<file>` for llama-server, the other tools,
the shared libraries (libggml*.so, libllama.so, ...) and LICENSE. The stand-in's archive holds the directory,
llama-server (0755) and LICENSE (0644): no other tool and no library, which it does not need.

Upstream publishes no checksum file; the release page's assets carry one each in GitHub's REST API
(`"digest": "sha256:<hex>"` per asset of GET /repos/ggml-org/llama.cpp/releases/tags/<tag>). The ground's mirror
writes `sha256sum.txt` beside the archive, one `<hex>  <archive name>` line (sha256sum's format): that file is
ours, not upstream's. Member times are fixed, owner 0, so the same sources give the same archive and checksum.

    python3 release.py OUT_DIR [--arch x64]
"""

import argparse
import gzip
import hashlib
import io
import sys
import tarfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
TAG = "b10621"
TAG_TIME = 1787616000  # 2026-08-25 00:00:00 UTC, the day b10621 was reported current; fixed for reproducibility
# upstream LICENSE: the MIT text; the copyright line as the stand-in knows it (not checked at b10621)
LICENSE = """MIT License

Copyright (c) 2023-2024 The ggml authors

Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, including without limitation the rights
to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
"""


def archive_name(arch: str = "x64") -> str:
    return f"llama-{TAG}-bin-ubuntu-vulkan-{arch}.tar.gz"


def build_tar() -> bytes:
    top = f"llama-{TAG}"
    members = [(f"{top}/llama-server", (HERE / "llama-server").read_bytes(), 0o755),
               (f"{top}/LICENSE", LICENSE.encode(), 0o644)]  # fmt: skip
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        info = tarfile.TarInfo(top)
        info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, TAG_TIME
        info.uname = info.gname = "root"
        tar.addfile(info)
        for name, data, mode in members:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, TAG_TIME
            info.uname = info.gname = "root"
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def build_release(out_dir: str | Path, arch: str = "x64") -> Path:
    """Writes llama-<TAG>-bin-ubuntu-vulkan-<arch>.tar.gz and sha256sum.txt into out_dir; returns the archive."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    archive = out / archive_name(arch)
    raw = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=TAG_TIME) as gz:
        gz.write(build_tar())
    archive.write_bytes(raw.getvalue())
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    (out / "sha256sum.txt").write_text(f"{digest}  {archive.name}\n")
    return archive


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--arch", default="x64", choices=["x64", "arm64"])
    args = parser.parse_args()
    sys.stdout.write(f"{build_release(args.out_dir, args.arch)}\n")


if __name__ == "__main__":
    main()
