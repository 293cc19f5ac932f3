"""Write a private certificate authority and one TLS certificate for a sphdist/Dask cluster.

    python cluster/make_certs.py DIRECTORY [--host 127.0.0.1] [--host node01.example] [--days 30]

writes ``ca.pem`` (the CA certificate), ``cert.pem`` and ``key.pem`` (a certificate signed by
that CA, valid as server and client, for every ``--host`` given). Give all three to the scheduler,
every worker and ``sphdist fit`` (see ``cluster/tls.md``). The CA's private key is not kept: to
add a party later, generate a new set. The key file is created with mode 0600.

Uses the ``cryptography`` package (``pip install cryptography``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


def _name(common_name: str) -> x509.Name:
    return x509.Name([
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "sphdist cluster"),
        x509.NameAttribute(NameOID.COMMON_NAME, common_name),
    ])


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def make_certs(
    directory: str | os.PathLike[str], hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
    days: int = 30,
) -> tuple[Path, Path, Path]:
    """Write ``ca.pem``, ``cert.pem`` and ``key.pem`` into ``directory``.

    Parameters
    ----------
    directory : path-like
        Created if missing.
    hosts : tuple of str
        IP addresses and DNS names the certificate is valid for (subject alternative names).
    days : int, default 30
        Validity of both certificates, from one hour ago.

    Returns
    -------
    tuple of pathlib.Path
        (ca, cert, key) paths.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=1)
    until = now + dt.timedelta(days=days)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("sphdist cluster CA")).issuer_name(_name("sphdist cluster CA"))
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now).not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )

    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(hosts[0])).issuer_name(ca_cert.subject)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now).not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([_san(h) for h in hosts]), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )

    ca_path, cert_path, key_path = (directory / n for n in ("ca.pem", "cert.pem", "key.pem"))
    ca_path.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ))
    return ca_path, cert_path, key_path


def main() -> None:
    """Command line: ``python cluster/make_certs.py DIRECTORY [--host H ...] [--days D]``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory")
    parser.add_argument("--host", action="append", help="IP or DNS name (repeatable)")
    parser.add_argument("--days", type=int, default=30)
    args = parser.parse_args()
    hosts = tuple(args.host or ("127.0.0.1", "localhost"))
    for path in make_certs(args.directory, hosts, args.days):
        print(path)


if __name__ == "__main__":
    main()
