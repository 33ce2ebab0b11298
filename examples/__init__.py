"""Runnable examples of jobs on Gryvia (see examples/training/*.yaml)."""
