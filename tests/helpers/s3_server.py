"""A real S3-compatible server for the tests: moto's server mode on 127.0.0.1 and a free port.

    with moto_s3(bucket) as env:   # env: the AWS variables pointing at it (also set in os.environ)
        ...
    python -m tests.helpers.s3_server PORT     # the server alone (what moto_s3 starts)

The server runs in a process of its own (``python -m tests.helpers.s3_server``): the test
process, writers in other processes (each its own JVM) and readers such as delta-rs (whose reads
hold the GIL: a server thread in the same process would stall behind them) reach it over HTTP
like any S3 endpoint. While it runs, the process's AWS environment points at
it (``AWS_ENDPOINT_URL``, static test credentials, region), which is where isolde's log store,
its table-file access and Spark's S3A (``executor/runtime/s3a.py``) take their endpoint from; it
is restored afterwards.

About moto (5.2.x): it enforces ``If-None-Match: *`` on PutObject (412 PreconditionFailed when
the key exists), but as a check-then-put in its request handler with no lock, so two requests for
one key that interleave between the check and the put could both succeed -- a window real S3 does
not have. The server's PutObject handler is therefore serialised (``_atomic_put_object``) so
races test isolde against S3's documented guarantee, not moto's window; the 412 itself still
comes from moto's own check.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
import sys
import threading
import time

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing",
               "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _atomic_put_object():
    from moto.s3.responses import S3Response

    original = S3Response.put_object
    lock = threading.Lock()

    def put_object(self, *args, **kwargs):
        with lock:
            return original(self, *args, **kwargs)

    S3Response.put_object = put_object
    return lambda: setattr(S3Response, "put_object", original)


def serve(port: int) -> None:
    """Run moto's S3 server on 127.0.0.1:``port`` until killed, PutObject serialised."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    _atomic_put_object()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    threading.Event().wait()


def _wait_for(port: int, proc, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the moto S3 server exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"the moto S3 server did not listen on port {port} within {timeout:.0f} s")


@contextlib.contextmanager
def moto_s3(*buckets: str):
    """A moto S3 server with ``buckets`` made, the AWS environment pointing at it."""
    import boto3

    port = free_port()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.Popen([sys.executable, "-m", "tests.helpers.s3_server", str(port)], cwd=root,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    env = {**CREDENTIALS, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}
    saved = {k: os.environ.get(k) for k in [*env, "AWS_ENDPOINT_URL_S3", "AWS_PROFILE"]}
    try:
        _wait_for(port, proc)
        for k in ("AWS_ENDPOINT_URL_S3", "AWS_PROFILE"):
            os.environ.pop(k, None)
        os.environ.update(env)
        client = boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name="us-east-1")
        for bucket in buckets:
            client.create_bucket(Bucket=bucket)
        yield env
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        proc.kill()
        proc.wait(30)


if __name__ == "__main__":
    serve(int(sys.argv[1]))


class FaultProxy:
    """An HTTP proxy on 127.0.0.1 in front of an S3 server that misbehaves on purpose:

    - ``throttle_every``: every n-th request is answered ``503 SlowDown`` without reaching the
      server (S3's throttling answer, which clients retry with back-off) -- isolde's own clients'
      requests (boto3) only: Spark's S3A (the AWS Java SDK) passes untouched, since its throttling
      policy is Hadoop's (it backed off for minutes per statement through this proxy);
    - ``lose_commit``: the first conditional PUT of a ``_delta_log/*.json`` commit is applied by
      the server, and then its answer is lost (the connection closed without a response), as when
      a connection resets after S3 did the write.

    ``counts`` says what it did ({"requests", "throttled", "lost"}). Run with ``start()`` /
    ``stop()``; ``endpoint`` is its URL.
    """

    def __init__(self, target: str, *, throttle_every: int = 0, lose_commit: bool = False):
        import http.client
        import http.server
        import socketserver
        from urllib.parse import urlparse

        parsed = urlparse(target)
        proxy = self
        self.counts = {"requests": 0, "throttled": 0, "lost": 0}
        self._lock = threading.Lock()
        self._lose = lose_commit

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _handle(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                with proxy._lock:
                    proxy.counts["requests"] += 1
                    n = proxy.counts["requests"]
                    java = "aws-sdk-java" in (self.headers.get("User-Agent") or "")
                    throttle = throttle_every and not java and n % throttle_every == 0
                    lose = (proxy._lose and self.command == "PUT" and "/_delta_log/" in self.path
                            and self.path.split("?")[0].endswith(".json") and self.headers.get("If-None-Match"))
                    if throttle:
                        proxy.counts["throttled"] += 1
                    if lose:
                        proxy._lose = False
                        proxy.counts["lost"] += 1
                if throttle:
                    text = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>SlowDown</Code>'
                            b'<Message>Please reduce your request rate.</Message></Error>')
                    self.send_response(503)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(text)))
                    self.end_headers()
                    self.wfile.write(text)
                    return
                conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "connection"}
                conn.request(self.command, self.path, body=body, headers=headers)
                answer = conn.getresponse()
                data = answer.read()
                conn.close()
                if lose:  # the server did it; the client never hears
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.send_response(answer.status)
                for key, value in answer.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                # (a HEAD's Content-Length is the object's size, not the empty body's)
                length = answer.getheader("Content-Length") if self.command == "HEAD" else None
                self.send_header("Content-Length", length or str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server(("127.0.0.1", free_port()), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> "FaultProxy":
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def require_s3a_spark(spark) -> None:
    """Skip (fail under ISOLDE_S3A_REQUIRED=1, as ``make test`` sets it) when this process's
    SparkSession started without the S3A connector's JARs on its class path."""
    import pytest

    if "hadoop-aws" in spark.sparkContext.getConf().get("spark.jars", ""):
        return
    why = "this SparkSession started before the S3A JARs were fetched (no hadoop-aws in spark.jars)"
    if os.environ.get("ISOLDE_S3A_REQUIRED") == "1":
        pytest.fail(why + " although ISOLDE_S3A_REQUIRED=1")
    pytest.skip(why)
