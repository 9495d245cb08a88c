"""The pages the history fixtures visit, served on 127.0.0.1: the fixture script (make_fixtures.py)
points a real browser at them, and the import's tests fetch them again. In `hostile` mode (the tests)
some paths misbehave as the web does: a redirect loop, a 50 MB page, a host that never answers, a PDF."""
from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT = 8765   # the port the fixtures' URLs name (the tests re-point them at their own server)

# path -> (title, text): made-up words, so that a page is found by its text alone
PAGES = {
    "/tides": ("Harbour tide tables", "The quillmoss tide tables of the harbour, kept by the pilot since spring."),
    "/nets": ("Mending nets", "Brantwick fishermen mend their nets on the northern quay before the herring run."),
    "/lamps": ("Lighthouse lamps", "The ferrowane lamp turns twice a minute above the rocks at the point."),
    "/ferry": ("Ferry timetable", "The solvicket ferry leaves at dawn and returns with the evening post."),
    "/gulls": ("Gull colony", "Marrowind gulls nest on the cliff ledges above the old boathouse."),
    "/docs/intro": ("Introduction", "Tindlebay rope splicing starts with the eye splice and the back splice."),
    "/moved": ("Moved here", "Corvastle charts moved to this address after the harbour office closed."),
    "/plain.txt": (None, "Plimsnort plain text notes on buoy colours and their meanings at night."),
}
REDIRECTS = {"/old-charts": "/moved", "/loop-a": "/loop-b", "/loop-b": "/loop-a"}
HOSTILE_REDIRECTS = {"/gulls": "/loop-a"}   # the page moved into a loop since it was visited
HOSTILE = {"/big", "/slow", "/report.pdf"}


def html(title: str, text: str) -> bytes:
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head><body><article>"
            f"<h1>{title}</h1><p>{text}</p><p>{text}</p></article></body></html>").encode()


class Site:
    def __init__(self, port: int = 0, hostile: bool = True):
        self.requests: list[tuple[str, dict]] = []
        self.hostile = hostile
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):   # noqa: N802 (http.server's name)
                site.requests.append((self.path, dict(self.headers)))
                path = self.path.split("?")[0]
                to = REDIRECTS.get(path) or (HOSTILE_REDIRECTS.get(path) if site.hostile else None)
                if to:
                    self.send_response(302)
                    self.send_header("Location", to)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if site.hostile and path == "/slow":
                    time.sleep(120)   # never answers within any timeout
                    return
                if site.hostile and path == "/big":
                    self.send_response(200)
                    self.send_header("Content-Type", "text/html")
                    self.end_headers()   # no length: the size cap must stop the read itself
                    chunk = b"<p>" + b"x" * 65533 + b"</p>"
                    try:
                        for _ in range(800):   # 52 MB
                            self.wfile.write(chunk)
                    except OSError:
                        pass
                    return
                if site.hostile and path == "/report.pdf":
                    body, kind = b"%PDF-1.4 not really", "application/pdf"
                elif path in PAGES:
                    title, text = PAGES[path]
                    body, kind = (text.encode(), "text/plain; charset=utf-8") if title is None else \
                        (html(title, text), "text/html; charset=utf-8")
                elif path in HOSTILE:
                    body, kind = html(path.strip("/"), "A page the browser saw quickly."), "text/html"
                else:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Set-Cookie", "session=from-the-site; Path=/")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.base = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def served(self, path: str) -> int:
        return sum(1 for p, _ in self.requests if p.split("?")[0] == path)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
