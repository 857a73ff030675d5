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
