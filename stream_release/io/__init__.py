"""Reading snapshots: CSV files and in-memory columns, validated against the schema."""
