"""Fixtures of the framework tests; they and the functions the tests share live in frameworks_env."""

from frameworks_env import ray_head_in, runtime_path  # noqa: F401
