"""The laptop's own state: per-user paths (``home``), directories made with explicit modes
(``directories``), file locks (``filelock``), the credential variables (``credentials``), plugin
code run in a process group of its own (``process_group``) and the user config (``userconfig``).
"""
