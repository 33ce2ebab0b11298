"""Benchmarks that drive Gryvia's production code paths on a simulated cluster (`make bench-admission`)."""
