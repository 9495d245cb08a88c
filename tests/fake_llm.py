"""A FAKE OpenAI-compatible chat completions server for the model paths (the brief compiler, the
document reader): real HTTP, canned tool calls. It listens on a Unix socket rather than 127.0.0.1
because the suite must pass under `unshare -n`, where loopback TCP is unreachable; the client
speaks the same HTTP either way."""
from __future__ import annotations

import http.server
import json
import socketserver
import threading
from contextlib import contextmanager


class FakeChatCompletions(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """Records each request and answers with a tool call whose arguments are `arguments` (a dict,
    or a function of the request body), or with `status` when it is not 200."""
    daemon_threads = True

    def __init__(self, path, arguments=None):
        self.requests, self.status, self.arguments = [], 200, arguments or {}
        super().__init__(path, _Handler)


class _Handler(http.server.BaseHTTPRequestHandler):
    def address_string(self):   # a Unix socket has no client address
        return "fake"

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        self.server.requests.append({"path": self.path, "auth": self.headers.get("authorization"), "body": body})
        tool = body["tools"][0]["function"]["name"]
        arguments = self.server.arguments(body) if callable(self.server.arguments) else self.server.arguments
        reply = {"model": "fake-compiler-1", "usage": {"prompt_tokens": 900, "completion_tokens": 120},
                 "choices": [{"message": {"role": "assistant", "tool_calls": [
                     {"id": "call_1", "type": "function",
                      "function": {"name": tool, "arguments": json.dumps(arguments)}}]}}]}
        data = json.dumps(reply if self.server.status == 200 else {"error": "overloaded"}).encode()
        self.send_response(self.server.status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@contextmanager
def serving(path, arguments=None):
    server = FakeChatCompletions(str(path), arguments)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def compiler_settings(server) -> dict:
    """The [compiler] settings that point at this fake."""
    return {"base_url": "http://fake-llm/v1", "model": "fake-compiler-1", "api_key": "sk-test",
            "uds": server.server_address}
