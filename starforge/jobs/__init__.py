"""A job on the laptop: the one owner of a staged job (``staged``) and its binding (``binding``), the
jobs store and its records (``store``, ``jobrecord``, ``jobindex``), what an ended job left
(``outputs``, ``log_outputs``, ``log_provenance``, ``node_cleanup``) and its removal
(``cleanup``, ``jobdir``, ``leftovers``). Backends run jobs; they import from here, never the reverse.
"""
