"""cosmos-dr-grpo: Dr-GRPO on Cosmos-RL's own code paths.

Checked against Cosmos-RL 0.4.7 (``requires.packages``). Dr-GRPO is three Cosmos-RL settings
that must agree, and the plugin makes them agree where the config is parsed:

- Advantage ``A_i = r_i - mean(group)``: a rule-based algo registered in Cosmos-RL's registry
  (``cosmos_rl.dispatcher.algo.base.REGISTERED_ALGOs``) under a new name (default
  ``dr_grpo``, never over the built-in ``grpo``). It is Cosmos-RL's own ``GRPO`` with
  ``unbiased=True`` (no std division), so rewards, grouping by prompt and completion
  admission stay Cosmos-RL's. The rollout ranks' reward worker pool looks the name up in
  the same registry (in a forked worker the entry is inherited; in a spawned one the
  plugin is applied again when that process imports ``cosmos_rl``).
- Reduction ``sum(token losses of a response) / generation bound / number of responses``:
  Cosmos-RL's ``seq-mean-token-mean`` with ``unbiased_loss_max_tokens``; the bound's one
  owner is ``rollout.max_response_length``. The max-tokens divisor is read under no other
  ``loss_type``.
- The number of responses is DP-global: with data-parallel ranks (``dp_group``, the
  replicas' ``ddp_comm``) the loss's sequence count is summed over the ranks and the loss
  scaled by their number, as Cosmos-RL does for tokens under ``balance_dp_token``, so the
  gradient average over ranks divides by the global count. Across the mini-batches of one
  optimizer step Cosmos-RL's trainer already scales each loss by its share of the batch.

At ``Config.from_dict`` (every Cosmos-RL process, the controller included, builds its
config through it), for a GRPO ``train_policy``:

- a setting the config leaves out is filled in (``algo``, ``unbiased_advantage = true``,
  ``loss_type = "seq-mean-token-mean"``, ``unbiased_loss_max_tokens =
  rollout.max_response_length``) and reported on stderr;
- one that is set and differs is refused: another ``algo``, ``unbiased_advantage = false``,
  another ``loss_type`` (it would ignore the divisor), an ``unbiased_loss_max_tokens``
  other than the rollout's bound.

The loss checks the same settings again (a config built without ``from_dict``) and refuses
a response longer than the bound. The plugin changes nothing while another algo is selected
in a config that did not go through ``from_dict``.
"""

import copy
import sys

PLUGIN = "cosmos-dr-grpo"
REGISTRY = "cosmos_rl.dispatcher.algo.base:REGISTERED_ALGOs"
CONFIG = "cosmos_rl.policy.config:Config.from_dict"
LOSS = "cosmos_rl.policy.trainer.llm_trainer.grpo_trainer:compute_loss"
FIXED = "seq-mean-token-mean"
BUILTIN_ALGOS = ("grpo", "ppo")
#: keys from which Cosmos-RL infers a GRPO train_policy when it names no ``type``
GRPO_KEYS = ("temperature", "epsilon_low", "epsilon_high", "kl_beta", "use_remote_reward")


def grpo_policy(data):
    """The raw ``train.train_policy`` table of *data* when it is (or defaults to) GRPO, else None.

    A GRPO table without ``type`` gets ``type = "grpo"`` so the keys added later do not change
    what Cosmos-RL infers.
    """
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


def rollout_bound(data):
    """``rollout.max_response_length`` of the raw config, else Cosmos-RL's default."""
    bound = data.get("rollout", {}).get("max_response_length")
    if bound is None:
        from cosmos_rl.policy.config import RolloutConfig

        bound = RolloutConfig.model_fields["max_response_length"].default
    return bound


def _check_bound(bound):
    if isinstance(bound, bool) or not isinstance(bound, int) or bound < 1:
        raise ValueError(f"{PLUGIN}: rollout.max_response_length={bound!r} is not a positive whole number of tokens; "
                         "Dr-GRPO divides each response's token-loss sum by it")
    return bound


def settle(data, name):
    """Make the raw config *data* select Dr-GRPO; return the list of filled-in settings.

    Raises ValueError naming the first setting that disagrees.
    """
    policy = grpo_policy(data)
    if policy is None:
        return []
    bound = _check_bound(rollout_bound(data))
    wanted = (
        ("algo", name, "the plugin's advantage (r - mean) is registered under that name; "
                       "set the plugin's param cosmos_dr_grpo.algo to rename it"),
        ("unbiased_advantage", True, "Dr-GRPO's advantage is r - mean, never divided by the group std"),
        ("loss_type", FIXED, "Cosmos-RL reads unbiased_loss_max_tokens (Dr-GRPO's divisor) under no other "
                             "loss_type"),
        ("unbiased_loss_max_tokens", bound, "Dr-GRPO divides by the generation bound, whose one owner is "
                                            "rollout.max_response_length; leave it out or set it equal"),
    )
    filled = []
    for key, value, why in wanted:
        current = policy.get(key)
        if current is None:
            policy[key] = value
            filled.append(f"{key}={value!r}")
        elif current != value or type(current) is not type(value):
            raise ValueError(f"{PLUGIN}: train.train_policy.{key}={current!r} conflicts with Dr-GRPO's {value!r}: "
                             f"{why}")
    return filled


def parse_hook(name):
    """Wrap ``Config.from_dict``: settle the raw config first, so a refusal happens where it is parsed."""

    def dr_grpo_from_dict(original, cls, config_data, *args, **kwargs):
        data = copy.deepcopy(config_data)
        filled = settle(data, name)
        if filled:
            print(f"{PLUGIN}: train_policy {', '.join(filled)} (filled in)", file=sys.stderr, flush=True)
        return original(cls, data, *args, **kwargs)

    return dr_grpo_from_dict


def mean_centred_algo():
    """The registry entry: Cosmos-RL's ``GRPO`` with ``unbiased=True`` (advantage r - mean)."""

    def dr_grpo_algo(reward_fn, unbiased=True, eps=1e-6, **kwargs):
        from cosmos_rl.dispatcher.algo.grpo import GRPO

        if not unbiased:
            raise ValueError(f"{PLUGIN}: train.train_policy.unbiased_advantage=False asks for the std division; "
                             "Dr-GRPO's advantage is r - mean")
        return GRPO(reward_fn, unbiased=True, eps=eps, **kwargs)

    dr_grpo_algo.minimum_trainable_completions = 2  # as Cosmos-RL's GRPO: a group of one has no signal
    return dr_grpo_algo


def check_policy(policy, bound, name):
    """The loss-side backstop: the settings Dr-GRPO's reduction needs, on a validated config."""
    _check_bound(bound)
    if policy.loss_type != FIXED:
        raise ValueError(f"{PLUGIN}: train.train_policy.loss_type={policy.loss_type!r} with algo {name!r}: Cosmos-RL "
                         f"reads Dr-GRPO's divisor only under {FIXED!r}")
    if policy.unbiased_loss_max_tokens != bound:
        raise ValueError(f"{PLUGIN}: train.train_policy.unbiased_loss_max_tokens={policy.unbiased_loss_max_tokens!r} "
                         f"differs from rollout.max_response_length={bound}, Dr-GRPO's divisor")
    if not policy.unbiased_advantage:
        raise ValueError(f"{PLUGIN}: train.train_policy.unbiased_advantage=False with algo {name!r}; "
                         "Dr-GRPO's advantage is r - mean")


def dp_sequence_count(local, dp_group, ddp_comm):
    """(sequences summed over the data-parallel ranks, number of ranks); ``(local, 1)`` without DP."""
    import torch
    import torch.distributed as dist

    if dp_group is None and ddp_comm is None:
        return local, 1
    count = torch.tensor(float(local), dtype=torch.float64)
    workers = 1
    if dp_group is not None:
        workers *= dist.get_world_size(group=dp_group)
        dist.all_reduce(count, group=dp_group)
    if ddp_comm is not None:
        workers *= ddp_comm.world_size()
        ddp_comm.allreduce(count, count, op=dist.ReduceOp.SUM)
    return float(count), workers


def loss_hook(name):
    """Wrap Cosmos-RL's ``compute_loss`` (looked up by the trainer at call time) for the Dr-GRPO algo."""

    def dr_grpo_compute_loss(original, current_token_logps, old_per_token_logps, ref_per_token_logps,
                             current_advantages, cu_seqlens, config, logprob_masks, dp_group=None, ddp_comm=None,
                             rollout_per_token_logps=None, **kwargs):
        policy = config.train.train_policy
        call = (current_token_logps, old_per_token_logps, ref_per_token_logps, current_advantages, cu_seqlens,
                config, logprob_masks)
        if getattr(policy, "algo", None) != name:
            return original(*call, dp_group=dp_group, ddp_comm=ddp_comm,
                            rollout_per_token_logps=rollout_per_token_logps, **kwargs)
        bound = config.rollout.max_response_length
        check_policy(policy, bound, name)
        longest = int((cu_seqlens[1:] - cu_seqlens[:-1]).max()) if cu_seqlens.numel() > 1 else 0
        if longest > bound:
            raise ValueError(f"{PLUGIN}: a response of {longest} tokens is longer than rollout.max_response_length="
                             f"{bound}, so that setting is not the generation bound Dr-GRPO divides by")
        normalization = kwargs.get("normalization_counts")
        local = cu_seqlens.numel() - 1 if normalization is None else normalization["sequences"]
        count, workers = dp_sequence_count(local, dp_group, ddp_comm)
        if workers > 1:
            # Cosmos-RL's seq-mean-token-mean divides by normalization["sequences"]: the global count
            # over the ranks, scaled by their number (the gradient is averaged over them).
            kwargs["normalization_counts"] = {**(normalization or {}), "sequences": count / workers}
        return original(*call, dp_group=dp_group, ddp_comm=ddp_comm,
                        rollout_per_token_logps=rollout_per_token_logps, **kwargs)

    return dr_grpo_compute_loss


def install(params):
    from starforge import patching

    name = params.get("cosmos_dr_grpo.algo", "dr_grpo")
    if not isinstance(name, str) or not name or name.lower() in BUILTIN_ALGOS:
        raise ValueError(f"cosmos_dr_grpo.algo={name!r} is empty or one of Cosmos-RL's own algo names; "
                         "register under a new one")
    patching.replace(f"{REGISTRY}[{name}]", mean_centred_algo(), when_imported=True, create=True)
    patching.wrap(CONFIG, parse_hook(name), when_imported=True)
    patching.wrap(LOSS, loss_hook(name), when_imported=True)
