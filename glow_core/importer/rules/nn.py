"""(family module; rules registered with import_rule)."""
