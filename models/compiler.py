"""The brief compiler's model: one forced tool call to an OpenAI-compatible chat completions
endpoint (`POST {base_url}/chat/completions` with `tools` and a `tool_choice` naming the one tool).
This covers hosted APIs and local servers (llama.cpp, vLLM), over TCP or a Unix socket.

It knows nothing of relations: it sends the tool it is given and returns the arguments of the call
the model made, with the model's name and its usage figures.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import httpx


class CompilerFailed(RuntimeError):
    """The endpoint could not be reached, refused, or did not call the tool."""


@dataclass
class ToolCall:
    arguments: dict
    model: str
    usage: dict = field(default_factory=dict)


class ChatCompletionsCompiler:
    def __init__(self, base_url: str, model: str, api_key: str = "", uds: str = "", timeout_s: float = 60.0,
                 max_tokens: int = 2000):
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key = api_key
        self.uds = uds
        self.timeout_s = timeout_s
        self.max_tokens = max_tokens

    def describe(self) -> dict:
        return {"base_url": self.base_url, "model": self.model, "uds": self.uds or None}

    def call(self, system: str, user: str, tool: dict) -> ToolCall:
        body = {
            "model": self.model,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "tools": [{"type": "function", "function": {"name": tool["name"], "description": tool["description"],
                                                        "parameters": tool["input_schema"]}}],
            "tool_choice": {"type": "function", "function": {"name": tool["name"]}},
            "temperature": 0,
            "max_tokens": self.max_tokens,
        }
        headers = {"authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        transport = httpx.HTTPTransport(uds=self.uds) if self.uds else None
        try:
            with httpx.Client(transport=transport, timeout=self.timeout_s) as client:
                r = client.post(f"{self.base_url}/chat/completions", json=body, headers=headers)
        except httpx.HTTPError as exc:
            raise CompilerFailed(f"the compile endpoint could not be reached: {exc}") from exc
        if r.status_code != 200:
            raise CompilerFailed(f"the compile endpoint answered {r.status_code}: {r.text[:300]}")
        try:
            reply = r.json()
            calls = reply["choices"][0]["message"].get("tool_calls") or []
            call = next(c for c in calls if c["function"]["name"] == tool["name"])
            arguments = call["function"]["arguments"]
            arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
        except (ValueError, KeyError, IndexError, StopIteration, TypeError) as exc:
            raise CompilerFailed(f"the model did not call {tool['name']}: {exc}") from exc
        if not isinstance(arguments, dict):
            raise CompilerFailed(f"the model's call to {tool['name']} carried no object")
        return ToolCall(arguments, reply.get("model") or self.model, reply.get("usage") or {})


def compiler_from(base_url: str, model: str, api_key: str = "", uds: str = "", timeout_s: float = 60.0,
                  max_tokens: int = 2000) -> ChatCompletionsCompiler | None:
    """The configured compiler, or None when no endpoint is configured."""
    if not base_url:
        return None
    return ChatCompletionsCompiler(base_url, model, api_key, uds, timeout_s, max_tokens)
