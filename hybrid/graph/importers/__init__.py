"""Readers for other projects' graph files, producing the one graph type."""
