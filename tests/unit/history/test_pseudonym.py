"""Pseudonyms (keyed BLAKE2b-128), where the key comes from, and what Redis keys reveal."""

from __future__ import annotations

import hashlib
import re
import stat
from fnmatch import fnmatchcase
from pathlib import Path

import numpy as np
import pytest

from stream_release.config import HistorySettings, load_settings
from stream_release.errors import ConfigError
from stream_release.history import Pseudonymizer, RedisKeys, load_key
from stream_release.history.pseudonym import (
    DEFAULT_KEY_FILE,
    MIN_KEY_BYTES,
    generate_key,
    key_strength,
    resolve_key,
)

KEY = b"k" * 32
OTHER_KEY = b"o" * 32
KNOWN_PSEUDONYMS = {
    "alice": "01136407e7d568f388d061d67a08841c",
    "bob": "6f820f172bebc0b5d42b9a08798e3539",
    "person-000123": "589b1adadd926ee27572f69cc02bf6de",
    "Zoë Ünïcode": "5439ca2b9bfbedecc5b57f3777d2dfcc",
    "": "53ca8e54b7edcd85c46e1a2915abd2f0",
    "alice ": "fec2ed46e1563e35d5f24f5d5a0e58e2",
}
"""Known answers: the pseudonym (hex) of each id under :data:`KEY`, i.e. BLAKE2b with a 16-byte
digest keyed with ``KEY`` of the UTF-8 id (RFC 7693), computed once and written here: a wrong
implementation cannot agree with literals."""
IDS = list(KNOWN_PSEUDONYMS)
DIGESTS_2000_SHA256 = "387d6ba9b454edd895c652643397578ff6f84e7a3b2e769aea8a1d8738e0f004"
"""Known answer: SHA-256 of the 2000 pseudonyms of ``id-0`` .. ``id-1999`` under :data:`KEY`,
concatenated in order (8 of them end with a NUL byte, e.g. ``id-111``)."""
KEY_CHECK = "301fece400e53753b99ad51b067c96cd"
"""Known answer: the key check of :data:`KEY`, BLAKE2b-128 keyed with ``KEY`` of the message
``stream-release pseudonymisation key check v1`` with personalisation ``sr-key-check``."""


# -- Pseudonymizer ---------------------------------------------------------------------------


def test_pseudonyms_are_keyed_blake2b_of_the_utf8_id() -> None:
    out = Pseudonymizer(KEY).pseudonyms(IDS)
    assert out.dtype == np.dtype("S16")
    assert out.shape == (len(IDS),)
    assert [out[i : i + 1].tobytes().hex() for i in range(len(IDS))] == [
        KNOWN_PSEUDONYMS[i] for i in IDS
    ]


def test_pseudonyms_are_deterministic_for_a_key() -> None:
    first = Pseudonymizer(KEY).pseudonyms(IDS)
    again = Pseudonymizer(bytes(KEY)).pseudonyms(list(IDS))
    np.testing.assert_array_equal(first, again)


def test_different_keys_give_different_pseudonyms() -> None:
    mine = Pseudonymizer(KEY).pseudonyms(IDS)
    theirs = Pseudonymizer(OTHER_KEY).pseudonyms(IDS)
    assert not np.any(mine == theirs)


def test_every_pseudonym_has_16_bytes() -> None:
    pseudonymizer = Pseudonymizer(KEY)
    out = pseudonymizer.pseudonyms([f"id-{i}" for i in range(2000)])
    assert out.nbytes == 16 * 2000
    assert len(set(out.tolist())) == 2000
    # one in 256 digests ends with a NUL byte, which numpy strips from a single element:
    # pseudonym() still returns the full 16 bytes
    assert all(len(pseudonymizer.pseudonym(f"id-{i}")) == 16 for i in range(2000))
    assert pseudonymizer.pseudonym("alice").hex() == KNOWN_PSEUDONYMS["alice"]


def test_digests_keep_trailing_nul_bytes() -> None:
    ids = [f"id-{i}" for i in range(2000)]
    digests = Pseudonymizer(KEY).digests(ids)
    assert len(digests) == len(ids) and all(len(d) == 16 for d in digests)
    assert hashlib.sha256(b"".join(digests)).hexdigest() == DIGESTS_2000_SHA256
    assert any(d.endswith(b"\x00") for d in digests)  # the case numpy's tolist() would strip


@pytest.mark.parametrize(
    "ids",
    [IDS, tuple(IDS), np.array(IDS, dtype=object), np.array(IDS)],
    ids=["list", "tuple", "object-array", "unicode-array"],
)
def test_pseudonyms_accept_sequences_and_arrays(ids: object) -> None:
    expected = Pseudonymizer(KEY).pseudonyms(IDS)
    np.testing.assert_array_equal(Pseudonymizer(KEY).pseudonyms(ids), expected)  # type: ignore[arg-type]


def test_no_ids_give_an_empty_array() -> None:
    out = Pseudonymizer(KEY).pseudonyms([])
    assert out.shape == (0,)
    assert out.dtype == np.dtype("S16")


def test_a_non_str_id_is_refused_without_showing_it() -> None:
    with pytest.raises(TypeError, match=r"ids\[2\] is a int") as info:
        Pseudonymizer(KEY).pseudonyms(["alice", "bob", 424242, "carol"])  # type: ignore[list-item]
    assert "424242" not in str(info.value)
    assert "alice" not in str(info.value)
    with pytest.raises(TypeError, match="single str"):
        Pseudonymizer(KEY).pseudonyms("alice")


def test_the_key_is_never_shown() -> None:
    pseudonymizer = Pseudonymizer(KEY)
    assert "kkkk" not in repr(pseudonymizer)
    assert "kkkk" not in str(pseudonymizer)


def test_short_and_non_bytes_keys_are_refused() -> None:
    with pytest.raises(ConfigError, match="at least 16"):
        Pseudonymizer(b"\x01" * (MIN_KEY_BYTES - 1))
    with pytest.raises(TypeError, match="bytes"):
        Pseudonymizer("k" * 32)  # type: ignore[arg-type]
    Pseudonymizer(b"\x01" * MIN_KEY_BYTES)


@pytest.mark.parametrize(
    ("material", "strength"),
    [
        (b"0123456789abcdef", 8),  # 16 hex digits: 8 bytes, not 16
        (b"0123456789ABCDEF" * 2, 16),
        (b"00" * 32, 32),  # what keygen prints
        (b"0123456789abcde", 15),  # odd length: not hex; not base64 either (15 % 4): raw
        (b"k" * 32, 24),  # base64 text: 24 decoded bytes
        (b"a-b_" * 8, 24),  # URL-safe base64
        (b"YWJjZA==", 4),  # padded base64
        (b"correct horse battery staple", 28),  # a passphrase: its bytes
        (bytes(range(20)), 20),  # binary
    ],
)
def test_key_strength_counts_decoded_bytes(material: bytes, strength: int) -> None:
    assert key_strength(material) == strength


def test_a_hex_key_of_16_digits_is_refused_as_8_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SR_HISTORY_KEY", "0123456789abcdef")  # 16 characters, 8 bytes
    settings = load_settings(schema={"qid": ["age"]})
    with pytest.raises(ConfigError, match="holds 8 bytes of secret"):
        load_key(settings.history)


def test_generated_keys_are_32_fresh_bytes_in_hex() -> None:
    keys = {generate_key() for _ in range(50)}
    assert len(keys) == 50
    for key in keys:
        assert re.fullmatch(r"[0-9a-f]{64}", key)
        assert key_strength(key.encode()) == 32
        Pseudonymizer(key.encode())


def test_keygen_prints_one_key(capsys: pytest.CaptureFixture[str]) -> None:
    from stream_release.cli.main import main

    assert main(["keygen"]) == 0
    first = capsys.readouterr().out
    assert main(["keygen"]) == 0
    second = capsys.readouterr().out
    assert re.fullmatch(r"[0-9a-f]{64}\n", first) and first != second


def test_key_check_is_keyed_and_separated_from_pseudonyms_and_derived_keys() -> None:
    mine, theirs = Pseudonymizer(KEY), Pseudonymizer(OTHER_KEY)
    check = mine.key_check()
    assert len(check) == 16 and check == Pseudonymizer(bytes(KEY)).key_check()
    assert check != theirs.key_check()
    # known answer: BLAKE2b-128 of the fixed message, keyed, with its own personalisation
    assert check.hex() == KEY_CHECK
    message = b"stream-release pseudonymisation key check v1"
    assert check != mine.keyed_digest(message)
    assert check not in mine.derived_key("mechanism")


def test_keys_longer_than_64_bytes_are_hashed_down() -> None:
    long_key = bytes(range(100))
    out = Pseudonymizer(long_key).pseudonyms(IDS)
    np.testing.assert_array_equal(out, Pseudonymizer(bytes(range(100))).pseudonyms(IDS))
    # not a silent truncation to the first 64 bytes
    assert not np.any(out == Pseudonymizer(long_key[:64]).pseudonyms(IDS))
    assert not np.any(out == Pseudonymizer(long_key[:99] + b"\xff").pseudonyms(IDS))


# -- no id in a pseudonym or a Redis key -----------------------------------------------------


def test_raw_ids_never_appear_in_pseudonyms_or_redis_keys() -> None:
    ids = [f"patient-{i:06d}" for i in range(5000)] + ["sr", "ind", "0123456789abcdef"]
    out = Pseudonymizer(KEY).pseudonyms(ids)
    keys = RedisKeys("sr").individuals(out)
    for i, id_ in enumerate(ids):
        raw = id_.encode("utf-8")
        pseudonym = out[i : i + 1].tobytes()
        assert raw not in pseudonym
        if len(raw) >= 4 and id_ not in {"sr", "ind"}:
            assert raw not in keys[i]
            assert raw.hex().encode() not in keys[i]
    assert b"patient" not in b"".join(keys)


def test_individual_keys_carry_the_hex_pseudonym_in_a_hash_tag() -> None:
    keys = RedisKeys("svc")
    nul_tailed = np.frombuffer(b"\xab" * 15 + b"\x00" + b"\x00" * 16, dtype="S16")
    out = Pseudonymizer(KEY).pseudonyms(IDS)
    sample = np.concatenate([out, nul_tailed])
    vectorised = keys.individuals(sample)
    for i, key in enumerate(vectorised):
        exact = sample[i : i + 1].tobytes()
        assert key.decode() == keys.individual(exact) == keys.individual(sample[i])
        assert re.fullmatch(rb"svc:\{ind:[0-9a-f]{32}\}:h", key)
        assert key.decode() == f"svc:{{ind:{exact.hex()}}}:h"
    assert keys.individual(nul_tailed[0]).endswith("ab00}:h")


def test_other_key_names() -> None:
    keys = RedisKeys("sr")
    assert keys.sequence == "sr:seq"
    assert keys.values == "sr:values"
    assert keys.record(1) == "sr:release:00000001"
    assert keys.record(123456789) == "sr:release:123456789"
    assert RedisKeys("a*b").match == "a\\*b:*"
    with pytest.raises(ConfigError, match="braces"):
        RedisKeys("sr{x}")
    with pytest.raises(ConfigError, match="non-empty"):
        RedisKeys("")


def test_scan_patterns_cover_the_cluster_hash_tags_of_the_namespace() -> None:
    # fnmatch reads "*" and "[...]" as Redis' glob does; tests/integration/test_redis_cluster.py
    # runs the patterns through SCAN on a real cluster
    keys = RedisKeys("sr")
    assert keys.matches == ("sr:*", "{sr[:}]*")
    assert RedisKeys("a*b").matches == ("a\\*b:*", "{a\\*b[:}]*")
    ours = ["sr:seq", "sr:{ind:00ff}:h", "{sr}:seq", "{sr:0}:ind:00ff:h", "{sr:5}:x", "{sr:sub}:x"]
    others = ["sr2:seq", "{sr2}:seq", "{sr2:0}:x", "srx", "{s}:sr:x", "x:{sr}:seq", "{sr"]
    assert [n for n in ours if not any(fnmatchcase(n, p) for p in keys.matches)] == []
    assert [n for n in others if any(fnmatchcase(n, p) for p in keys.matches)] == []


# -- load_key --------------------------------------------------------------------------------


def test_key_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SR_HISTORY_KEY", "environment-secret-0123456789")
    settings = load_settings(schema={"qid": ["age"]})
    assert load_key(settings.history) == b"environment-secret-0123456789"


def test_key_setting_wins_over_the_key_file(tmp_path: Path) -> None:
    file = tmp_path / "key"
    file.write_bytes(b"file-secret-0123456789abcdef\n")
    settings = HistorySettings(key="setting-secret-0123456789", key_file=file)
    assert load_key(settings, default_dir=tmp_path) == b"setting-secret-0123456789"


def test_key_from_the_key_file_without_surrounding_whitespace(tmp_path: Path) -> None:
    file = tmp_path / "key"
    file.write_bytes(b"  file-secret-0123456789abcdef\n")
    assert load_key(HistorySettings(key_file=file)) == b"file-secret-0123456789abcdef"


def test_key_file_relative_to_the_config_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SR_HISTORY_KEY", raising=False)
    (tmp_path / "secret.key").write_text("0123456789abcdef0123456789abcdef\n")
    config = tmp_path / "config.toml"
    config.write_text('[schema]\nqid = ["age"]\n[history]\nkey_file = "secret.key"\n')
    settings = load_settings(config)
    assert load_key(settings.history) == b"0123456789abcdef0123456789abcdef"


def test_unreadable_key_file_is_a_config_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.key"
    with pytest.raises(ConfigError, match=r"history\.key_file = .*nope\.key.*cannot be read"):
        load_key(HistorySettings(key_file=missing), default_dir=tmp_path)
    assert not (tmp_path / DEFAULT_KEY_FILE).exists()


def test_default_key_is_created_once_with_mode_0600(tmp_path: Path) -> None:
    directory = tmp_path / "store" / "nested"
    first = load_key(HistorySettings(), default_dir=directory)
    path = directory / DEFAULT_KEY_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert re.fullmatch(rb"[0-9a-f]{64}", first)
    assert len(bytes.fromhex(first.decode())) == 32
    assert load_key(HistorySettings(), default_dir=directory) == first
    assert [p.name for p in directory.iterdir()] == [DEFAULT_KEY_FILE]
    other = load_key(HistorySettings(), default_dir=tmp_path / "elsewhere")
    assert other != first


def test_missing_key_is_a_one_line_config_error() -> None:
    with pytest.raises(ConfigError) as info:
        load_key(HistorySettings(), default_dir=None)
    message = str(info.value)
    assert "\n" not in message
    assert "history.key_file" in message
    assert "SR_HISTORY_KEY" in message


@pytest.mark.parametrize("where", ["setting", "file", "default-file"])
def test_short_keys_are_refused(tmp_path: Path, where: str) -> None:
    short = "tooshort-123"
    if where == "setting":
        settings = HistorySettings(key=short)
    elif where == "file":
        (tmp_path / "k").write_text(short + "\n")
        settings = HistorySettings(key_file=tmp_path / "k")
    else:
        (tmp_path / DEFAULT_KEY_FILE).write_text(short)
        settings = HistorySettings()
    with pytest.raises(ConfigError, match=r"holds 9 bytes of secret \(12 characters\)") as info:
        load_key(settings, default_dir=tmp_path)
    assert short not in str(info.value)
    with pytest.raises(ConfigError, match="holds 0 bytes"):
        load_key(HistorySettings(key="   "))


def test_resolving_a_new_default_key_writes_nothing(tmp_path: Path) -> None:
    directory = tmp_path / "store"
    material = resolve_key(HistorySettings(), default_dir=directory)
    assert material.new_file == directory / DEFAULT_KEY_FILE
    assert key_strength(material.key) == 32
    assert not directory.exists()
    assert "<hidden>" in repr(material) and material.key.decode() not in repr(material)
