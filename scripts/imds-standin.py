#!/usr/bin/env python3
"""A stand-in for the EC2 instance metadata service (IMDSv2) for scripts/demo and
scripts/demo-torchrun: the metadata cannot be reached off EC2. Serves PUT /latest/api/token, then
GET /latest/meta-data/<path> with a token: the content of <dir>/<path> (path with / as _), 404
when there is no such file. A demo gives a node its Spot warning by writing
<dir>/spot_instance-action.

With --signer KEY (an RSA key, PKCS#8 DER) and the files <dir>/instance-id and <dir>/local-ipv4,
it also serves /latest/dynamic/instance-identity/document and /signature: the instance identity
document EC2 would serve, signed as EC2 signs it (SHA-256 with RSA, base64) but with KEY, the
tests' stand-in for AWS's key (tests/fixtures/identity/), whose certificate the demos' dtd trusts
(workers.identity_certificates). Signing needs the `cryptography` package (moto's, in .venv).

    imds-standin.py DIR PORTFILE [--signer KEY]   # binds 127.0.0.1 on a free port, writes it to PORTFILE
"""
import base64
import http.server
import os
import secrets
import sys

IDENTITY = "/latest/dynamic/instance-identity/"
ACCOUNT = "123456789012"  # moto's account, the demos' instances' own


class Handler(http.server.BaseHTTPRequestHandler):
    tokens = set()

    def do_PUT(self):
        if self.path != "/latest/api/token":
            return self.send_error(404)
        token = secrets.token_hex(16)
        Handler.tokens.add(token)
        self._answer(200, token, {"x-aws-ec2-metadata-token-ttl-seconds": "21600"})

    def do_GET(self):
        if self.headers.get("x-aws-ec2-metadata-token") not in Handler.tokens:
            return self._answer(401, "")
        if self.path.startswith(IDENTITY):
            return self._identity(self.path[len(IDENTITY):])
        prefix = "/latest/meta-data/"
        name = self.path[len(prefix):].replace("/", "_") if self.path.startswith(prefix) else ""
        body = self._read(name)
        if body is None:
            return self._answer(404, "")
        self._answer(200, body)

    def _read(self, name):
        if not name or not all(c.isalnum() or c in "-_" for c in name):
            return None
        try:
            with open(os.path.join(self.server.dir, name), encoding="utf-8") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def _identity(self, what):
        instance, ip = self._read("instance-id"), self._read("local-ipv4")
        if self.server.signer is None or instance is None or ip is None:
            return self._answer(404, "")
        doc = document(instance.strip(), ip.strip())
        if what == "document":
            return self._answer(200, doc)
        if what == "signature":
            return self._answer(200, sign(self.server.signer, doc))
        self._answer(404, "")

    def _answer(self, code, body, headers=()):
        data = body.encode()
        self.send_response(code)
        for k, v in dict(headers).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_):
        pass


def document(instance, ip):
    """As EC2 writes one: pretty-printed, with more members than dtd reads."""
    return (
        "{\n"
        f'  "accountId" : "{ACCOUNT}",\n'
        '  "architecture" : "x86_64",\n'
        '  "availabilityZone" : "us-east-1a",\n'
        '  "imageId" : "ami-12c6146b",\n'
        f'  "instanceId" : "{instance}",\n'
        '  "instanceType" : "g5.xlarge",\n'
        '  "pendingTime" : "2026-11-28T00:00:00Z",\n'
        f'  "privateIp" : "{ip}",\n'
        '  "region" : "us-east-1",\n'
        '  "version" : "2017-09-30"\n'
        "}"
    )


def sign(key, doc):
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding

    sig = base64.b64encode(key.sign(doc.encode(), padding.PKCS1v15(), hashes.SHA256())).decode()
    return "\n".join(sig[i:i + 64] for i in range(0, len(sig), 64))


def load_signer(path):
    from cryptography.hazmat.primitives.serialization import load_der_private_key

    with open(path, "rb") as f:
        return load_der_private_key(f.read(), password=None)


def main():
    args = sys.argv[1:]
    signer = None
    if len(args) == 4 and args[2] == "--signer":
        signer = load_signer(args[3])
        args = args[:2]
    if len(args) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.dir = args[0]
    server.signer = signer
    with open(args[1], "w", encoding="utf-8") as f:
        f.write(str(server.server_address[1]))
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
