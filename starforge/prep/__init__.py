"""``forge prep``: the data-prep plugin's verified bytes, params and provenance (``run``) and the
child that streams the JSONL through it (``child``: standard library and ``starforge.cluster``
only, run from a zip under any interpreter). Imports nothing: the child's zip carries this file.
"""
