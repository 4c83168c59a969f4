"""Third-party code the cluster side carries under StarForge's own namespace, as pip does.

``packaging`` lives here (``starforge.cluster._vendor.packaging``), committed, pinned in
``vendor.txt`` and carried with its licence files: only the modules the requirement checks
need (``version``, ``specifiers``, ``requirements``, ``markers`` and the private modules
they import), so a trainer importing ``packaging`` gets its own and every laptop builds the
same runtime zip. To update: ``pip download --no-deps packaging==X.Y``, copy those modules
and the ``LICENSE*`` files from the wheel, and change ``vendor.txt``. Not linted, typed or
size-checked: it is packaging's code, not ours.
"""
