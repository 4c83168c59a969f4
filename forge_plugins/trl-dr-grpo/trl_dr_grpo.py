"""trl-dr-grpo: Dr-GRPO through TRL's own ``GRPOTrainer`` options.

TRL computes advantages inline (no function to replace) but selects the maths by options,
so the plugin wraps ``GRPOTrainer.__init__`` and, after the original init, sets

- ``scale_rewards = "none"``: ``A_i = r_i - mean(group)``, no division by the std;
- ``loss_type = "dr_grpo"``: the masked token-loss sum divided by
  ``batch x max_completion_length`` -- the trainer's own generation bound, read by TRL from
  ``GRPOConfig.max_completion_length``, so the divisor cannot drift from the rollout.

A ``GRPOConfig`` value the user set explicitly (not TRL's default) that differs from the
plugin's is refused rather than silently replaced; a default the plugin replaces is
reported on stderr, once per trainer. A value set explicitly *equal* to TRL's default cannot
be told from the default (a dataclass keeps no record of it) and is replaced like it.

Refused as well (checked against TRL 1.16.0):

- ``multi_objective_aggregation="normalize_then_sum"`` with ``scale_rewards="none"``: TRL then
  ignores ``scale_rewards`` and divides by the std anyway;
- a ``max_completion_length`` that is not a positive whole number (None, 0, negative, a
  bool) with ``loss_type="dr_grpo"``: it is the loss divisor.

The patch waits for ``trl.trainer.grpo_trainer`` to be imported (TRL imports it lazily), so
the launcher never imports TRL.
"""

import dataclasses
import sys

TARGET = "trl.trainer.grpo_trainer:GRPOTrainer.__init__"
PLUGIN = "trl-dr-grpo"


def _settings(params):
    return {
        "scale_rewards": params.get("trl_dr_grpo.scale_rewards", "none"),
        "loss_type": params.get("trl_dr_grpo.loss_type", "dr_grpo"),
    }


def apply_settings(trainer, wanted, plugin=PLUGIN):
    """Set *wanted* (GRPOConfig field -> value) on the trainer and its args; return the changes.

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


def check_dr_grpo_options(args, scale_rewards, loss_type, plugin=PLUGIN):
    """Refuse the GRPOConfig *args* with which TRL would not compute Dr-GRPO's advantages or divisor."""
    if scale_rewards == "none" and getattr(args, "multi_objective_aggregation", None) == "normalize_then_sum":
        raise ValueError(
            f"{plugin}: GRPOConfig(multi_objective_aggregation='normalize_then_sum') ignores scale_rewards='none' and "
            "divides the rewards by their std; use 'sum_then_normalize' (TRL's default) for Dr-GRPO"
        )
    bound = getattr(args, "max_completion_length", None)
    if loss_type == "dr_grpo" and (isinstance(bound, bool) or not isinstance(bound, int) or bound < 1):
        raise ValueError(
            f"{plugin}: GRPOConfig(max_completion_length={bound!r}) is not a positive whole number of tokens; "
            "loss_type='dr_grpo' divides by it (the generation bound)"
        )


def _config_of(args, kwargs):
    """The GRPOConfig passed to ``GRPOTrainer(model, reward_funcs, args, ...)``, if any."""
    config = kwargs.get("args", args[2] if len(args) > 2 else None)
    return config if dataclasses.is_dataclass(config) else None


def install(params):
    from starforge import patching

    wanted = _settings(params)

    def dr_grpo_init(original, self, *args, **kwargs):
        config = _config_of(args, kwargs)
        if config is not None:  # before TRL's own init, which fails on some of these less clearly
            check_dr_grpo_options(config, wanted["scale_rewards"], wanted["loss_type"])
        original(self, *args, **kwargs)
        changes = apply_settings(self, wanted)
        check_dr_grpo_options(self.args, self.args.scale_rewards, self.args.loss_type)
        self.scale_rewards = self.args.scale_rewards
        self.loss_type = self.args.loss_type
        divisor = ""
        if self.loss_type == "dr_grpo":
            divisor = f"; loss divisor batch x max_completion_length={self.max_completion_length}"
        print(f"{PLUGIN}: GRPOTrainer {', '.join(changes) or 'already configured'}{divisor}", file=sys.stderr, flush=True)

    patching.wrap(TARGET, dr_grpo_init, when_imported=True)
