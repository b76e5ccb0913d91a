"""``settings.authTokens`` entries that carry a toolset: parsed, interpolated, checked."""

from __future__ import annotations

from typing import Any

import pytest

from mcpvisor.config import ConfigError, parse_config
from mcpvisor.reload_plan import live_settings

CI_TOKEN = "c" * 40
PLAIN_TOKEN = "p" * 40


def _settings(tokens: dict[str, Any], env: dict[str, str] | None = None) -> Any:
    return parse_config({"mcpServers": {}, "settings": {"authTokens": tokens}}, env=env or {}).settings


def test_object_form_binds_a_toolset_and_the_string_form_is_unchanged() -> None:
    settings = _settings({"ci": {"token": "${CI_TOKEN}", "toolset": "${CI_TOOLSET}"}, "laptop": PLAIN_TOKEN},
                         env={"CI_TOKEN": CI_TOKEN, "CI_TOOLSET": "dev"})
    assert dict(settings.auth_tokens) == {"ci": CI_TOKEN, "laptop": PLAIN_TOKEN}
    assert dict(settings.token_toolsets) == {"ci": "dev"}


def test_object_form_without_a_toolset_is_a_plain_token() -> None:
    settings = _settings({"ci": {"token": CI_TOKEN}})
    assert dict(settings.auth_tokens) == {"ci": CI_TOKEN}
    assert dict(settings.token_toolsets) == {}


@pytest.mark.parametrize(("tokens", "problem"), [
    ({"ci": {"token": CI_TOKEN, "toolset": "a b"}},
     'field "authTokens.ci.toolset": "a b" is not a toolset name'),
    ({"ci": {"toolset": "dev"}}, 'field "authTokens.ci": missing required field "token"'),
    ({"ci": {"token": CI_TOKEN, "toolsets": "dev"}}, 'field "authTokens.ci": unknown field "toolsets"'),
    ({"ci": {"token": "short", "toolset": "dev"}}, 'field "authTokens.ci.token": the token is shorter'),
    ({"ci": {"token": CI_TOKEN, "toolset": "${NOT_SET_ANYWHERE}"}}, 'field "authTokens.ci.toolset"'),
])
def test_bad_entries_name_the_field(tokens: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError) as err:
        _settings(tokens)
    assert problem in str(err.value)
    assert CI_TOKEN not in str(err.value)  # a problem never quotes a token


def test_a_reload_applies_a_changed_binding() -> None:
    old = _settings({"ci": {"token": CI_TOKEN, "toolset": "dev"}})
    new = _settings({"ci": {"token": CI_TOKEN, "toolset": "ops"}})
    assert dict(live_settings(old, new).token_toolsets) == {"ci": "ops"}
