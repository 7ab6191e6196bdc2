"""Core: records, filters, the backend protocol, capabilities, registry, config and the facade."""
