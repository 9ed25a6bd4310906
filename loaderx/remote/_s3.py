"""The S3 client of loaderx: ``s3://bucket/prefix`` URLs and an obstore
``S3Store`` configured from explicit options, the ``AWS_*`` environment and
the AWS shared files, with every failure turned into a
:class:`~loaderx.errors.RemoteError` that names the object and what went
wrong. ``remote.upload`` and ``remote._cache`` (reading through a local
cache) both build on it.

The client is obstore's ``S3Store`` (``pip install 'loaderx[s3]'``): one
dependency-free wheel whose requests run in Rust with the GIL released.
Against a local SeaweedFS (scripts/bench/s3client.py) it read 64 KiB ranges
1.7-3x faster than boto3 and s3fs from one thread and 2-4x from four, the
pattern of a chunk cache, matched them within 0.75-1.0x on 8 MiB ranges and
whole objects, imports in milliseconds instead of 150-500 ms, and retries
with backoff under bounded timeouts by itself. Settings come, in this order,
from explicit options, the AWS_* environment variables, and the AWS shared
files (``~/.aws/credentials``, ``~/.aws/config``; ``AWS_PROFILE`` or
``profile=`` picks the profile). A profile whose credentials are not static
keys (SSO, an assumed role, a credential process) is resolved through boto3
when it is installed.
"""

from __future__ import annotations

import configparser
import contextlib
import datetime
import os
import re
from typing import Any

from loaderx.errors import ForkError, RemoteError

__all__ = [
    "parse_url", "client", "remote_error", "import_obstore", "short", "OPTIONS", "DEFAULT_TIMEOUT",
    "DEFAULT_RETRIES", "Settings", "settings", "backoff",
]

#: Seconds one attempt of a request may take (connect, send, receive)
#: before it counts as stalled and is tried again.
DEFAULT_TIMEOUT = 60.0
#: Retries of a failed attempt (connection refused or reset, a stall, 5xx,
#: a body cut short) with exponential backoff from 100 ms; 3 keep a dead
#: endpoint's error near 1 s.
DEFAULT_RETRIES = 3
#: the backoff before retry k (from 0): 100 ms doubling, at most 5 s
_BACKOFF0, _BACKOFF_MAX = 0.1, 5.0
_INSTALL = "pip install 'loaderx[s3]'"
#: the options client() takes, besides the URL
OPTIONS = frozenset(
    {"endpoint_url", "access_key_id", "secret_access_key", "session_token", "region", "profile", "allow_http",
     "timeout", "retries", "deadline"}
)


def backoff(k: int) -> float:
    """Seconds to wait before retry ``k`` (0 for the first)."""
    return min(_BACKOFF_MAX, _BACKOFF0 * 2.0**k)


class Settings:
    """The time limits of requests: ``timeout`` bounds one attempt,
    ``retries`` the attempts after the first, ``deadline`` one read with all
    its attempts and backoffs (default: every attempt timing out, plus the
    backoffs between them)."""

    def __init__(self, timeout: float, retries: int, deadline: float | None) -> None:
        self.timeout, self.retries = timeout, retries
        self.deadline = deadline if deadline is not None else \
            (retries + 1) * timeout + sum(backoff(k) for k in range(retries))


def settings(options: dict[str, Any]) -> Settings:
    """The :class:`Settings` of client options (ValueError for bad ones)."""
    timeout = options.get("timeout")
    timeout = DEFAULT_TIMEOUT if timeout is None else float(timeout)
    retries = options.get("retries")
    retries = DEFAULT_RETRIES if retries is None else int(retries)
    deadline = options.get("deadline")
    deadline = None if deadline is None else float(deadline)
    if timeout <= 0 or retries < 0 or (deadline is not None and deadline <= 0):
        raise ValueError(f"timeout and deadline must be > 0 and retries >= 0, got timeout={timeout!r}, "
                         f"retries={retries!r}, deadline={deadline!r}")
    return Settings(timeout, retries, deadline)


#: the process that made a client (and so started obstore's runtime)
_RUNTIME_PID: int | None = None


def parse_url(url: str) -> tuple[str, str]:
    """``"s3://bucket/some/prefix"`` -> ``("bucket", "some/prefix")``.

    The prefix has no leading or trailing ``/`` (``""`` for the bucket's
    root). Raises ValueError quoting the URL for another scheme, an empty
    bucket, or a prefix with empty, ``.`` or ``..`` parts.
    """
    if not isinstance(url, str):
        raise TypeError(f"an S3 URL must be a str, got {url!r}")
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() != "s3":
        raise ValueError(f"{url!r} is not an s3:// URL (expected s3://bucket/prefix)")
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise ValueError(f"{url!r} names no bucket (expected s3://bucket/prefix)")
    if any(c in bucket for c in "?#") or bucket != bucket.strip():
        raise ValueError(f"{url!r}: bucket name {bucket!r} is not valid")
    prefix = prefix.rstrip("/")
    if prefix and any(part in ("", ".", "..") for part in prefix.split("/")):
        raise ValueError(f"{url!r}: the key prefix {prefix!r} has an empty, '.' or '..' part")
    return bucket, prefix


def import_obstore() -> Any:
    try:
        import obstore
        import obstore.store  # the S3Store class
    except ImportError as e:
        raise ImportError(f"s3:// URLs need obstore: {_INSTALL} ({e})") from e
    return obstore


def _aws_file(env: str, default: str) -> configparser.RawConfigParser:
    cp = configparser.RawConfigParser()
    path = os.environ.get(env) or os.path.join(os.path.expanduser("~"), ".aws", default)
    with contextlib.suppress(OSError, configparser.Error):
        cp.read(path)
    return cp


def _profile(name: str | None) -> dict[str, str]:
    """The settings of an AWS profile from the shared files (credentials
    first, then config); ``{}`` when there are none. A named profile that
    neither file has is a ValueError."""
    explicit = name is not None or "AWS_PROFILE" in os.environ
    name = name or os.environ.get("AWS_PROFILE") or "default"
    creds = _aws_file("AWS_SHARED_CREDENTIALS_FILE", "credentials")
    conf = _aws_file("AWS_CONFIG_FILE", "config")
    section = name if name == "default" else f"profile {name}"
    found: dict[str, str] = {}
    if conf.has_section(section):
        found.update(conf.items(section))
    elif conf.has_section(name):
        found.update(conf.items(name))
    if creds.has_section(name):
        found.update(creds.items(name))
    if not found and explicit and name != "default":
        raise ValueError(f"AWS profile {name!r} is in neither the AWS credentials nor the config file")
    if found:
        found["__name__"] = name
    return found


def client(url: str, **options: Any) -> Any:
    """An obstore ``S3Store`` for the bucket of ``url`` (keys are given in
    full, the URL's prefix included).

    Options (each overrides the environment and the AWS profile):
    ``endpoint_url``, ``access_key_id``, ``secret_access_key``,
    ``session_token``, ``region``, ``profile`` (a profile of the AWS shared
    files), ``allow_http`` (default: true when the endpoint is ``http://``),
    ``timeout`` (seconds one attempt of a request may take, default 60),
    ``retries`` (attempts after the first, with backoff, default 3) and
    ``deadline`` (seconds one request may take with all its attempts;
    default: every attempt timing out, plus the backoffs).

    Raises:
        ImportError: obstore is missing (naming ``pip install 'loaderx[s3]'``).
        ValueError: an unknown option, or a profile that does not exist.
    """
    global _RUNTIME_PID
    if _RUNTIME_PID is not None and os.getpid() != _RUNTIME_PID:
        raise ForkError(
            f"{url!r}: this process was forked from one that used the S3 client, whose runtime does not "
            "survive fork() (a request would hang): start workers with 'spawn' instead"
        )
    unknown = sorted(set(options) - OPTIONS)
    if unknown:
        raise ValueError(f"unknown S3 option(s) {unknown} for {url!r}; known: {sorted(OPTIONS)}")
    bucket, _ = parse_url(url)
    obstore = import_obstore()
    env = os.environ
    config: dict[str, Any] = {}
    provider = None
    have_keys = options.get("access_key_id") is not None or ("AWS_ACCESS_KEY_ID" in env and "profile" not in options)
    prof = {} if have_keys else _profile(options.get("profile"))
    if prof:
        if "aws_access_key_id" in prof and "aws_secret_access_key" in prof:
            config["access_key_id"] = prof["aws_access_key_id"]
            config["secret_access_key"] = prof["aws_secret_access_key"]
            if "aws_session_token" in prof:
                config["token"] = prof["aws_session_token"]
        elif any(k in prof for k in ("role_arn", "sso_session", "sso_start_url", "credential_process")):
            provider = _boto3_provider(prof["__name__"], url)
        if "region" in prof:
            config["region"] = prof["region"]
        if "endpoint_url" in prof:
            config["endpoint"] = prof["endpoint_url"]
    for opt, key in (("access_key_id", "access_key_id"), ("secret_access_key", "secret_access_key"),
                     ("session_token", "token"), ("region", "region"), ("endpoint_url", "endpoint")):
        if options.get(opt) is not None:
            config[key] = options[opt]
    endpoint = config.get("endpoint") or env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") \
        or env.get("AWS_ENDPOINT")
    if endpoint and "endpoint" not in config:
        config["endpoint"] = endpoint
    if "region" not in config and not (env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")):
        config["region"] = "us-east-1"  # what S3-compatible servers accept; AWS redirects otherwise
    allow_http = options.get("allow_http")
    if allow_http is None:
        flag = env.get("AWS_ALLOW_HTTP")
        allow_http = flag.lower() in ("1", "true", "yes") if flag else str(endpoint or "").startswith("http://")
    limits = settings(options)
    client_options = {
        "allow_http": bool(allow_http),
        "connect_timeout": datetime.timedelta(seconds=min(limits.timeout, 5.0)),
        "timeout": datetime.timedelta(seconds=limits.timeout),
    }
    # the client retries what fails before a response arrives (refused,
    # reset, stalled, 5xx) within the deadline: a stall costs one attempt,
    # not the whole budget
    retry_config = {
        "max_retries": limits.retries,
        "retry_timeout": datetime.timedelta(seconds=limits.deadline),
        "backoff": {
            "init_backoff": datetime.timedelta(seconds=_BACKOFF0),
            "max_backoff": datetime.timedelta(seconds=_BACKOFF_MAX),
            "base": 2,
        },
    }
    _RUNTIME_PID = os.getpid()
    try:
        return obstore.store.S3Store(
            bucket, config=config, client_options=client_options, retry_config=retry_config,
            credential_provider=provider,
        )
    except Exception as e:  # obstore's configuration errors
        raise ValueError(f"cannot configure an S3 client for {url!r}: {short(e)}") from None


def _boto3_provider(profile: str, url: str) -> Any:
    try:
        import boto3
        from obstore.auth.boto3 import Boto3CredentialProvider
    except ImportError as e:
        raise ImportError(
            f"AWS profile {profile!r} (for {url!r}) takes its credentials from SSO, a role or a process, "
            f"which needs boto3: pip install boto3 ({e})"
        ) from e
    return Boto3CredentialProvider(boto3.Session(profile_name=profile))


def short(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text if len(text) <= 400 else text[:400] + " ..."


#: words of a failure to reach the endpoint at all (obstore's own retry
#: settings, printed in every message, name "retry_timeout": not one of them)
_UNREACHABLE = ("connect", "connection", "timed out", "dns", "refused", "error sending request")


def _attempts(low: str) -> int | None:
    """The attempts a client error says were made (retries + 1)."""
    m = re.search(r"after (\d+) retries", low) or re.search(r"\bretries: (\d+)", low)
    return int(m.group(1)) + 1 if m else None


def remote_error(e: Exception, url: str, key: str, action: str, limits: Settings | None = None,
                 attempts: int | None = None, endpoint: str | None = None) -> RemoteError:
    """The client's exception ``e`` as a RemoteError that says what failed:
    a server that stalled (no answer within the timeout, on every attempt),
    refused the connection (nothing listens), could not be reached at all,
    reset the connection, or answered with an error."""
    from obstore import exceptions as ox

    where = f"s3://{parse_url(url)[0]}/{key}" if key else url
    text = short(e)
    low = " ".join(str(e).split()).lower()  # all of it: the cause often comes after the first 400 characters
    n = attempts or _attempts(low)
    tries = f"{n} attempt{'s' if n != 1 else ''}" if n else "every attempt"
    at = f" at {endpoint}" if endpoint else ""
    if isinstance(e, (ox.PermissionDeniedError, ox.UnauthenticatedError, PermissionError)) or any(
        s in low for s in ("accessdenied", "signaturedoesnotmatch", "invalidaccesskeyid", "403 forbidden")
    ):
        why = "the server refused the credentials (wrong access key or secret, or no permission)"
    elif "nosuchbucket" in low:
        why = f"bucket {parse_url(url)[0]!r} does not exist"
    elif isinstance(e, (ox.NotFoundError, FileNotFoundError)):
        why = "no such object"
    elif re.search(r"\b5\d\d\b[^\n]{0,40}(internal|service|unavailable|gateway|server)|server error", low):
        code = re.search(r"\b(5\d\d)\b", low)
        why = f"the server answered with an error (HTTP {code.group(1) if code else '5xx'}) on {tries}"
    elif "connectionrefused" in low or "connection refused" in low:
        why = (f"the connection was refused{at} ({tries}): no server listens there (server down, or a wrong "
               "endpoint_url)")
    elif ("kind: timeout" in low or "operation timed out" in low) and "connect" not in low:
        secs = f"{limits.timeout:g} s" if limits else "the timeout"
        why = f"no answer in {secs}, {tries}: the server stalled (it accepted the connection but did not answer)"
    elif "connectionreset" in low or "connection reset" in low or "incompletebody" in low \
            or "body error" in low or "unexpectedeof" in low:
        why = f"the connection was reset or cut off mid-answer ({tries})"
    elif any(s in low for s in _UNREACHABLE) or re.search(r"(?<!retry_)timeout", low):
        why = f"the endpoint cannot be reached{at} ({tries}; server down, wrong endpoint_url, or a network problem)"
    else:
        why = "the request failed"
    return RemoteError(f"{action} {where}: {why}: {text}", url=url)
