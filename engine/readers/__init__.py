"""Readers: answers read from documents through the search pipeline (ideas; criteria and evidence
to come)."""
