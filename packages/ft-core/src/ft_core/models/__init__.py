"""Model definitions: per-architecture config parsing and tensor names, one shared decoder."""
