"""The faces of the engine, kept thin: FastAPI app and routes, CLI."""
