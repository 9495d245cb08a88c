"""The faces of the engine, kept thin: FastAPI app and routes, MCP tools, CLI."""
from engine.core.errors import REMEDIES

# How this server's operator carries out a remedy an engine error names (its own CLI), appended to
# the error's title in every face's reply.
REMEDIES.update({
    "embed_model": "; run `refindery models --embed {model}` (beside a running server it embeds in the "
                   "server's background)",
    "create_key": " (refindery keys create --workspace '*')",
})
