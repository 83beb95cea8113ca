"""Identifiers the runtime mints: episode ids, derived reset seeds and request ids.

The runtime is the only source of episode ids (UUIDv7, lowercase hyphenated). Seeds
derived from a base seed follow the reference's law exactly, so a trio run and an
RLMesh 0.1.0 run with the same ``session_id`` reset their envs with the same seeds.
"""

from __future__ import annotations

import os
import threading
import time

__all__ = ["deterministic_reset_seed", "format_request_id", "mint_uuid7"]

_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_U64 = (1 << 64) - 1
_I63 = (1 << 63) - 1

_uuid_lock = threading.Lock()
_last_ms = -1
_counter = 0


def mint_uuid7() -> str:
    """Return a fresh UUIDv7 (RFC 9562) as a 36-character lowercase hyphenated string.

    The 48-bit Unix-millisecond timestamp leads, so ids sort by creation time; within one
    millisecond the 12-bit ``rand_a`` field counts up from a random start (RFC 9562
    method 1), so ids minted by one process stay strictly increasing.

    >>> episode_id = mint_uuid7()
    >>> len(episode_id), episode_id[14], episode_id.count("-")
    (36, '7', 4)
    """
    global _last_ms, _counter
    with _uuid_lock:
        now_ms = time.time_ns() // 1_000_000
        if now_ms > _last_ms:
            _last_ms = now_ms
            _counter = int.from_bytes(os.urandom(2), "big") & 0x7FF
        else:
            _counter += 1
            if _counter > 0xFFF:
                # Counter exhausted inside one millisecond: borrow the next one.
                _last_ms += 1
                _counter = 0
        ms, seq = _last_ms, _counter
    rand_b = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | seq << 64 | 0b10 << 62 | rand_b
    text = f"{value:032x}"
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


def deterministic_reset_seed(
    base_seed: int, session_id: str, reset_generation: int, env_index: int
) -> int:
    """The reference's per-lane reset seed for a run with a base seed.

    64-bit FNV-1a over ``base_seed`` (i64 little-endian), ``0xFF``, the UTF-8 bytes of
    ``session_id``, ``0xFD``, ``reset_generation`` (u64 LE), ``0xFC``, ``env_index``
    (u64 LE); the hash is masked to 63 bits so the seed is never negative.

    >>> deterministic_reset_seed(1234, "session-1", 0, 0)
    5827150907976557851
    """
    data = (
        (base_seed & _U64).to_bytes(8, "little")
        + b"\xff"
        + session_id.encode("utf-8")
        + b"\xfd"
        + (reset_generation & _U64).to_bytes(8, "little")
        + b"\xfc"
        + (env_index & _U64).to_bytes(8, "little")
    )
    digest = _FNV_OFFSET
    for byte in data:
        digest = ((digest ^ byte) * _FNV_PRIME) & _U64
    return digest & _I63


def format_request_id(env_id: str, phase: str, seq: int) -> str:
    """``"<env_id>:<phase>:<seq>"`` with the sequence zero-padded to six digits.

    >>> format_request_id("test-env", "reset_observation", 1)
    'test-env:reset_observation:000001'
    """
    return f"{env_id}:{phase}:{seq:06d}"
