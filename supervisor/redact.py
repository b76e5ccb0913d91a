"""What a secret in a server entry looks like, and how every view hides it.

Owns the one rule set the log formatter, the status views (``get-server-status``,
``mcpvisor status``, the dashboard), ``mcpvisor mcp list/get/info`` and the journal use:

* `redact_entry`: a server entry as a person may see it: literal ``env`` and
  ``headers`` values, secret-looking ``args`` and URL query values, OAuth client
  secrets shown as `MASK` (a ``${VAR}`` reference stays as written: the secret lives in
  the environment, and the name says which one);
* `redact_args` / `redact_url`: the same for a command line or a URL on its own;
* `secret_values`: every literal value of a config that a log line, an error or a
  status view must never hold (front tokens, env and header values, the values
  `redact_args` and `redact_url` hide, OAuth client secrets);
* `scrub`: a text with those values replaced (for stderr lines, errors, payloads);
* `remember` / `known_secrets`: the values of every config this process has run, for the
  log formatter, the status views and the journal. Logging is process-wide, so is this
  list; it only grows (a token a reload removed was a secret all the same), and a
  reload adds the new config's values before any server it adds starts, so that
  server's first stderr line is already scrubbed.

What "looks like a key": a value after a flag named for a secret (``--api-key X``,
``--token=X``, ``-e API_KEY=X``), a URL query parameter named for one (``?api_key=``),
or a value with a well-known credential prefix (``sk-``, ``ghp_``, ``xoxb-``, ``AKIA``,
a JWT) or long and random enough to be one.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

__all__ = [
    "MASK",
    "MIN_SECRET_CHARS",
    "REDACTED",
    "known_secrets",
    "looks_secret",
    "redact_args",
    "redact_entry",
    "redact_url",
    "remember",
    "scrub",
    "scrub_known",
    "secret_values",
    "server_secrets",
]

MASK: Final = "***"
"""A hidden value in an entry (the dashboard sends it back to mean "keep the stored one")."""

REDACTED: Final = "[redacted]"
"""A hidden value inside a line of text (a log line, an error, a payload)."""

MIN_SECRET_CHARS: Final = 6
"""Values shorter than this are not scrubbed from text: a ``"1"`` or ``"true"`` is no
secret, and scrubbing it would garble every line holding that digit."""

SECRET_WORDS: Final = (
    "key", "apikey", "token", "secret", "password", "passwd", "pwd", "pass", "auth",
    "authorization", "credential", "credentials", "bearer", "sig", "signature", "jwt",
)
"""The last word of a flag, variable or query parameter name that says its value is a
secret (``--api-key``, ``GITHUB_TOKEN``, ``access_token``, ``client-secret``)."""

_WORD_SPLIT: Final = re.compile(r"[-_.]+")

KNOWN_PREFIXES: Final = re.compile(
    r"^(?:sk-|sk_live_|sk_test_|rk_live_|pk_live_|ghp_|gho_|ghu_|ghs_|ghr_|github_pat_|glpat-|xox[abposr]-"
    r"|AKIA|ASIA|AIza|hf_|npm_|pypi-|shpat_|sq0atp-)[A-Za-z0-9_\-./+=]{8,}$"
)
"""Credential formats with a published prefix (OpenAI/Anthropic, Stripe, GitHub, GitLab,
Slack, AWS, Google, Hugging Face, npm, PyPI, Shopify, Square)."""

JWT: Final = re.compile(r"^eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*$")

RANDOM_MIN_CHARS: Final = 24
"""A value this long or longer, made of token characters only, mixing upper case, lower
case and digits often and with high entropy, is taken for a key (a 40-hex git sha or a
UUID mixes two classes only and stays visible)."""

RANDOM_MIN_BITS_PER_CHAR: Final = 3.5
"""Shannon entropy per character above which a long mixed value is random (English words
and identifiers stay below it; base64 of 24 random bytes is about 4.5)."""

RANDOM_MIN_CHANGES: Final = 0.3
"""Share of adjacent characters that switch between upper case, lower case and digit: about
0.6 in random base62, under 0.2 in camel-case identifiers."""

_TOKEN_CHARS: Final = re.compile(r"^[A-Za-z0-9_\-+/=.~]+$")


def _secret_name(name: str) -> bool:
    """Whether a flag, variable or parameter name says its value is a secret."""
    words = [w for w in _WORD_SPLIT.split(name.lstrip("-").lower()) if w]
    return bool(words) and (words[-1] in SECRET_WORDS or words[-1].endswith(("apikey", "token", "secret")))


def _random(value: str) -> bool:
    if len(value) < RANDOM_MIN_CHARS or not _TOKEN_CHARS.match(value) or "/" in value.strip("/"):
        return False
    kinds = [_kind(c) for c in value]
    if len(set(kinds) - {"other"}) < 3:
        return False
    changes = sum(a != b for a, b in itertools.pairwise(kinds))
    if changes < RANDOM_MIN_CHANGES * len(value):
        return False  # an identifier (``ModelContextProtocolServer2``) changes case at word ends only
    counts = Counter(value)
    bits = -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())
    return bits >= RANDOM_MIN_BITS_PER_CHAR


def _kind(c: str) -> str:
    if c.isdigit():
        return "digit"
    if c.isupper():
        return "upper"
    return "lower" if c.islower() else "other"


def looks_secret(value: str) -> bool:
    """Whether ``value`` on its own looks like a credential (known prefix, JWT, random)."""
    value = value.strip()
    return bool(KNOWN_PREFIXES.match(value) or JWT.match(value) or _random(value))


def _is_reference(value: str) -> bool:
    return "${" in value


def redact_args(args: Sequence[str]) -> list[str]:
    """``args`` with secret values as `MASK`: after a secret flag (``--api-key X``,
    ``--token=X``), in a secret ``NAME=value`` (``-e API_KEY=X``), or looking like a key."""
    out: list[str] = []
    after_flag = False
    for arg in args:
        if after_flag and not arg.startswith("-"):
            out.append(arg if _is_reference(arg) else MASK)
            after_flag = False
            continue
        after_flag = False
        name, eq, value = arg.partition("=")
        if eq and value and (_secret_name(name) or looks_secret(value)):
            out.append(f"{name}={value if _is_reference(value) else MASK}")
        elif arg.startswith("-") and not eq and _secret_name(arg):
            out.append(arg)
            after_flag = True
        elif not _is_reference(arg) and looks_secret(arg):
            out.append(MASK)
        else:
            out.append(arg)
    return out


def redact_url(url: str) -> str:
    """``url`` with a password, secret query values and key-like path segments as `MASK`."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return MASK if looks_secret(url) else url
    netloc = parts.netloc
    if "@" in netloc:
        user, _, host = netloc.rpartition("@")
        name, colon, _password = user.partition(":")
        netloc = f"{MASK if looks_secret(name) else name}{':' + MASK if colon else ''}@{host}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        hidden = [
            (k, MASK if v and not _is_reference(v) and (_secret_name(k) or looks_secret(v)) else v)
            for k, v in pairs
        ]
        if hidden != pairs:
            query = urlencode(hidden, safe="*${}")
    path = "/".join(MASK if looks_secret(seg) else seg for seg in parts.path.split("/"))
    return urlunsplit((parts.scheme, netloc, path, query, parts.fragment))


def _mask_map(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v if not isinstance(v, str) or _is_reference(v) else MASK for k, v in values.items()}


def redact_entry(entry: Mapping[str, Any]) -> dict[str, Any]:
    """A server entry (as in the config file) with every secret in it as `MASK`.

    ``env`` and ``headers`` values are all hidden (any of them may be a credential); ``args``
    (and docker's ``dockerArgs``) through `redact_args`; ``url`` through `redact_url`; an
    ``oauth.clientSecret``. ``${VAR}`` references are kept as written.
    """
    out = dict(entry)
    for key in ("env", "headers"):
        values = out.get(key)
        if isinstance(values, Mapping):
            out[key] = _mask_map(values)
    for key in ("args", "dockerArgs"):
        values = out.get(key)
        if isinstance(values, list) and all(isinstance(v, str) for v in values):
            out[key] = redact_args(values)
    if isinstance(out.get("url"), str):
        out["url"] = redact_url(out["url"])
    oauth = out.get("oauth")
    if isinstance(oauth, Mapping) and isinstance(oauth.get("clientSecret"), str):
        secret = oauth["clientSecret"]
        out["oauth"] = {**oauth, "clientSecret": secret if _is_reference(secret) else MASK}
    return out


def _hidden(shown: Sequence[str], real: Sequence[str]) -> Iterable[str]:
    """The parts of ``real`` that ``shown`` (its redaction) hides."""
    for s, r in zip(shown, real, strict=True):
        if s != r:
            yield r.partition("=")[2] if s.endswith("=" + MASK) else r


def _url_secrets(url: str) -> Iterable[str]:
    try:
        parts = urlsplit(url)
    except ValueError:
        return
    if "@" in parts.netloc:
        user = parts.netloc.rpartition("@")[0]
        yield from (p for p in user.split(":", 1)[1:])
    for k, v in parse_qsl(parts.query, keep_blank_values=True):
        if v and (_secret_name(k) or looks_secret(v)):
            yield v
    yield from (seg for seg in parts.path.split("/") if looks_secret(seg))


def secret_values(config: Any, extra: Iterable[str] = ()) -> list[str]:
    """Every value of ``config`` (a `mcpvisor.config.Config`) no text may show, longest first.

    Args:
        config: the loaded config (values already interpolated).
        extra: more values (the front's tokens from ``$MCPVISOR_TOKEN`` or a token file).
    """
    found: set[str] = {v for v in extra if v}
    found.update(config.settings.auth_tokens.values())
    store = getattr(config.settings, "store", None)
    if store:  # the shared store's URL may carry its password (`mcpvisor.pgstore`)
        found.update(_url_secrets(store))
    for spec in config.servers.values():
        found.update(server_secrets(spec))
    return sorted((s for s in found if len(s) >= MIN_SECRET_CHARS), key=len, reverse=True)


def server_secrets(spec: Any) -> list[str]:
    """The secret values of one server (a `mcpvisor.config.ServerSpec`), longest first."""
    found: set[str] = set()
    for mapping in (getattr(spec, "env", None) or {}, getattr(spec, "headers", None) or {}):
        for value in mapping.values():
            found.add(value)
            found.update(value.split())  # "Bearer abc": the credential on its own too
    for args in (getattr(spec, "args", ()) or (), getattr(spec, "docker_args", ()) or ()):
        found.update(_hidden(redact_args(list(args)), list(args)))
    url = getattr(spec, "url", None)
    if url:
        found.update(_url_secrets(url))
    oauth = getattr(spec, "oauth", None)
    secret = getattr(oauth, "client_secret", None)
    if isinstance(secret, str):
        found.add(secret)
    return sorted((s for s in found if len(s) >= MIN_SECRET_CHARS), key=len, reverse=True)


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` with each of ``secrets`` (longest first, as `secret_values` orders them)
    replaced by `REDACTED`."""
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


class _Book:
    """The process's secret values, longest first (so a value holding another goes first)."""

    def __init__(self) -> None:
        self.values: tuple[str, ...] = ()

    def add(self, values: Iterable[str]) -> None:
        merged = set(self.values).union(v for v in values if len(v) >= MIN_SECRET_CHARS)
        self.values = tuple(sorted(merged, key=len, reverse=True))


_BOOK: Final = _Book()


def remember(values: Iterable[str]) -> None:
    """Add ``values`` (from `secret_values`) to what every log line, status view and journal
    payload of this process is scrubbed of. Never forgets."""
    _BOOK.add(values)


def known_secrets() -> tuple[str, ...]:
    """Every value `remember` was given, longest first."""
    return _BOOK.values


def scrub_known(text: str) -> str:
    """`scrub` with `known_secrets`."""
    return scrub(text, _BOOK.values)
