"""relations: relation search (seed 000) — typed relations loaded from SQL sources with a receipt
per cell, constraints (or a brief compiled by one schema-constrained model call) bound to a
workspace's packs, enumeration of every candidate entity into a closed set, and its *warrant*.

Words: the *warrant* is what makes the set an answer rather than a guess — the partition matched /
none / not_recorded / undetermined, counts, groups, absence verdicts, receipts; the *licence* says
whether the set is complete, and what narrowed it (`narrowed_by`: acl, constraints_dropped, ...);
*coverage* declares whom a source looked at for a relation (None versus Not recorded); a *receipt*
names the source cell a slot was read from, re-read on delivery. Criteria (conditions no relation
expresses) are read from each candidate's own documents, and ideas are answered over the parts of
documents, both through the page search. Uses core and refind.
"""
