"""A toy GRPO trainer small enough to read in one sitting and exact enough to test.

``algorithms`` holds the primitives plugins patch (advantage estimators, the importance
ratio, the clipped policy-gradient loss and its reduction, the reward); ``train`` runs a
tabular softmax policy with analytic gradients: ``python -m toy_grpo.train``.
Standard library only.
"""
