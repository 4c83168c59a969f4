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
- The sequence log-ratio is clamped from above at 10 and not from below (TRL 1.16 computes
  ``exp`` of it unclamped): a response whose mean token log-ratio exceeds 10 gets the value
  10 and no gradient through its ratio, as ``torch.clamp`` gives. With no dual clip this cap
  is the only bound on a negative advantage's term. TRL's ``delta`` (a two-sided clip, i.e. a
  dual clip) is refused at the sequence level.
- Warned (honoured but inert): an on-policy ratio (``num_iterations=1`` and one optimizer step
  per generation: the ratio is 1 and the clip never acts) and bf16 (log-probs carry bf16
  rounding, far above the 3e-4/4e-4 clip range).

Checked against TRL 1.16.0. The patches wait for ``trl.trainer.grpo_trainer`` to be imported.
"""

import contextvars
import dataclasses
import sys

INIT_TARGET = "trl.trainer.grpo_trainer:GRPOTrainer.__init__"
LOSS_TARGET = "trl.trainer.grpo_trainer:GRPOTrainer._compute_loss"
PLUGIN = "trl-gspo"
#: An epsilon at least this large is token-scale (PPO/GRPO use 0.2; GSPO 3e-4 / 4e-4).
TOKEN_SCALE_EPSILON = 0.01
LOGPS_TARGET = "trl.trainer.grpo_trainer:GRPOTrainer._get_per_token_logps_and_entropies"
#: The sequence log-ratio's upper clamp (none from below).
MAX_LOG_RATIO = 10.0
_LOSS_INPUTS = contextvars.ContextVar("trl_gspo_loss_inputs", default=None)


def clamp_sequence_log_ratio(inputs, per_token_logps, mask):
    """Make ``inputs["old_per_token_logps"]`` give TRL a sequence log-ratio clamped above at 10.

    TRL computes ``z_i = mean_t (logp - old)`` after this; for the responses with ``z_i > 10``
    the old log-probs are raised by ``z_i - 10`` and carry ``logp - sg[logp]``, so ``z_i`` is 10
    with no gradient (``torch.clamp``'s); the other responses are left exactly as they were.
    Returns how many responses were clamped.
    """
    import torch

    old = inputs["old_per_token_logps"]
    z = ((per_token_logps.detach() - old) * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
    over = z > MAX_LOG_RATIO
    if not bool(over.any()):
        return 0
    excess = (z - MAX_LOG_RATIO).clamp(min=0.0).unsqueeze(-1)
    raised = old + excess + (per_token_logps - per_token_logps.detach())
    inputs["old_per_token_logps"] = torch.where(over.unsqueeze(-1), raised, old)
    return int(over.sum())


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
        if self.importance_sampling_level != "sequence":
            return
        if getattr(self.args, "delta", None) is not None:
            raise ValueError(
                f"{PLUGIN}: GRPOConfig(delta={self.args.delta!r}) adds a two-sided (dual) clip, which GSPO does not "
                "have; remove delta (the sequence log-ratio is capped at 10 instead)"
            )
        if max(self.epsilon_low, self.epsilon_high) >= TOKEN_SCALE_EPSILON:
            print(
                f"{PLUGIN}: warning: epsilon={self.epsilon_low!r}/{self.epsilon_high!r} is token-scale; sequence ratios "
                f"stay near 1, so this clip rarely engages (the GSPO paper uses 3e-4/4e-4)",
                file=sys.stderr, flush=True,
            )
        if self.num_iterations == 1 and self.args.steps_per_generation <= self.args.gradient_accumulation_steps:
            print(
                f"{PLUGIN}: warning: num_iterations=1 with one optimizer step per generation: the policy is on-policy "
                "at every step, so the sequence ratio is 1 and its clip never acts (GSPO's clip needs several updates "
                "per rollout: num_iterations > 1 or steps_per_generation > gradient_accumulation_steps)",
                file=sys.stderr, flush=True,
            )
        if getattr(self.args, "bf16", False):
            print(
                f"{PLUGIN}: warning: bf16=True: log-probs carry bf16 rounding (about 4e-3 relative), far above the "
                "sequence clip range; the clip decisions are dominated by rounding",
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
        if self.importance_sampling_level == "sequence" and hasattr(inputs, "get") \
                and inputs.get("old_per_token_logps") is not None:
            inputs = dict(inputs)  # the clamp rewrites old log-probs for this loss only, not in TRL's buffer
            token = _LOSS_INPUTS.set(inputs)
            try:
                return original(self, model, inputs, *args, **kwargs)
            finally:
                _LOSS_INPUTS.reset(token)
        return original(self, model, inputs, *args, **kwargs)

    def gspo_logps(original, self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        inputs = _LOSS_INPUTS.get()
        if inputs is not None:  # the current policy's log-probs, computed first in _compute_loss
            _LOSS_INPUTS.set(None)
            mask = inputs["completion_mask"]
            if "tool_mask" in inputs:
                mask = mask * inputs["tool_mask"]
            clamp_sequence_log_ratio(inputs, result[0], mask)
        return result

    patching.wrap(INIT_TARGET, gspo_init, when_imported=True)
    patching.wrap(LOSS_TARGET, gspo_loss, when_imported=True)
    patching.wrap(LOGPS_TARGET, gspo_logps, when_imported=True)
