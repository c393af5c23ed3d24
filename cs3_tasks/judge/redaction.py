"""Credentials out of everything written or printed: URL user info, credential query values, bearer tokens
and the secrets themselves (the API key), in error texts, judge replies and configs."""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, unquote, urlsplit

REDACTED = "***"

# Query parameters whose value is a credential (api-key=, key=, token=, sig=, password=, ...).
_SECRET_NAME = re.compile(
    r"(?i)(?:^|[-_.])(?:api[-_]?key|key|token|access[-_]?token|secret|password|passwd|pwd|"
    r"sig|signature|auth|authorization|credential)$"
)
_QUERY_PARAM = re.compile(r"([?&;])([A-Za-z0-9_.-]+)=([^&#\s'\"<>,)]*)")
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@'\"<>]+@")
# "Bearer sk-..." / "Authorization: Basic ..." in an error text or an echoed header.
_AUTH_HEADER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}")


def redact(text: str | None, *secrets: str | None) -> str | None:
    """``text`` with credentials replaced by ``***``, for anything written or printed.

    Redacted: the user:password of every URL (``http://u:p@host`` -> ``http://***@host``), the value of
    credential-like query parameters (``api-key``, ``key``, ``token``, ``sig``, ``password``, ...; the
    other parameters are kept), ``Bearer``/``Basic`` tokens, and every occurrence of each of ``secrets``
    (e.g. the API key; strings shorter than 4 characters are not searched for). None stays None.
    """
    if text is None:
        return None
    text = str(text)
    for secret in sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    text = _USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
    text = _QUERY_PARAM.sub(
        lambda m: f"{m.group(1)}{m.group(2)}={REDACTED}" if _SECRET_NAME.search(m.group(2)) else m.group(0),
        text,
    )
    return _AUTH_HEADER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)


def url_secrets(url: str) -> list[str]:
    """The credentials written in a URL (its user info and credential-like query values), to pass to
    `redact` for texts that hold them without the URL around them (e.g. a server's error message)."""
    parts = urlsplit(url)
    found = [parts.username, parts.password, unquote(parts.username or ""), unquote(parts.password or "")]
    found += [value for name, value in parse_qsl(parts.query) if _SECRET_NAME.search(name)]
    return [secret for secret in found if secret]
