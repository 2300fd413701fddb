"""How long things take: compute (profile lookup, then roofline), collectives, costs per global rank."""
