"""A self-signed certificate for the sandbox's STARTTLS hosts, made once per process.

The certificate and key live in memory; ``ssl`` loads them only from files, so they are written
into a private temporary folder just long enough to load, and the folder is removed at once: no
``listhygiene-sandbox-tls-*`` folder outlives the call, however the sandbox later stops
(in-process, or the ``sandbox up`` daemon killed by ``sandbox down``).
"""

import datetime
import functools
import ssl
import tempfile
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@functools.cache
def self_signed_pem() -> tuple[bytes, bytes]:
    """(certificate, key) PEM of a self-signed certificate for ``*.test`` names.

    Real servers often present certificates that do not match or do not chain, which is why a
    verifier uses opportunistic TLS without verification; the sandbox does the same.
    """
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "listhygiene sandbox")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("*.test"), x509.DNSName("localhost")]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def server_context() -> ssl.SSLContext:
    """A server context holding the certificate; the files it was loaded from are gone."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert_pem, key_pem = self_signed_pem()
    with tempfile.TemporaryDirectory(prefix="listhygiene-sandbox-tls-") as folder:
        cert_path, key_path = Path(folder) / "cert.pem", Path(folder) / "key.pem"
        cert_path.write_bytes(cert_pem)
        key_path.touch(mode=0o600)  # the folder is 0700 already; the key never world-readable
        key_path.write_bytes(key_pem)
        context.load_cert_chain(cert_path, key_path)
    return context
