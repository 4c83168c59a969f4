"""Third-party code the runtime zip carries under StarForge's own namespace.

The zip puts ``packaging`` here (``starforge.cluster._vendor.packaging``), as pip vendors
it, so a trainer importing ``packaging`` gets its own. An installed starforge-core has
nothing here and uses its ``packaging`` dependency (see :mod:`..requires`).
"""
