"""(family module; kinds declared by define_kind)."""
