"""Certificates for a stack's mutual TLS: ``hetflow certs -c STACK.yaml -o DIR``.

One CA, and one certificate per service identity (``hetflow.runtime.security.IDENTITIES``) whose
common name is the identity, valid for every host the stack config names (and localhost), so any
service can serve on any of them. The stack's ``security`` section then reads
``{ca_file: DIR/ca.crt, cert_file: DIR/{identity}.crt, key_file: DIR/{identity}.key}``, and
``ticket_key_file: DIR/ticket.key``, the secret balancers sign dispatch tickets with (issue 34).
Production deployments bring certificates from their own CA (cert-manager, Vault); these are for
a stack that has none.
"""

from __future__ import annotations

import datetime
import ipaddress
import secrets
from pathlib import Path
from typing import Any, Mapping

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from hetflow.runtime.security import IDENTITIES


def stack_hosts(raw: Mapping[str, Any]) -> list[str]:
    """Every host a service of the stack may be dialled at: hosts and advertised addresses in the
    config, each engine's name (its container's), the identities (compose service names), localhost."""
    hosts = {"localhost", "127.0.0.1", *IDENTITIES}
    sections = [raw.get(name) or {} for name in ("stack", "monitor", "router", "predictor", "balancer", "gateway")]
    for section in [*sections, *(raw.get("engines") or [])]:
        if section.get("host"):
            hosts.add(str(section["host"]))
        if section.get("advertise_address"):
            hosts.add(str(section["advertise_address"]).rsplit(":", 1)[0])
        if section.get("name"):
            hosts.add(str(section["name"]))
    return sorted(h for h in hosts if h not in ("0.0.0.0", "::"))


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "hetflow"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _alternative_names(hosts: list[str]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def write_certs(raw: Mapping[str, Any], out_dir: Path, days: int = 365) -> list[Path]:
    """Write ``ca.crt``/``ca.key`` and ``<identity>.crt``/``.key`` for every identity; returns the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(_name("hetflow-ca")).issuer_name(_name("hetflow-ca"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(start).not_valid_after(end)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    written = [_write(out_dir / "ca.crt", ca.public_bytes(serialization.Encoding.PEM)),
               _write(out_dir / "ca.key", _pem_key(ca_key))]
    alternative_names = _alternative_names(stack_hosts(raw))
    for identity in IDENTITIES:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (x509.CertificateBuilder().subject_name(_name(identity)).issuer_name(ca.subject)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(start).not_valid_after(end)
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(alternative_names, critical=False)
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                      ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                .sign(ca_key, hashes.SHA256()))
        written += [_write(out_dir / f"{identity}.crt", cert.public_bytes(serialization.Encoding.PEM)),
                    _write(out_dir / f"{identity}.key", _pem_key(key))]
    written.append(_write(out_dir / "ticket.key", secrets.token_hex(32).encode("ascii")))  # dispatch tickets
    return written


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    if path.suffix == ".key":
        path.chmod(0o600)
    return path


def security_section(out_dir: Path) -> dict[str, Any]:
    """The stack config's ``security`` section for the certificates in ``out_dir``."""
    return {"tls": {"ca_file": str(out_dir / "ca.crt"), "cert_file": str(out_dir / "{identity}.crt"),
                    "key_file": str(out_dir / "{identity}.key"), "mutual": True},
            "ticket_key_file": str(out_dir / "ticket.key")}
