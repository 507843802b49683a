"""The fingerprints of an ASCII-armored OpenPGP public key, read without gpg.

roles/blocks/apt_mirror checks the key it reads from the fleet's mirror against the inventory's
fleet_mirror_apt_key_fingerprint on the controller, which need not have gpg, before the key is written
where apt trusts it (filter_plugins/fleet.py fleet_openpgp_key). Hand-written, on the
standard library, because the controller has no gpg to ask and no library can stand in for it:
python-gnupg drives the gpg binary, and a full OpenPGP implementation (PGPy, pysequoia) would be a
dependency of every controller for a hash over one packet.

What it reads (RFC 4880): the armor (its base64 and, where given, its CRC-24), then the packets, in
either header format (old: the tag in bits 5-2 and a length of 1, 2 or 4 octets, or to the end; new:
one-, two- and five-octet lengths and partial lengths). The fingerprint of a version 4 primary key
(tag 6) is the SHA-1 of 0x99, its body's length in two octets, and its body. Every primary key of the
text is returned, so that a block holding a second key beside the pinned one (apt would trust both)
is seen; subkeys are the primary key's, bound by its signature. A secret key, a key of another version
or text that is no OpenPGP data is refused (ValueError), never given a fingerprint.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re

_ARMOR = re.compile(r"-----BEGIN PGP PUBLIC KEY BLOCK-----\r?\n(.*?)-----END PGP PUBLIC KEY BLOCK-----", re.S)
#: Packet tags (RFC 4880 4.3).
PUBLIC_KEY, SECRET_KEY, SECRET_SUBKEY = 6, 5, 7


def _crc24(data: bytes) -> int:
    crc = 0xB704CE
    for byte in data:
        crc ^= byte << 16
        for _ in range(8):
            crc <<= 1
            if crc & 0x1000000:
                crc ^= 0x1864CFB
    return crc & 0xFFFFFF


def dearmor(text: str) -> bytes:
    """The binary packets of every public key block in `text`, one after the other."""
    blocks = _ARMOR.findall(str(text).replace("\r\n", "\n"))
    if not blocks:
        raise ValueError("no ASCII-armored OpenPGP public key block (-----BEGIN PGP PUBLIC KEY BLOCK-----)")
    data = b""
    for block in blocks:
        lines = [line.strip() for line in block.split("\n")]
        # Armor headers (Version: ..., Comment: ...) end at the first empty line.
        if "" in lines and all(":" in line for line in lines[:lines.index("")]):
            lines = lines[lines.index("") + 1:]
        body = [line.strip() for line in lines if line.strip()]
        checksum = body.pop()[1:] if body and body[-1].startswith("=") else None
        try:
            raw = base64.b64decode("".join(body), validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ValueError(f"the key block's base64 does not decode ({exc})") from None
        if checksum is not None:
            try:
                expected = int.from_bytes(base64.b64decode(checksum, validate=True), "big")
            except (binascii.Error, ValueError):
                raise ValueError("the key block's checksum line does not decode") from None
            if expected != _crc24(raw):
                raise ValueError("the key block's CRC-24 checksum does not match its data (it was altered)")
        data += raw
    return data


def packets(data: bytes) -> list[tuple[int, bytes]]:
    """The packets of binary OpenPGP data: [(tag, body)]."""
    found, i = [], 0
    while i < len(data):
        head = data[i]
        i += 1
        if not head & 0x80:
            raise ValueError(f"no OpenPGP packet at octet {i - 1} (its first bit is 0)")
        if head & 0x40:  # the new header format
            tag, body = head & 0x3F, b""
            while True:
                if i >= len(data):
                    raise ValueError("a packet's length runs past the end of the data")
                first = data[i]
                if first < 192:
                    length, i = first, i + 1
                elif first < 224:
                    if i + 1 >= len(data):
                        raise ValueError("a packet's length runs past the end of the data")
                    length, i = ((first - 192) << 8) + data[i + 1] + 192, i + 2
                elif first == 255:
                    length, i = int.from_bytes(data[i + 1:i + 5], "big"), i + 5
                else:  # a partial body length: this part, then another length
                    part = 1 << (first & 0x1F)
                    body += data[i + 1:i + 1 + part]
                    i += 1 + part
                    continue
                body += data[i:i + length]
                i += length
                break
        else:  # the old format
            tag, kind = (head >> 2) & 0x0F, head & 0x03
            if kind == 3:  # indeterminate: to the end of the data
                length = len(data) - i
            else:
                size = (1, 2, 4)[kind]
                length, i = int.from_bytes(data[i:i + size], "big"), i + size
            body = data[i:i + length]
            i += length
        if i > len(data):
            raise ValueError(f"a packet (tag {tag}) runs past the end of the data")
        found.append((tag, body))
    return found


def fingerprints(text: str) -> list[str]:
    """The v4 fingerprint (40 upper-case hex digits) of each primary key in the armored `text`, in order."""
    out = []
    for tag, body in packets(dearmor(text)):
        if tag in (SECRET_KEY, SECRET_SUBKEY):
            raise ValueError("it holds a secret key: the public key alone belongs there")
        if tag != PUBLIC_KEY:
            continue
        if not body or body[0] != 4:
            raise ValueError(f"a version {body[0] if body else '?'} key: only version 4 keys (gpg's, 40 hex digits) "
                             "are read")
        if len(body) > 0xFFFF:
            raise ValueError("a public key packet longer than 65535 octets")
        out.append(hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body).hexdigest().upper())  # noqa: S324
    if not out:
        raise ValueError("it holds no public key packet")
    return out
