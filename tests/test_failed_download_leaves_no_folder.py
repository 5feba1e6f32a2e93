"""Nothing left where it does not belong: no empty cache folders after a failed download."""

from __future__ import annotations


def test_a_failed_paragramcf_download_leaves_no_empty_folder_in_the_cache(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """Offline, the download fails; the folders made for it go too (issue 21: ~/.cache/textattack/word_embeddings)."""
    import urllib.request

    import pytest

    from promptrobust.attacks import embeddings
    from promptrobust.attacks.errors import AttackResourceError

    monkeypatch.setenv("TA_CACHE_DIR", str(tmp_path / "textattack"))

    def offline(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise OSError("network is unreachable")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    monkeypatch.setattr(embeddings, "_DOWNLOAD_FAILED", [])
    with pytest.raises(AttackResourceError, match="cannot download paragramcf"):
        embeddings.download_paragramcf()
    assert not (tmp_path / "textattack").exists()
    (tmp_path / "textattack").mkdir()  # a cache folder that was there before stays
    monkeypatch.setattr(embeddings, "_DOWNLOAD_FAILED", [])
    with pytest.raises(AttackResourceError):
        embeddings.download_paragramcf()
    assert (tmp_path / "textattack").is_dir() and not (tmp_path / "textattack" / "word_embeddings").exists()
