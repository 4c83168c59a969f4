"""Laptop-side authoring: YAML loading, plugin checks, pack/unpack, templates."""
