"""moto's S3 server on 127.0.0.1 for the tests of object storage (``outputs.uri``, the emit rehearsal)."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from typing import Iterator


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def moto_s3(*buckets: str) -> Iterator[dict[str, str]]:
    """A local S3 server (moto's server mode on a free loopback port) holding ``buckets``; the AWS variables
    that reach it are set in this process while it runs and handed back for child processes."""
    from moto import server as moto_server

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    port = free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    env = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        import boto3

        for b in buckets:
            boto3.client("s3").create_bucket(Bucket=b)
        yield env
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.stop()
