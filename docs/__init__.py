"""Documentation that runs: docs.examples holds the fixtures the seed examples import."""
