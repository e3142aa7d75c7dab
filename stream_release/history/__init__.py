"""Per-individual, per-value history of linkages (paper 003 §7, the "statistics file")."""
