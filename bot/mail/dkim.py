"""Message stage: DKIM signatures (RFC 6376, RFC 8463) with dkimpy, over the final bytes.

A message is signed after it is complete (after the splice fills in the
subscriber's values), and the ``DKIM-Signature`` header goes on top.
Canonicalization is relaxed for headers (relays refold them) and simple for
the body, as Amazon SES signs: every body this bot sends is quoted-printable
with CRLF lines of at most 76 characters and no trailing whitespace, which
relays leave alone, and relaxed body canonicalization was most of the cost of
signing (``bench/README.md``).  The signed headers are the ones Gmail's sender
guidelines name, and the ones that say what the body is: ``SIGNED_HEADERS``.
Never reads the store, never sends, never logs the key.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import time
from functools import cache
from pathlib import Path
from typing import Any

from bot.config import ConfigError, DkimConfig, read_secret_file

log = logging.getLogger(__name__)
SIGNED_HEADERS = (
    b"From",
    b"To",
    b"Subject",
    b"Date",
    b"Message-ID",
    b"List-Unsubscribe",
    b"List-Unsubscribe-Post",
    b"List-Id",
    b"MIME-Version",
    b"Content-Type",
)

CANONICALIZATION = (b"relaxed", b"simple")
MIN_RSA_BITS, GOOD_RSA_BITS = 1024, 2048
_PROBE = b"From: a@b.example\r\nTo: c@d.example\r\nSubject: probe\r\n\r\nprobe\r\n"


class Signer:
    """Signs messages for one domain, selector and key.

    The ``DKIM-Signature`` header is laid out, folded and its signed header fields
    canonicalized and hashed by dkimpy's own functions, as ``dkim.sign`` does; what
    differs is the costly part.  dkimpy splits the whole message into lines with a
    regular expression and signs RSA in pure Python (10.6 ms a message); here only the
    header block is parsed (the body is CRLF lines already, as simple canonicalization
    wants them), and the signature itself is OpenSSL's (``cryptography``) for RSA and
    libsodium's (PyNaCl) for Ed25519.  dkimpy and Mail::DKIM verify what it signs
    (``tests/test_dkim.py``)."""

    def __init__(self, selector: bytes, domain: bytes, algorithm: bytes, key: bytes) -> None:
        self.selector, self.domain, self.algorithm = selector, domain, algorithm
        self.key = key
        self._private: Any = None  # loaded on first use, in the process that signs

    def __repr__(self) -> str:
        return f"Signer({self.selector!r}, {self.domain!r}, {self.algorithm!r})"  # never the key

    def __getstate__(self) -> dict[str, object]:  # a key object does not pickle: build processes load their own
        return {**self.__dict__, "_private": None}

    def _sign_digest(self, digest: bytes) -> bytes:
        if self._private is None:
            self._private = _private_key(self.algorithm, self.key)
        if self.algorithm == b"rsa-sha256":
            from cryptography.hazmat.primitives import hashes
            from cryptography.hazmat.primitives.asymmetric import padding, utils

            return bytes(self._private.sign(digest, padding.PKCS1v15(), utils.Prehashed(hashes.SHA256())))
        return bytes(self._private.sign(digest).signature)

    def signature(self, message: bytes, body_hash: bytes | None = None) -> bytes:
        """The ``DKIM-Signature`` header line(s) for *message* (CRLF line ends), to put
        before its first header; *body_hash*: ``body_hash(message)``, when known."""
        import dkim  # here: dkimpy and the DNS library it loads cost every process that never signs

        policy = _policy()
        head, body = _split(message)
        headers, _ = dkim.rfc822_parse(head + b"\r\n")
        include = tuple(name.lower() for name in SIGNED_HEADERS)
        fields = [
            (b"v", b"1"),
            (b"a", self.algorithm),
            (b"c", policy.to_c_value()),
            (b"d", self.domain),
            (b"i", b"@" + self.domain),
            (b"q", b"dns/txt"),
            (b"s", self.selector),
            (b"t", str(int(time.time())).encode("ascii")),
            (b"h", b" : ".join(include)),
            (b"bh", body_hash if body_hash is not None else _body_hash(body)),
            (b"b", b"0" * 60),  # b= on a line of its own, as dkimpy folds it
        ]
        name = b"DKIM-Signature"
        value = dkim.fold(b"; ".join(b"=".join(f) for f in fields), namelen=len(name), linesep=b"\r\n")
        hasher = hashlib.sha256()
        unsigned = (name, b" " + dkim.RE_BTAG.sub(b"\\1", value))
        dkim.hash_headers(hasher, policy, policy.canonicalize_headers(headers), include, unsigned, dict(fields))
        fields[-1] = (b"b", base64.b64encode(self._sign_digest(hasher.digest())))
        signed: bytes = dkim.fold(
            b"; ".join(b"=".join(f) for f in fields) + b"\r\n", namelen=len(name), linesep=b"\r\n"
        )
        return name + b": " + signed


@cache
def _policy() -> Any:
    from dkim.canonicalization import CanonicalizationPolicy

    return CanonicalizationPolicy.from_c_value(b"/".join(CANONICALIZATION))


def _split(message: bytes) -> tuple[bytes, bytes]:
    end = message.find(b"\r\n\r\n")
    return (message, b"") if end < 0 else (message[: end + 2], message[end + 4 :])


def _body_hash(body: bytes) -> bytes:
    """The ``bh=`` value: the same for every signature of one message."""
    return base64.b64encode(hashlib.sha256(_policy().canonicalize_body(body)).digest())


def _private_key(algorithm: bytes, key: bytes) -> Any:
    if algorithm == b"rsa-sha256":
        from cryptography.hazmat.primitives.asymmetric import rsa
        from cryptography.hazmat.primitives.serialization import load_pem_private_key

        loaded = load_pem_private_key(key, password=None)
        if not isinstance(loaded, rsa.RSAPrivateKey):
            raise ValueError("not an RSA key")
        return loaded
    import nacl.encoding
    import nacl.signing

    return nacl.signing.SigningKey(key, encoder=nacl.encoding.Base64Encoder)


class Signers:
    """Every signature ``[dkim]`` asks for (its key, then each of ``additional_keys``),
    each over the message as it was, the first one on top."""

    def __init__(self, signers: list[Signer]) -> None:
        self.signers = tuple(signers)

    def __repr__(self) -> str:
        return f"Signers{self.signers!r}"

    def sign(self, message: bytes) -> bytes:
        body_hash = _body_hash(_split(message)[1])  # hashed once, whatever the number of keys
        return b"".join(signer.signature(message, body_hash) for signer in self.signers) + message


def signer_of(config: DkimConfig) -> Signers | None:
    """The signers ``[dkim]`` describes, or None when signing is off (no domain).  A key
    file that cannot be read or does not sign is a ``ConfigError`` naming it."""
    if not config.domain:
        return None
    if config.key_file is None or not config.selector:
        raise ConfigError("dkim: signing needs dkim.selector and dkim.key_file as well as dkim.domain")
    keys = [(config.selector, config.key_file, config.algorithm, "dkim.key_file")]
    keys += [
        (k.selector, k.key_file, k.algorithm, f"dkim.additional_keys[{n}].key_file")
        for n, k in enumerate(config.additional_keys)
    ]
    return Signers([_signer(config.domain, *key) for key in keys])


def _signer(domain: str, selector: str, path: Path, algorithm: str, setting: str) -> Signer:
    key = read_secret_file(Path(path), setting).encode("utf-8")
    signer = Signer(selector.encode("ascii"), domain.encode("idna"), algorithm.encode("ascii"), key)
    try:
        signer.signature(_PROBE)
    except Exception as exc:  # dkimpy raises its own and the crypto libraries' errors
        kind = "an RSA private key in PEM" if algorithm == "rsa-sha256" else "a base64 Ed25519 private key"
        raise ConfigError(f"{setting}: {path} does not hold {kind} ({type(exc).__name__})") from None
    if algorithm == "rsa-sha256":
        _check_rsa_size(key, Path(path), setting)
    return signer


def _check_rsa_size(key: bytes, path: Path, setting: str) -> None:
    """Refuse an RSA key under ``MIN_RSA_BITS`` (receivers treat its signatures as none,
    RFC 8301) and warn under ``GOOD_RSA_BITS``."""
    bits = int(_private_key(b"rsa-sha256", key).key_size)
    if bits < MIN_RSA_BITS:
        raise ConfigError(
            f"{setting}: {path} holds a {bits}-bit RSA key: receivers ignore signatures of keys under "
            f"{MIN_RSA_BITS} bits (RFC 8301); make a {GOOD_RSA_BITS}-bit one (docs/deliverability.md, DKIM)"
        )
    if bits < GOOD_RSA_BITS:
        log.warning("%s: %s holds a %d-bit RSA key; %d bits are recommended", setting, path, bits, GOOD_RSA_BITS)
