"""Conformance clauses, one mixin per area; `ConformanceSuite` combines them."""
