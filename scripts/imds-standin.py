#!/usr/bin/env python3
"""A stand-in for the EC2 instance metadata service (IMDSv2) for scripts/demo-torchrun: the
metadata cannot be reached off EC2. Serves PUT /latest/api/token, then GET /latest/meta-data/<path>
with a token: the content of <dir>/<path> (path with / as _), 404 when there is no such file. A
demo gives a node its Spot warning by writing <dir>/spot_instance-action.

    imds-standin.py DIR PORTFILE   # binds 127.0.0.1 on a free port, writes the port to PORTFILE
"""
import http.server
import os
import secrets
import sys


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
        prefix = "/latest/meta-data/"
        name = self.path[len(prefix):].replace("/", "_") if self.path.startswith(prefix) else ""
        if not name or not all(c.isalnum() or c in "-_" for c in name):
            return self._answer(404, "")
        try:
            with open(os.path.join(self.server.dir, name), encoding="utf-8") as f:
                self._answer(200, f.read())
        except FileNotFoundError:
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


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.dir = sys.argv[1]
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        f.write(str(server.server_address[1]))
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
