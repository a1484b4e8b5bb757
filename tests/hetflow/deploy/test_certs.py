"""`hetflow certs`: a CA and a certificate per service identity, valid for every host the stack names."""

from cryptography import x509
from cryptography.x509.oid import NameOID

from hetflow.deploy.certs import security_section, stack_hosts, write_certs
from hetflow.runtime.security import IDENTITIES, SecurityConfig


def test_the_hosts_are_every_host_the_stack_names_and_localhost():
    raw = {"stack": {"host": "0.0.0.0"}, "monitor": {"host": "monitor.internal"},
           "engines": [{"name": "small-0", "host": "10.0.0.7"}]}
    assert {"monitor.internal", "10.0.0.7", "small-0", "localhost", "127.0.0.1"} <= set(stack_hosts(raw))
    assert "0.0.0.0" not in stack_hosts(raw)


def test_the_written_files_are_what_the_security_section_names(tmp_path):
    write_certs({"engines": [{"name": "small-0"}]}, tmp_path)
    ca = x509.load_pem_x509_certificate((tmp_path / "ca.crt").read_bytes())
    section = security_section(tmp_path)
    for identity in IDENTITIES:
        cfg = SecurityConfig(identity, section["tls"])
        cert = x509.load_pem_x509_certificate(cfg.path(cfg.tls.cert_file).read_bytes())
        cert.verify_directly_issued_by(ca)
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == identity
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert "small-0" in names.get_values_for_type(x509.DNSName)
        assert cfg.path(cfg.tls.key_file).stat().st_mode & 0o077 == 0  # keys readable by their owner only
