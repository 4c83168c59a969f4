"""cosmos-gspo: GSPO on Cosmos-RL's own clipped surrogate.

Checked against Cosmos-RL 0.4.7 (``requires.packages``). GSPO changes only the granularity of
the clipped surrogate's importance ratio: every loss-masked token of response ``i`` gets
``s_i = exp(z_i)``, ``z_i = mean_t (log pi(y_t) - log pi_old(y_t))``, capped at 10 from above
and not from below, clipped to ``[1 - eps_low, 1 + eps_high]``, with no dual clip, and the
configured ``loss_type`` reduces it. That is Cosmos-RL's ``variant = "gspo"`` branch of
``compute_loss`` (``cosmos_rl/policy/trainer/llm_trainer/grpo_trainer.py``), which the plugin
selects. Cosmos-RL computes ``z_i`` with its gradient through the mean; the seed writes it in
the stop-gradient token form ``sg[z_i] + (c_t - sg[c_t])``. For one advantage per response
the two are equal in value, clip decision and parameter gradient under every ``loss_type``
(each weighs the tokens of a response alike), so per-token advantages are refused.

At ``Config.from_dict`` (every Cosmos-RL process, the controller included), for a GRPO
``train_policy``:

- filled in when the config leaves them out, and reported on stderr: ``variant = "gspo"``
  and the paper's recipe from the plugin's params (``loss_type = "seq-mean-token-mean"``,
  ``epsilon_low = 3e-4``, ``epsilon_high = 4e-4``); values the config sets are kept;
- refused (knobs the GSPO loss never reads): another ``variant``, a ``lower_bound_ratio``
  other than Cosmos-RL's default (its dual clip, which the gspo branch skips), ``aipo_rho``
  (replaces the clipped surrogate), ``distillation.enable`` (per-token teacher advantages);
- warned (honoured but inert): an on-policy ratio (``mu_iterations = 1`` and one optimizer
  step per batch: the ratio is 1 and the clip never acts), bf16 log-probs
  (``train.logprob_dtype = "bfloat16"``), a token-scale clip range (0.01 or more).

The loss refuses advantages that differ within a response (per-token advantages).
"""

import copy
import sys

PLUGIN = "cosmos-gspo"
CONFIG = "cosmos_rl.policy.config:Config.from_dict"
LOSS = "cosmos_rl.policy.trainer.llm_trainer.grpo_trainer:compute_loss"
TOKEN_SCALE = 0.01
GRPO_KEYS = ("temperature", "epsilon_low", "epsilon_high", "kl_beta", "use_remote_reward")
LOSS_TYPES = ("seq-mean-token-mean", "seq-mean-token-sum", "token-mean", "token-sum")


def grpo_policy(data):
    """The raw ``train.train_policy`` table of *data* when it is (or defaults to) GRPO, else None."""
    train = data.setdefault("train", {})
    policy = train.get("train_policy")
    if policy is None:
        policy = train["train_policy"] = {"type": "grpo"}  # Cosmos-RL's default train_policy
    kind = policy.get("type")
    if kind is None:
        kind = "grpo" if any(key in policy for key in GRPO_KEYS) else "sft"
        if kind == "grpo":
            policy["type"] = "grpo"
    return policy if kind == "grpo" else None


def settle(data, recipe):
    """Make the raw config *data* select GSPO; return (filled-in settings, warnings).

    Raises ValueError naming the first setting the GSPO loss would not read.
    """
    policy = grpo_policy(data)
    if policy is None:
        return [], []
    variant = policy.get("variant")
    if variant is not None and variant != "gspo":
        raise ValueError(f"{PLUGIN}: train.train_policy.variant={variant!r}: GSPO is Cosmos-RL's 'gspo' variant of "
                         "the clipped surrogate; leave variant out or set it to 'gspo'")
    from cosmos_rl.policy.config import GrpoConfig

    refused = (
        ("lower_bound_ratio", "is Cosmos-RL's dual clip, which GSPO does not have (its gspo loss never reads it; "
                              "the sequence log-ratio is capped at 10 instead)"),
        ("aipo_rho", "replaces the clipped surrogate whose ratio GSPO changes"),
    )
    for key, why in refused:
        # Cosmos-RL's default passes: the controller hands its workers the whole config, defaults included
        if policy.get(key) is not None and policy[key] != GrpoConfig.model_fields[key].default:
            raise ValueError(f"{PLUGIN}: train.train_policy.{key}={policy[key]!r} {why}; remove it")
    if data.get("distillation", {}).get("enable"):
        raise ValueError(f"{PLUGIN}: distillation.enable=true gives per-token (teacher) advantages; GSPO's sequence "
                         "ratio is defined for one advantage per response")
    filled = []
    for key, value in (("variant", "gspo"), *recipe.items()):
        if policy.get(key) is None:
            policy[key] = value
            filled.append(f"{key}={value!r}")
    warnings = []
    low, high = float(policy["epsilon_low"]), float(policy["epsilon_high"])
    if max(low, high) >= TOKEN_SCALE:
        warnings.append(f"clip range epsilon_low={low!r}/epsilon_high={high!r} is token-scale; sequence ratios stay "
                        "near 1, so this clip rarely engages (the GSPO paper uses 3e-4/4e-4)")
    if policy.get("mu_iterations", 1) == 1 and not policy.get("batch_size_per_optimize"):
        warnings.append("mu_iterations=1 with one optimizer step per batch: the old log-probs are the current ones, "
                        "so the sequence ratio is 1 and its clip never acts (set mu_iterations > 1 or "
                        "batch_size_per_optimize below the batch)")
    train = data.get("train", {})
    dtype = train.get("logprob_dtype", "float32")
    if dtype == "bfloat16":
        warnings.append("train.logprob_dtype='bfloat16': log-probs carry bf16 rounding (about 4e-3 relative), far "
                        "above the sequence clip range, so its clip decisions are dominated by rounding")
    return filled, warnings


def parse_hook(recipe):
    """Wrap ``Config.from_dict``: settle the raw config first, so a refusal happens where it is parsed."""

    def gspo_from_dict(original, cls, config_data, *args, **kwargs):
        data = copy.deepcopy(config_data)
        filled, warnings = settle(data, recipe)
        if filled:
            print(f"{PLUGIN}: train_policy {', '.join(filled)} (filled in)", file=sys.stderr, flush=True)
        for message in warnings:
            print(f"{PLUGIN}: warning: {message}", file=sys.stderr, flush=True)
        return original(cls, data, *args, **kwargs)

    return gspo_from_dict


def check_sequence_advantages(advantages, cu_seqlens):
    """Refuse per-token advantages: values that differ within one response (flattened, by ``cu_seqlens``)."""
    bounds = cu_seqlens.tolist()
    scale = max(1.0, float(advantages.abs().max())) if advantages.numel() else 1.0
    for start, end in zip(bounds[:-1], bounds[1:]):
        response = advantages[start:end]
        if response.numel() and float(response.max() - response.min()) > 1e-6 * scale:
            raise ValueError(f"{PLUGIN}: per-token advantages (values differ within a response); GSPO's sequence "
                             "ratio is defined for one advantage per response")


def loss_hook():
    """Wrap Cosmos-RL's ``compute_loss`` for the gspo variant: refuse per-token advantages."""

    def gspo_compute_loss(original, current_token_logps, old_per_token_logps, ref_per_token_logps, current_advantages,
                          cu_seqlens, config, logprob_masks, *args, **kwargs):
        policy = config.train.train_policy
        if policy.variant == "gspo":
            if policy.aipo_rho is not None:
                raise ValueError(f"{PLUGIN}: train.train_policy.aipo_rho={policy.aipo_rho!r} replaces the clipped "
                                 "surrogate whose ratio GSPO changes; remove it")
            advantages = current_advantages
            if advantages.shape == logprob_masks.shape:
                import torch

                advantages = torch.masked_select(advantages, logprob_masks)
            check_sequence_advantages(advantages.detach(), cu_seqlens)
        return original(current_token_logps, old_per_token_logps, ref_per_token_logps, current_advantages, cu_seqlens,
                        config, logprob_masks, *args, **kwargs)

    return gspo_compute_loss


def install(params):
    from starforge import patching

    recipe = {
        "loss_type": params.get("cosmos_gspo.loss_type", "seq-mean-token-mean"),
        "epsilon_low": float(params.get("cosmos_gspo.epsilon_low", 3e-4)),
        "epsilon_high": float(params.get("cosmos_gspo.epsilon_high", 4e-4)),
    }
    if recipe["loss_type"] not in LOSS_TYPES:
        raise ValueError(f"cosmos_gspo.loss_type must be one of {', '.join(LOSS_TYPES)}, got {recipe['loss_type']!r}")
    for key in ("epsilon_low", "epsilon_high"):
        if not 0.0 < recipe[key] < 1.0:
            raise ValueError(f"cosmos_gspo.{key} must be in (0, 1), got {recipe[key]!r}")
    patching.wrap(CONFIG, parse_hook(recipe), when_imported=True)
    patching.wrap(LOSS, loss_hook(), when_imported=True)
