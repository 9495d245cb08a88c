"""Evidence search (seed 002): the searcher agent's workflow as an engine verb.

dictionary (canonical terms, aliases, colloquial bridges) -> maps (structural overview, group maps)
-> decomposition of comparative questions -> bounded search rounds with early stop -> an evidence
packet written to a file, with every source's confidence from the engine's own calibrated signals.
"""
