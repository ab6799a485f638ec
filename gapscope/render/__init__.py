"""Renderers: each turns a result object into one output format, written to a given file."""
