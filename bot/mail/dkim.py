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

import logging
from dataclasses import dataclass, field
from pathlib import Path

import dkim

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


@dataclass(frozen=True, slots=True)
class Signer:
    selector: bytes
    domain: bytes
    algorithm: bytes  # b"rsa-sha256" | b"ed25519-sha256"
    key: bytes = field(repr=False)

    def signature(self, message: bytes) -> bytes:
        """The ``DKIM-Signature`` header line(s) for *message* (CRLF line ends), to put
        before its first header."""
        return bytes(
            dkim.sign(
                message,
                self.selector,
                self.domain,
                self.key,
                canonicalize=CANONICALIZATION,
                signature_algorithm=self.algorithm,
                include_headers=list(SIGNED_HEADERS),
            )
        )

    def sign(self, message: bytes) -> bytes:
        return self.signature(message) + message


def signer_of(config: DkimConfig) -> Signer | None:
    """The signer ``[dkim]`` describes, or None when signing is off (no domain).  A key
    file that cannot be read or does not sign is a ``ConfigError`` naming it."""
    if not config.domain:
        return None
    path = config.key_file
    if path is None or not config.selector:
        raise ConfigError("dkim: signing needs dkim.selector and dkim.key_file as well as dkim.domain")
    key = read_secret_file(Path(path), "dkim.key_file").encode("utf-8")
    signer = Signer(
        config.selector.encode("ascii"), config.domain.encode("idna"), config.algorithm.encode("ascii"), key
    )
    try:
        signer.signature(_PROBE)
    except Exception as exc:  # dkimpy raises its own and the crypto libraries' errors
        kind = "an RSA private key in PEM" if config.algorithm == "rsa-sha256" else "a base64 Ed25519 private key"
        raise ConfigError(f"dkim.key_file: {path} does not hold {kind} ({type(exc).__name__})") from None
    if config.algorithm == "rsa-sha256":
        _check_rsa_size(key, Path(path))
    return signer


def _check_rsa_size(key: bytes, path: Path) -> None:
    """Refuse an RSA key under ``MIN_RSA_BITS`` (receivers treat its signatures as none,
    RFC 8301) and warn under ``GOOD_RSA_BITS``."""
    import dkim.crypto

    bits = int(dkim.crypto.parse_pem_private_key(key)["modulus"].bit_length())
    if bits < MIN_RSA_BITS:
        raise ConfigError(
            f"dkim.key_file: {path} holds a {bits}-bit RSA key: receivers ignore signatures of keys under "
            f"{MIN_RSA_BITS} bits (RFC 8301); make a {GOOD_RSA_BITS}-bit one (README, DKIM)"
        )
    if bits < GOOD_RSA_BITS:
        log.warning("dkim.key_file: %s holds a %d-bit RSA key; %d bits are recommended", path, bits, GOOD_RSA_BITS)
