"""The plugin package format: ``plugin.yaml`` (``manifest``), the archive a version is published
as (``archive``) and the one YAML reader (``yamlio``).
"""
