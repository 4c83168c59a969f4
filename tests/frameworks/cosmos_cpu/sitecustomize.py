"""What a CPU-only test process needs before it can import ``cosmos_rl`` 0.4.7 under torch 2.13.

Put this directory first on ``PYTHONPATH`` of the Cosmos-RL venv's processes (a test's, and
the children they fork or spawn). It belongs to the test setup only, never to a plugin:

- The only torchvision release that installs beside torch 2.13 is a CUDA build whose
  extension fails to load on a machine without CUDA; torchvision's fake-kernel
  registrations then raise "operator torchvision::nms does not exist". Declaring the two
  operators (``nms``, ``qnms``) through ``torch.library`` first lets torchvision import.
- torch 2.13 removed the private ``torch.distributed.pipelining.stage._RootArgPlaceholder``
  that ``cosmos_rl/patch/__init__.py`` imports; a stand-in class holding the tensor's meta
  copy (what the removed class kept) takes its place.

With ``COSMOS_TEST_PLUGINS`` set (a comma-separated list of the plugin modules of
``forge_plugins/``), the plugins are applied right after ``cosmos_rl`` is imported, as the
job's bootstrap does, so a spawned worker carries them like every process of a job.
"""

import os
import sys

import torch

_torchvision_ops = torch.library.Library("torchvision", "DEF")
for _schema in ("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
                "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"):
    try:
        _torchvision_ops.define(_schema)
    except RuntimeError:  # torchvision's own extension defined it
        pass

import torch.distributed.pipelining.stage as _stage  # noqa: E402

if not hasattr(_stage, "_RootArgPlaceholder"):
    class _RootArgPlaceholder:
        """Placeholder for a root-stage input: keeps the input's meta tensor."""

        def __init__(self, tensor):
            self.meta = tensor.to("meta")

    _stage._RootArgPlaceholder = _RootArgPlaceholder

_plugins = [name for name in os.environ.get("COSMOS_TEST_PLUGINS", "").split(",") if name]
if _plugins:
    from types import SimpleNamespace

    from starforge.cluster.import_hooks import TargetWatcher

    def _activate(due, module):
        import importlib

        for name in _plugins:
            importlib.import_module(name).install({})

    _item = SimpleNamespace(entry=SimpleNamespace(targets=["cosmos_rl"]))
    sys.meta_path.insert(0, TargetWatcher([_item], _activate))
