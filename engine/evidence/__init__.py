"""evidence: evidence search (seed 002), the searcher agent's workflow as an engine verb —
dictionary (canonical terms, aliases, colloquial bridges) -> maps (structural overview, group maps)
-> decomposition of comparative questions -> bounded search rounds with early stop -> an evidence
*packet* written to a file, with every source's confidence from the engine's own calibrated signals.

Words: a *packet* is the Markdown file (YAML front matter, one section per source) an orchestrator
reads instead of the evidence itself; a *round* is one search with its words and filters; the
*termination* names why rounds stopped. Uses core and refind (it reads passages through the page
search).
"""
