"""Offline evaluation: test collections, metrics, replay of logged queries, reports."""
