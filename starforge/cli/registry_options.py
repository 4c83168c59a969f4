"""The options that say how to reach a registry: ``--registry URL``, ``--insecure``, ``--ca-file FILE``.

Laptop side; click only. Every command that talks to a registry offers them through these
decorators, so their names, metavars and help read the same everywhere.
"""

from __future__ import annotations

import click

REGISTRY_HELP = "Directory path or oci://host[:port]/prefix (default: FORGE_REGISTRY, config)."


def tls_options(command):
    """Add ``--insecure`` and ``--ca-file FILE`` to *command*, listed in that order."""
    command = click.option("--ca-file", metavar="FILE",
                           help="Trust a registry certificate signed by this CA (PEM), besides the system's CAs.")(command)
    return click.option("--insecure", is_flag=True, help="Allow plain HTTP to a non-loopback OCI registry.")(command)


def registry_options(registry_help: str = REGISTRY_HELP):
    """Add ``--registry URL`` (helped by *registry_help*), then :func:`tls_options`.

    Example: ``@registry_options("Registry to resolve against.")`` above a command's function.
    """
    def decorate(command):
        return click.option("--registry", metavar="URL", help=registry_help)(tls_options(command))

    return decorate


def job_registry_options(registry_help: str = "Registry to fetch plugins not in the cache from."):
    """:func:`registry_options`, then ``--require-signatures`` of any owner: where the plugins of
    a job that ``forge submit``, ``plan`` or ``replay`` stages come from, and which are accepted."""
    def decorate(command):
        command = click.option("--require-signatures", is_flag=True,
                               help="Refuse any plugin without a signature by a trusted key (any owner).")(command)
        return registry_options(registry_help)(command)

    return decorate
