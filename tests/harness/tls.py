"""A certificate authority and a server certificate for 127.0.0.1, made with ``openssl`` as
an admin makes them for a Redis that answers TLS (``rediss://``)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from edtweb.redis_server import TlsFiles


def openssl(*args: str) -> None:
    done = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"openssl {' '.join(args)}: {done.stderr}"


def server_certificate(folder: Path) -> TlsFiles:
    """``ca.pem`` (a CA of its own), ``server.pem`` signed by it for IP 127.0.0.1 and
    ``localhost``, and ``server.key``; the CA and certificate readable by all (a learner
    checks the server against the CA), the key by its owner alone."""
    folder.mkdir(parents=True, exist_ok=True)
    ca, ca_key = folder / "ca.pem", folder / "ca.key"
    cert, key, csr = folder / "server.pem", folder / "server.key", folder / "server.csr"
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
            "/CN=EDT test CA", "-keyout", str(ca_key), "-out", str(ca))  # fmt: skip
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
            "-keyout", str(key), "-out", str(csr))  # fmt: skip
    names = folder / "san.cnf"
    names.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
            "-CAcreateserial", "-days", "2", "-extfile", str(names), "-out", str(cert))  # fmt: skip
    folder.chmod(0o755)
    for public in (ca, cert):
        public.chmod(0o644)
    key.chmod(0o600)
    return TlsFiles(ca=ca, cert=cert, key=key)
