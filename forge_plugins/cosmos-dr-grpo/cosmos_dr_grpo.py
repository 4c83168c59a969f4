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
- The number of responses is global across the mini-batches of an optimizer step and the
  data-parallel ranks. Cosmos-RL's trainer (``GRPOTrainer.step_training``) splits each rank's
  batch into optimizer steps (``batch_size_per_optimize``) and those into mini-batches
  (``mini_batch``, or token-balanced ones under ``max_token_len_per_mini_batch``), calls
  ``compute_loss`` once per mini-batch and scales that loss by the mini-batch's share of the
  rank's optimizer step; the gradient is then averaged over the ranks (``dp_group``, the
  replicas' ``inter_policy_nccl``). The plugin wraps ``step_training``: before the step it sums
  each optimizer step's response count over the ranks (one all-reduce per communicator), and
  the loss of a mini-batch of ``n`` responses in optimizer step ``k`` divides by
  ``total_k / ranks * n / local_k`` (``normalization_counts["sequences"]``), so that after the
  trainer's scaling and the average over ranks every response weighs ``1 / total_k``, however
  unevenly the mini-batches split the ranks' batches. A ``compute_loss`` called outside
  ``step_training`` (a trainer that replaces it) sums the call's own count over the ranks
  instead, which is the global count only when every rank's mini-batch is the same share of
  its batch.

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

import contextvars
import sys

PLUGIN = "cosmos-dr-grpo"
REGISTRY = "cosmos_rl.dispatcher.algo.base:REGISTERED_ALGOs"
CONFIG = "cosmos_rl.policy.config:Config.from_dict"
LOSS = "cosmos_rl.policy.trainer.llm_trainer.grpo_trainer:compute_loss"
STEP = "cosmos_rl.policy.trainer.llm_trainer.grpo_trainer:GRPOTrainer.step_training"
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
        filled = settle(config_data, name)  # in place, as Cosmos-RL's from_dict edits its argument
        if filled:
            print(f"{PLUGIN}: train_policy {', '.join(filled)} (filled in)", file=sys.stderr, flush=True)
        return original(cls, config_data, *args, **kwargs)

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


def dp_sequence_count(local, dp_group, ddp_comm, device):
    """(sequences summed over the data-parallel ranks, number of ranks); ``(local, 1)`` without DP.

    The count is reduced on *device* (the batch's: NCCL reduces device tensors only).
    """
    import torch
    import torch.distributed as dist

    if dp_group is None and ddp_comm is None:
        return local, 1
    count = torch.tensor(float(local), dtype=torch.float64, device=device)
    workers = 1
    if dp_group is not None:
        workers *= dist.get_world_size(group=dp_group)
        dist.all_reduce(count, group=dp_group)
    if ddp_comm is not None:
        workers *= ddp_comm.world_size()
        ddp_comm.allreduce(count, count, op=dist.ReduceOp.SUM)
    return float(count), workers


def optimizer_steps(responses, per_optimize):
    """This rank's responses per optimizer step, as Cosmos-RL's ``step_training`` splits its batch."""
    size = min(per_optimize, responses) if per_optimize is not None and per_optimize > 0 else responses
    return [min(size, responses - start) for start in range(0, responses, size)] if size > 0 else []


def dp_step_totals(local, dp_group, ddp_comm, device):
    """(each optimizer step's response count summed over the data-parallel ranks, number of ranks).

    Two all-reduces per communicator: the largest number of optimizer steps, then the counts
    (a rank with fewer steps adds zeros). Reduced on *device* (NCCL reduces device tensors only).
    """
    import torch
    import torch.distributed as dist

    if dp_group is None and ddp_comm is None:
        return [float(n) for n in local], 1
    steps = torch.tensor(float(len(local)), dtype=torch.float64, device=device)
    workers = 1
    if dp_group is not None:
        workers *= dist.get_world_size(group=dp_group)
        dist.all_reduce(steps, op=dist.ReduceOp.MAX, group=dp_group)
    if ddp_comm is not None:
        workers *= ddp_comm.world_size()
        ddp_comm.allreduce(steps, steps, op=dist.ReduceOp.MAX)
    counts = torch.zeros(int(steps), dtype=torch.float64, device=device)
    counts[:len(local)] = torch.tensor([float(n) for n in local], dtype=torch.float64)
    if dp_group is not None:
        dist.all_reduce(counts, group=dp_group)
    if ddp_comm is not None:
        ddp_comm.allreduce(counts, counts, op=dist.ReduceOp.SUM)
    return counts.tolist(), workers


class StepCounts:
    """The response counts of one ``step_training`` call, and where its loss calls are in it.

    Cosmos-RL's trainer calls the loss once per mini-batch, in the order of its batch: optimizer
    step after optimizer step, each covered by its mini-batches, again for every ``mu``
    iteration. Under pipeline parallelism the last stage calls it once per micro-batch with the
    mini-batch's ``normalization_counts`` (one dict per mini-batch, the same for a repeated
    micro-batch), and the mini-batch is what moves the position.
    """

    def __init__(self, local, totals, workers):
        self.local, self.totals, self.workers = list(local), list(totals), workers
        self.position = 0  # responses of this rank's batch whose mini-batches have started
        self.current = None  # (the normalization dict of the running mini-batch, its divisor)

    def divisor(self, responses, normalization):
        """The ``sequences`` divisor for a loss call of a mini-batch of *responses* (pipeline: the
        mini-batch's ``normalization_counts``, of whose micro-batches this call is one)."""
        if normalization is not None and self.current is not None and self.current[0] is normalization:
            return self.current[1]
        batch = sum(self.local)
        if batch <= 0:
            raise ValueError(f"{PLUGIN}: a loss call in a training step whose batch has no responses on this rank")
        start = self.position % batch
        step, end = 0, self.local[0]
        while start >= end:
            step += 1
            end += self.local[step]
        self.position = start + responses
        divisor = self.totals[step] / self.workers * responses / self.local[step]
        self.current = (normalization, divisor) if normalization is not None else None
        return divisor


_STEP = contextvars.ContextVar("cosmos_dr_grpo_step", default=None)


def arguments(args, kwargs, names):
    """The values of *names* among ``step_training``'s arguments (after ``self``), positional or not."""
    order = ("rollouts", "current_step", "total_steps", "remain_samples_num", "inter_policy_nccl")
    return [kwargs[n] if n in kwargs else args[order.index(n)] if order.index(n) < len(args) else None for n in names]


def step_hook(name):
    """Wrap ``GRPOTrainer.step_training``: agree on each optimizer step's global response count first."""

    def dr_grpo_step_training(original, trainer, *args, **kwargs):
        if getattr(trainer.config.train.train_policy, "algo", None) != name:
            return original(trainer, *args, **kwargs)
        rollouts, ddp_comm = arguments(args, kwargs, ("rollouts", "inter_policy_nccl"))
        local = optimizer_steps(len(rollouts), trainer.batch_size_per_optimize)
        dims = trainer.parallel_dims
        dp_group = dims.mesh["dp"].get_group() if dims.dp_enabled else None
        totals, workers = dp_step_totals(local, dp_group, ddp_comm, trainer.device)
        token = _STEP.set(StepCounts(local, totals, workers))
        try:
            return original(trainer, *args, **kwargs)
        finally:
            _STEP.reset(token)

    return dr_grpo_step_training


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
        step = _STEP.get()
        if step is not None:
            # inside the trainer's step: the optimizer step's global count, undoing the trainer's share scaling
            kwargs["normalization_counts"] = {**(normalization or {}), "sequences": step.divisor(local, normalization)}
        else:
            count, workers = dp_sequence_count(local, dp_group, ddp_comm, current_token_logps.device)
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
    patching.wrap(STEP, step_hook(name), when_imported=True)
