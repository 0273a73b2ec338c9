"""Local receivers of notices, served from the test process: an HTTP endpoint that records
every POST and just enough of an SMTP server to accept mail. The notifier tests and the
tests of ``underway worker --config`` deliver to them."""

from __future__ import annotations

import base64
import email
import email.policy
import socketserver
import threading
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Endpoint:
    """Records every POST; answers with ``status``."""

    def __init__(self) -> None:
        self.status = 204
        self.received: list[tuple[dict[str, str], bytes]] = []
        self.paths: list[str] = []
        """The path of each POST, in the same order."""
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                endpoint.paths.append(self.path)
                endpoint.received.append((dict(self.headers), body))
                self.send_response(endpoint.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/approvals"
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


class SmtpSink:
    """Just enough SMTP to accept mail: EHLO, AUTH PLAIN, MAIL, RCPT, DATA, QUIT."""

    def __init__(self) -> None:
        self.messages: list[tuple[str, list[str], EmailMessage]] = []
        self.logins: list[tuple[str, str]] = []
        sink = self

        class Handler(socketserver.StreamRequestHandler):
            def reply(self, line: str) -> None:
                self.wfile.write(line.encode() + b"\r\n")

            def handle(self) -> None:
                self.reply("220 sink ready")
                sender, rcpts = "", []
                while raw := self.rfile.readline():
                    line = raw.decode().rstrip("\r\n")
                    verb = line.split(" ", 1)[0].upper()
                    if verb == "EHLO":
                        self.reply("250-sink")
                        self.reply("250 AUTH PLAIN")
                    elif verb == "AUTH":
                        _, user, password = base64.b64decode(line.split()[2]).split(b"\0")
                        sink.logins.append((user.decode(), password.decode()))
                        self.reply("235 ok")
                    elif verb == "MAIL":
                        sender, rcpts = line.split(":", 1)[1].strip().strip("<>"), []
                        self.reply("250 ok")
                    elif verb == "RCPT":
                        rcpts.append(line.split(":", 1)[1].strip().strip("<>"))
                        self.reply("250 ok")
                    elif verb == "DATA":
                        self.reply("354 go ahead")
                        body = []
                        while (data := self.rfile.readline()) != b".\r\n":
                            body.append(data[1:] if data.startswith(b"..") else data)
                        message = email.message_from_bytes(b"".join(body),
                                                           policy=email.policy.default)
                        assert isinstance(message, EmailMessage)
                        sink.messages.append((sender, rcpts, message))
                        self.reply("250 queued")
                    elif verb == "QUIT":
                        self.reply("221 bye")
                        return
                    else:
                        self.reply("250 ok")

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()
