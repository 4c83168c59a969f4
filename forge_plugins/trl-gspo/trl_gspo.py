"""trl-gspo: Group Sequence Policy Optimization through TRL's own ``GRPOTrainer`` options.

The plugin wraps ``GRPOTrainer.__init__`` and, after the original init, sets
``importance_sampling_level = "sequence"`` (TRL then uses one ratio per response,
``exp(mean_t (logp - logp_old))``, clipped per response), ``loss_type = "grpo"`` (the mean over
responses of each response's token mean, the paper's aggregation) and the paper's clip range
``epsilon = 3e-4``, ``epsilon_high = 4e-4``.

- A ``GRPOConfig`` value the user set explicitly (not TRL's default) that differs from the
  plugin's is refused; a default the plugin replaces is reported on stderr.
- A token-scale epsilon (0.01 or more, e.g. PPO's 0.2) with sequence ratios is warned about:
  a sequence ratio moves far less than a token ratio, so such a clip never engages.
- Per-token advantages (shape ``(B, T)`` with ``T > 1``, which TRL subclasses may provide)
  are refused at the sequence level: GSPO's objective is defined for one advantage per response.

The patches wait for ``trl.trainer.grpo_trainer`` to be imported.
"""

import dataclasses
import sys

INIT_TARGET = "trl.trainer.grpo_trainer:GRPOTrainer.__init__"
LOSS_TARGET = "trl.trainer.grpo_trainer:GRPOTrainer._compute_loss"
PLUGIN = "trl-gspo"
#: An epsilon at least this large is token-scale (PPO/GRPO use 0.2; GSPO 3e-4 / 4e-4).
TOKEN_SCALE_EPSILON = 0.01


def _settings(params):
    return {
        "importance_sampling_level": params.get("trl_gspo.importance_sampling_level", "sequence"),
        "loss_type": params.get("trl_gspo.loss_type", "grpo"),
        "epsilon": float(params.get("trl_gspo.epsilon", 3e-4)),
        "epsilon_high": float(params.get("trl_gspo.epsilon_high", 4e-4)),
    }


def apply_settings(trainer, wanted, plugin=PLUGIN):
    """Set *wanted* (GRPOConfig field -> value) on the trainer's args; return the changes.

    Raise ValueError when the user's config holds a non-default value that differs.
    """
    args = trainer.args
    defaults = {f.name: f.default for f in dataclasses.fields(type(args))}
    changes = []
    for field, value in wanted.items():
        current = getattr(args, field)
        if current == value:
            continue
        if current != defaults.get(field, current):
            raise ValueError(
                f"{plugin}: GRPOConfig({field}={current!r}) conflicts with the plugin's {field}={value!r}; "
                f"remove it from GRPOConfig or set the plugin's param instead"
            )
        setattr(args, field, value)
        changes.append(f"{field} {current!r} -> {value!r}")
    return changes


def install(params):
    from starforge import patching

    wanted = _settings(params)
    for key in ("epsilon", "epsilon_high"):
        if not 0.0 < wanted[key] < 1.0:
            raise ValueError(f"trl_gspo.{key} must be in (0, 1), got {wanted[key]!r}")

    def gspo_init(original, self, *args, **kwargs):
        original(self, *args, **kwargs)
        changes = apply_settings(self, wanted)
        self.importance_sampling_level = self.args.importance_sampling_level
        self.loss_type = self.args.loss_type
        self.epsilon_low = self.args.epsilon
        self.epsilon_high = self.args.epsilon_high
        print(f"{PLUGIN}: GRPOTrainer {', '.join(changes) or 'already configured'}", file=sys.stderr, flush=True)
        if self.importance_sampling_level == "sequence" and max(self.epsilon_low, self.epsilon_high) >= TOKEN_SCALE_EPSILON:
            print(
                f"{PLUGIN}: warning: epsilon={self.epsilon_low!r}/{self.epsilon_high!r} is token-scale; sequence ratios "
                f"stay near 1, so this clip rarely engages (the GSPO paper uses 3e-4/4e-4)",
                file=sys.stderr, flush=True,
            )

    def gspo_loss(original, self, model, inputs, *args, **kwargs):
        advantages = inputs.get("advantages") if hasattr(inputs, "get") else None
        if (self.importance_sampling_level == "sequence" and advantages is not None
                and advantages.dim() == 2 and advantages.size(1) > 1):
            raise ValueError(
                f"{PLUGIN}: per-token advantages (shape {tuple(advantages.shape)}) with sequence-level ratios; "
                "GSPO needs one advantage per response"
            )
        return original(self, model, inputs, *args, **kwargs)

    patching.wrap(INIT_TARGET, gspo_init, when_imported=True)
    patching.wrap(LOSS_TARGET, gspo_loss, when_imported=True)
