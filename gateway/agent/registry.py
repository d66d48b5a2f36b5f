"""Agents by spec.

    echo                                          "You said: ..." (the default)
    openai+http://host:port/v1?model=NAME&system=PROMPT&max_tokens=200&temperature=0.7
                  &timeout=20&token_timeout=10&connect_timeout=3&key_env=VAR
    openai+https://...                            any OpenAI-compatible chat server
    python:module:function                        an embedder's hook (gateway.agent.hook)

Query values are percent-encoded (``system=Be%20brief.``). ``key_env`` names an environment
variable holding the bearer token; the key itself never goes in a spec.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit, urlunsplit

from gateway.agent.base import Agent
from gateway.agent.echo import EchoAgent
from gateway.agent.hook import HookAgent
from gateway.agent.openai_chat import ChatConfig, OpenAIChatAgent

DEFAULT_SPEC = "echo"
_KEYS = {"model", "system", "max_tokens", "temperature", "timeout", "token_timeout",
         "connect_timeout", "key_env"}


def parse_chat_spec(spec: str) -> ChatConfig:
    parts = urlsplit(spec.strip().removeprefix("openai+"))
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"bad chat spec {spec!r}: use openai+http(s)://HOST:PORT/v1?model=...")
    params = dict(parse_qsl(parts.query, keep_blank_values=True))
    unknown = sorted(set(params) - _KEYS)
    if unknown:
        raise ValueError(f"unknown keys {unknown} in agent spec {spec!r};"
                         f" known: {', '.join(sorted(_KEYS))}")
    if not params.get("model"):
        raise ValueError(f"agent spec {spec!r} needs model=NAME")
    base = urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/") or "/v1", "", ""))
    values: dict[str, object] = {"base_url": base, "model": params["model"]}
    try:
        if "system" in params:
            values["system"] = params["system"]
        if "max_tokens" in params:
            values["max_tokens"] = int(params["max_tokens"])
        if "temperature" in params:
            values["temperature"] = float(params["temperature"])
        for key, field in (("timeout", "first_token_timeout"), ("token_timeout", "token_timeout"),
                           ("connect_timeout", "connect_timeout")):
            if key in params:
                values[field] = float(params[key])
        if params.get("key_env"):
            values["api_key_env"] = params["key_env"]
        return ChatConfig(**values)  # type: ignore[arg-type]
    except ValueError as exc:
        raise ValueError(f"bad agent spec {spec!r}: {exc}") from exc


def build_agent(spec: str = DEFAULT_SPEC) -> Agent:
    spec = spec.strip() or DEFAULT_SPEC
    if spec == "echo":
        return EchoAgent()
    if spec.startswith("python:"):
        return HookAgent(spec.removeprefix("python:"))
    if spec.startswith(("openai+http://", "openai+https://")):
        config = parse_chat_spec(spec)
        return OpenAIChatAgent(config, name=urlsplit(config.base_url).hostname or "openai")
    raise ValueError(f"unknown agent spec {spec!r}: use echo,"
                     " openai+http(s)://HOST:PORT/v1?model=... or python:module:function")
