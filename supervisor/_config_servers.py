"""The ``mcpServers`` section of a config document: one `ServerSpec` per server.

Owns `ServerRules`: a server's name, the transport it takes (given as ``type`` or
``transport``, or implied by its fields) and the fields that transport allows,
foreign keys other clients write (a warning), interpolation of each field (a
disabled server's missing variables only warn), URLs, ``exposedTools``, session
scope and pool, and the server's own supervision knobs over the settings' defaults.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

from msgspec import UNSET

from mcpvisor._config_check import Checker
from mcpvisor._config_schema import (
    ExposedToolEntry,
    OAuthEntry,
    ServerEntry,
    convert_collecting,
    describe_type,
    field_names,
)
from mcpvisor._config_types import (
    APPLIES,
    FOREIGN,
    MAX_POOL,
    MAX_PORT,
    NAME_RE,
    NAME_RULE,
    PROTOCOLS,
    REQUIRED,
    SCOPES,
    SERVER_KEYS,
    TRANSPORT_FIELDS,
    URL_SCHEMES,
    Settings,
)
from mcpvisor.actors.core.spec import GRANTS, TOKEN_AUTH_METHODS, ExposedTool, OAuthSpec, ServerSpec
from mcpvisor.actors.core.vocabulary import HTTP_ALIASES, TRANSPORTS


class ServerRules(Checker):
    """The ``mcpServers`` rules of `mcpvisor._config_build._Builder`."""

    def server(self, name: str, raw: Any, settings: Settings) -> ServerSpec | None:
        where = f'server "{name}"'
        if not NAME_RE.match(name):
            self.problem("", f'server name "{name}" is invalid: {NAME_RULE}')
        if not isinstance(raw, Mapping):
            self.problem(where, f"expected an object, got {describe_type(raw)}")
            return None
        before = len(self.problems)
        entry, problems, dropped = convert_collecting(
            raw, ServerEntry, suggest=SERVER_KEYS,
            nested={"exposedTools": field_names(ExposedToolEntry), "oauth": field_names(OAuthEntry)},
        )
        for p in problems:
            self.problem(where, p)
        if entry is None:
            return None
        for key, note in FOREIGN.items():
            if key in raw:
                self.warn(where, f'field "{key}" {note}')
        enabled = True if entry.enabled is UNSET else entry.enabled
        if entry.disabled is not UNSET:
            if entry.enabled is not UNSET and entry.enabled == entry.disabled:
                self.problem(where, 'fields "enabled" and "disabled" contradict each other; keep one')
            enabled = not entry.disabled
        transport = self.transport(where, raw, entry, dropped)
        # A disabled server's missing variables must not block the rest: warn, keep literal.
        strict = enabled
        spec: dict[str, Any] = {}
        if transport is not None:
            for key in TRANSPORT_FIELDS:
                if key in raw and key not in dropped and key not in APPLIES[transport]:
                    self.problem(where, f'field "{key}" does not apply to transport "{transport}"')
            required = REQUIRED[transport]
            if required not in raw and not dropped:  # a dropped key is likely the misspelt one
                self.problem(where, f'transport "{transport}" needs field "{required}"')
        sub = functools.partial(self.sub, where, strict=strict)
        if entry.command is not UNSET:
            spec["command"] = sub("command", entry.command)
        if entry.args is not UNSET:
            spec["args"] = tuple(sub(f"args[{i}]", a) for i, a in enumerate(entry.args))
        if entry.env is not UNSET:
            spec["env"] = MappingProxyType({k: sub(f"env.{k}", v) for k, v in entry.env.items()})
        if entry.cwd is not UNSET:
            spec["cwd"] = self.local_path(sub("cwd", entry.cwd))
        if entry.url is not UNSET:
            spec["url"] = sub("url", entry.url)
            if transport is not None:
                self.check_url(where, transport, spec["url"])
        if entry.headers is not UNSET:
            spec["headers"] = MappingProxyType({k: sub(f"headers.{k}", v) for k, v in entry.headers.items()})
        if entry.oauth is not UNSET and transport in ("http", "sse"):
            spec["oauth"] = self.server_oauth(where, entry.oauth, sub)
        if entry.image is not UNSET:
            spec["image"] = sub("image", entry.image)
        if entry.docker_args is not UNSET:
            spec["docker_args"] = tuple(sub(f"dockerArgs[{i}]", a) for i, a in enumerate(entry.docker_args))
        if entry.protocol is not UNSET and self.choice(where, "protocol", entry.protocol, PROTOCOLS):
            spec["protocol"] = entry.protocol
        if entry.exposed_tools is not UNSET:
            spec["exposed_tools"] = self.exposed(where, entry.exposed_tools)
        if entry.scope is not UNSET and self.choice(where, "scope", entry.scope, SCOPES):
            spec["scope"] = entry.scope
        if entry.pool is not UNSET:
            if spec.get("scope") != "session":
                self.problem(where, 'field "pool" needs "scope": "session" '
                                    '(a shared server has one instance)')
            elif not 0 <= entry.pool <= MAX_POOL:
                self.problem(where, f'field "pool": {entry.pool} is out of range (0 to {MAX_POOL})')
            else:
                spec["pool"] = entry.pool
        hidden = [*([] if entry.hidden_tools is UNSET else entry.hidden_tools)]
        hidden += [] if entry.disabled_tools is UNSET else entry.disabled_tools
        own = self.knobs(where, entry)
        self.check_pairs(where, {**settings.server_defaults, **own}, own)
        if len(self.problems) > before or transport is None:
            return None
        return ServerSpec(
            name=name,
            transport=transport,
            enabled=enabled,
            lazy=False if entry.lazy is UNSET else entry.lazy,
            description=None if entry.description is UNSET else entry.description,
            hidden_tools=frozenset(hidden),
            raw=MappingProxyType(copy.deepcopy(dict(raw))),
            **spec,
            **{**settings.server_defaults, **own},
        )

    def transport(
        self, where: str, raw: Mapping[str, Any], entry: ServerEntry, dropped: set[str]
    ) -> str | None:
        """The server's transport: given (`type` or its alias `transport`) or implied."""
        given = [v for v in (entry.kind, entry.transport) if v is not UNSET]
        if len(given) == 2 and given[0] != given[1]:
            self.problem(
                where, f'fields "type" ("{given[0]}") and "transport" ("{given[1]}") disagree; give one'
            )
            return None
        if given:
            key = "type" if entry.kind is not UNSET else "transport"
            value = "http" if given[0] in HTTP_ALIASES else given[0]
            if not self.choice(where, key, value, TRANSPORTS):
                return None
            return value
        for key, implied in (("command", "stdio"), ("url", "http"), ("image", "stdio-docker")):
            if key in raw and key not in dropped:
                return implied
        if dropped:  # the misspelt or mistyped key already has its problem
            return None
        self.problem(where, 'needs "command" (stdio), "url" (http, sse, ws) or "image" (stdio-docker)')
        return None

    def check_url(self, where: str, transport: str, url: str) -> None:
        schemes = URL_SCHEMES.get(transport)
        if schemes is None:
            return
        parts = urlsplit(url)
        if parts.scheme not in schemes or not parts.netloc:
            want = " or ".join(f"{s}://..." for s in schemes)
            self.problem(
                where, f'field "url": "{url}" is not a URL transport "{transport}" can use (expected {want})'
            )

    def server_oauth(self, where: str, entry: OAuthEntry, sub: Any) -> OAuthSpec:
        """The ``oauth`` object: each field checked, ``${VAR}`` allowed in the client id and secret."""
        out: dict[str, Any] = {}
        if entry.client_id is not UNSET:
            out["client_id"] = sub("oauth.clientId", entry.client_id)
        if entry.client_secret is not UNSET:
            out["client_secret"] = sub("oauth.clientSecret", entry.client_secret)
        if entry.client_metadata_url is not UNSET:
            url = entry.client_metadata_url
            parts = urlsplit(url)
            if parts.scheme != "https" or not parts.netloc or parts.path in ("", "/"):
                self.problem(where, f'field "oauth.clientMetadataUrl": "{url}" must be an https URL '
                                    "with a path (the client's metadata document)")
            out["client_metadata_url"] = url
        if entry.callback_port is not UNSET:
            if not 1 <= entry.callback_port <= MAX_PORT:
                self.problem(where, f'field "oauth.callbackPort": {entry.callback_port} is not a port '
                                    f"(1 to {MAX_PORT})")
            out["callback_port"] = entry.callback_port
        if entry.scopes is not UNSET:
            scopes = entry.scopes.split() if isinstance(entry.scopes, str) else entry.scopes
            out["scopes"] = tuple(scopes)
        if entry.grant is not UNSET and self.choice(where, "oauth.grant", entry.grant, GRANTS):
            out["grant"] = entry.grant
        method = entry.token_endpoint_auth_method
        if method is not UNSET and self.choice(where, "oauth.tokenEndpointAuthMethod", method,
                                               TOKEN_AUTH_METHODS):
            out["token_endpoint_auth_method"] = method
        if entry.private_key_file is not UNSET:
            out["private_key_file"] = self.local_path(sub("oauth.privateKeyFile", entry.private_key_file))
        if out.get("grant") == "client_credentials":
            if "client_id" not in out:
                self.problem(where, 'field "oauth.clientId" is needed for "grant": "client_credentials"')
            if "client_secret" not in out and "private_key_file" not in out:
                self.problem(where, 'field "oauth.clientSecret" or "oauth.privateKeyFile" is needed for '
                                    '"grant": "client_credentials"')
        elif "private_key_file" in out:
            self.problem(where, 'field "oauth.privateKeyFile" applies to "grant": "client_credentials" only')
        if out.get("token_endpoint_auth_method") == "private_key_jwt" and "private_key_file" not in out:
            self.problem(where, 'field "oauth.tokenEndpointAuthMethod": "private_key_jwt" needs '
                                '"oauth.privateKeyFile"')
        return OAuthSpec(**out)

    def exposed(self, where: str, entries: list[str | ExposedToolEntry]) -> tuple[ExposedTool, ...]:
        out = []
        for i, item in enumerate(entries):
            tool = (
                ExposedTool(item, None) if isinstance(item, str) else ExposedTool(item.original, item.exposed)
            )
            if not tool.original or tool.exposed == "":
                self.problem(where, f'field "exposedTools[{i}]": a tool name cannot be empty')
            out.append(tool)
        return tuple(out)
