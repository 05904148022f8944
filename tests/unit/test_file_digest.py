"""sha256_file (storage/digest.py) hashes every byte of a file, however many blocks it
spans: what manifests record and what `verify` compares. Files of several MiB that differ
only after the first MiB (one read block) must get other digests."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from storage.digest import sha256_file
from storage.local_store import check_files

MIB = 1 << 20


@pytest.fixture
def big_files(tmp_path):
    """Two 5 MiB + 3-byte files, equal but for one byte at 4 MiB + 17."""
    data = np.random.default_rng(0).integers(0, 256, 5 * MIB + 3, dtype=np.uint8).tobytes()
    changed = bytearray(data)
    changed[4 * MIB + 17] ^= 0xFF
    (tmp_path / "a.bin").write_bytes(data)
    (tmp_path / "b.bin").write_bytes(bytes(changed))
    return tmp_path, data, bytes(changed)


def test_the_digest_covers_every_byte_of_a_file_of_several_blocks(big_files):
    directory, data, changed = big_files
    assert sha256_file(directory / "a.bin") == hashlib.sha256(data).hexdigest()
    assert sha256_file(directory / "b.bin") == hashlib.sha256(changed).hexdigest()
    assert sha256_file(directory / "a.bin") != sha256_file(directory / "b.bin")


@pytest.mark.parametrize("size", [0, 1, MIB - 1, MIB, MIB + 1, 2 * MIB])
def test_sizes_around_the_block_size(tmp_path, size):
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    (tmp_path / "f").write_bytes(data)
    assert sha256_file(tmp_path / "f") == hashlib.sha256(data).hexdigest()


def test_verify_sees_a_byte_changed_after_the_first_mib(big_files):
    # What `pretrain verify` runs (check_files, deep): same size, other bytes at 4 MiB.
    directory, data, _ = big_files
    files = [{"path": "b.bin", "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}]
    (damage,) = check_files(directory, files, deep=True)
    assert damage.path == "b.bin" and "other bytes" in damage.problem
    assert check_files(directory, [{**files[0], "path": "a.bin"}], deep=True) == []
