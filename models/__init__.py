"""Everything that loads or runs a learned model: registry, offline resolution, device, embedders."""
