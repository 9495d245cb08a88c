"""The HTTP face: one router per verb, each route parses, resolves the caller's grant, calls one
Engine method and shapes the reply. `server/app.py` only assembles them."""
