"""An S3-protocol object store on loopback for the cluster tests: moto's S3 server, with a request log.

moto's server is a WSGI app whose buckets live in this process's memory. We serve it ourselves with
werkzeug, wrapped in a small middleware that records every request (method, path, Range header, status,
response bytes), so tests can count listings, ranged GETs and bytes the way a store's access log would.

`stop()` shuts the listening socket (clients get "connection refused", exactly what a store restart
looks like from outside) and `start()` serves the same app again on the same port: the buckets survive
because they live in moto's in-process backends, not in the server. That is more faithful than a proxy
answering 503 (a refused connection never reaches the store) and keeps state without moto's
persistence add-ons.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass

import logging

from werkzeug.serving import make_server

logging.getLogger("werkzeug").setLevel(logging.ERROR)


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: str
    range: str | None
    status: int
    sent: int  # response body bytes
    body: bytes | None = None  # kept for shuffle sidecars (*.index), which a run deletes when it succeeds


class _Logged:
    """WSGI middleware: records each request once its response body has been sent."""

    def __init__(self, app, log: list[Request], lock: threading.Lock) -> None:
        self.app, self.log, self.lock = app, log, lock

    def __call__(self, environ, start_response):
        status_box: list[int] = []

        def start(status, headers, exc_info=None):
            status_box.append(int(status.split()[0]))
            return start_response(status, headers, exc_info)

        sent = 0
        path = environ.get("PATH_INFO", "")
        keep = environ["REQUEST_METHOD"] == "GET" and path.endswith(".index")
        body: list[bytes] = []
        try:
            for chunk in self.app(environ, start):
                sent += len(chunk)
                if keep:
                    body.append(chunk)
                yield chunk
        finally:
            req = Request(environ["REQUEST_METHOD"], path, environ.get("QUERY_STRING", ""),
                          environ.get("HTTP_RANGE"), status_box[0] if status_box else 0, sent,
                          b"".join(body) if keep else None)
            with self.lock:
                self.log.append(req)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class S3Server:
    """moto's S3 on 127.0.0.1:<port>, stoppable and restartable on the same port, with a request log."""

    def __init__(self, port: int | None = None) -> None:
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

        self.port = port or free_port()
        self.log: list[Request] = []
        self._lock = threading.Lock()
        self._app = _Logged(DomainDispatcherApplication(create_backend_app), self.log, self._lock)
        self._server = None
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """What every process that talks to the store needs (the driver, Ray's raylets and workers)."""
        return {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_ENDPOINT_URL": self.endpoint, "AWS_REQUEST_CHECKSUM_CALCULATION": "when_required",
                "AWS_RESPONSE_CHECKSUM_VALIDATION": "when_required"}

    def start(self) -> None:
        self._server = make_server("127.0.0.1", self.port, self._app, threaded=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Close the listening socket: new connections are refused until `start()`."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join()
            self._server = None

    def requests(self) -> list[Request]:
        with self._lock:
            return list(self.log)

    def requests_once(self, done, timeout_s: float = 10.0) -> list[Request]:
        """The request log once ``done(log)`` holds, or as it is after ``timeout_s``: a request is logged
        when its response body has been sent, which can be just after the client has read it."""
        deadline = time.monotonic() + timeout_s
        log = self.requests()
        while not done(log) and time.monotonic() < deadline:
            time.sleep(0.01)
            log = self.requests()
        return log

    def clear_log(self) -> None:
        with self._lock:
            self.log.clear()


def set_env(env: dict[str, str]) -> dict[str, str | None]:
    """Put ``env`` into os.environ; returns the previous values for `restore_env`."""
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    return old


def restore_env(old: dict[str, str | None]) -> None:
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def serve(port: int, buckets: list[str]) -> None:
    """Serve moto's S3 on ``port`` until killed, with ``buckets`` created: the store as its own process,
    so a test can kill it (a dead store) or SIGSTOP it (a store that stops answering)."""
    import boto3

    srv = S3Server(port)
    srv.start()
    s3 = boto3.client("s3", endpoint_url=srv.endpoint, **_credentials())
    for bucket in buckets:
        s3.create_bucket(Bucket=bucket)
    print("ready", flush=True)
    srv._thread.join()


def _credentials() -> dict[str, str]:
    return {"aws_access_key_id": "testing", "aws_secret_access_key": "testing", "region_name": "us-east-1"}


if __name__ == "__main__":
    import sys

    serve(int(sys.argv[1]), sys.argv[2:])
