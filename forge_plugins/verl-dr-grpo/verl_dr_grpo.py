"""verl-dr-grpo: Dr-GRPO through verl's registries in ``verl.trainer.ppo.core_algos``.

Checked against verl 0.9.1 (``requires.packages``): the hooks below name verl functions
whose behaviour was read in that release's source.

verl's trainer takes hard-coded branches for the names ``grpo`` and ``gae`` and sends every
other name through ``get_adv_estimator_fn`` / ``get_policy_loss_fn``, so this plugin adds
entries under new names (default ``dr_grpo`` for both) that the user selects:
``algorithm.adv_estimator=dr_grpo`` and ``actor_rollout_ref.actor.policy_loss.loss_mode=dr_grpo``.

- Estimator: verl's own GRPO outcome advantage with ``norm_adv_by_std_in_grpo=False``:
  ``A_i = r_i - mean(group)``, no std division. A group of one response gets advantage 0
  (its own mean; verl's estimator would pass the raw reward through), with one warning.
  On the default trainer the session-final-output grouping verl applies to ``grpo``
  (``trainer/ppo/v1/utils.py``) is applied to this estimator too (where that trainer can
  run: TransferQueue, verl's ``verl-core`` extra, installed).
- Policy loss: verl's own ``vanilla`` PPO-clip loss, aggregated with
  ``seq-mean-token-sum-norm``: each response's token-loss sum, summed over the DP-global
  mini-batch, divided by its sequence count and by the rollout's generation bound
  (``rollout.response_length``).
- The bound: verl's default trainer (``trainer.use_v1``) stores responses unpadded and pads
  each micro-batch to its own longest response, so the tensor width is not the bound there.
  The plugin carries the bound in verl's own ``actor.loss_scale_factor``: verl's config
  validation (``verl.utils.config.validate_config``, run by ``main_ppo``) fills it from
  ``rollout.response_length`` when unset, accepts it when equal and refuses it when it
  differs. verl's loss (``verl.workers.utils.losses.ppo_loss``) then uses it; without it on
  unpadded data the loss refuses to guess. The legacy trainer pads to the bound, so there
  the width is the bound and a ``loss_scale_factor`` that differs from it is refused.
- Entropy and KL terms: ``ppo_loss`` aggregates them with the actor's ``loss_agg_mode``; for
  this loss they are aggregated in the objective's unit (the plugin's mode and bound).
- The trainer's ``actor.loss_agg_mode``: verl's default (``token-mean``) is replaced, with a
  warning on stderr; any other value that differs from the plugin's is refused.

The entries are written with ``starforge.patching`` when their modules are imported (in
every process that imports them: Ray actors included), never by the launcher itself.
"""

import dataclasses
import sys

MODULE = "verl.trainer.ppo.core_algos"
LOSSES = "verl.workers.utils.losses"
CONFIG = "verl.utils.config"
MULTI_TRAJECTORIES = "verl.trainer.ppo.v1.utils"
VERL_DEFAULT_AGG = "token-mean"
FIXED = "seq-mean-token-sum-norm"
BOUND_HINT = "actor_rollout_ref.actor.loss_scale_factor=${actor_rollout_ref.rollout.response_length}"


def _warn_once(message, warned):
    """Print *message* on stderr the first time this installed loss meets it."""
    if message not in warned:
        warned.add(message)
        print(message, file=sys.stderr, flush=True)


def _is_padding(uid):
    """verl's synthetic no-op samples (``padding_utils.upsample_batch_to_divisible_size``: uid ``pad<hex>``)."""
    uid = str(uid)
    return len(uid) == 35 and uid.startswith("pad") and all(c in "0123456789abcdef" for c in uid[3:])


def _zero_singleton_groups(advantages, index, warned):
    """Set the advantage of every response alone in its group to 0 (r - mean over a group of one)."""
    from collections import Counter

    sizes = Counter(index[i] for i in range(len(index)))
    alone = [i for i in range(len(index)) if sizes[index[i]] == 1]
    if alone:
        real = sum(not _is_padding(index[i]) for i in alone)
        if real:
            _warn_once(f"verl-dr-grpo: warning: {real} response(s) alone in their group get advantage 0 "
                       "(r - mean of a group of one); set rollout.n >= 2", warned)
        advantages[alone] = 0.0
    return advantages


def mean_centred_advantage(norm_adv_by_std=False):
    warned = set()

    def dr_grpo_advantage(token_level_rewards, response_mask, index=None, epsilon=1e-6, config=None, **kwargs):
        from verl.trainer.ppo import core_algos

        if index is None:
            raise ValueError("verl-dr-grpo: the batch carries no 'uid' (index) to group responses by prompt")
        advantages, _ = core_algos.compute_grpo_outcome_advantage(
            token_level_rewards=token_level_rewards, response_mask=response_mask, index=index, epsilon=epsilon,
            norm_adv_by_std_in_grpo=norm_adv_by_std, config=config,
        )
        if not norm_adv_by_std:
            advantages = _zero_singleton_groups(advantages, index, warned)
        return advantages, advantages

    return dr_grpo_advantage


def session_final_grouping(estimator, norm_adv_by_std=False):
    """Wrap v1's ``compute_advantage_for_multi_trajectories``: *estimator* gets ``grpo``'s grouping.

    verl groups the final output of each ``{uid}_{session}`` for ``grpo`` only; for this
    estimator it runs verl's own ``grpo`` branch with ``norm_adv_by_std_in_grpo`` set to the
    plugin's (False: Dr-GRPO) and then zeroes the groups holding one final output.
    """
    warned = set()

    def dr_grpo_multi_trajectories(original, data, batch_keys, adv_estimator, *args, **kwargs):
        if str(getattr(adv_estimator, "value", adv_estimator)) != estimator:
            return original(data, batch_keys, adv_estimator, *args, **kwargs)
        from verl.trainer.ppo import core_algos

        for name, value in zip(("gamma", "lam", "num_repeat", "norm_adv_by_std_in_grpo", "config"), args):
            kwargs[name] = value
        args = ()
        kwargs["norm_adv_by_std_in_grpo"] = norm_adv_by_std
        data = original(data, batch_keys, core_algos.AdvantageEstimator.GRPO, *args, **kwargs)
        if not norm_adv_by_std:
            finals = {}
            for key in batch_keys:
                uid, session, _ = key.rsplit("_", 2)
                finals.setdefault(uid, set()).add(session)
            uids = [key.rsplit("_", 2)[0] for key in batch_keys]
            alone = [i for i, uid in enumerate(uids) if len(finals[uid]) == 1]
            if alone:
                real = sum(not _is_padding(uids[i]) for i in alone)
                if real:
                    _warn_once(f"verl-dr-grpo: warning: {real} output(s) of sessions alone in their group get "
                               "advantage 0 (r - mean of a group of one)", warned)
                data.batch["advantages"][alone] = 0.0
                data.batch["returns"][alone] = 0.0
        return data

    return dr_grpo_multi_trajectories


def effective_agg_mode(passed, wanted, warned, plugin="verl-dr-grpo"):
    """The aggregation to use: refuse a non-default trainer setting that differs from *wanted*."""
    if passed == wanted:
        return wanted
    if passed == VERL_DEFAULT_AGG:
        _warn_once(f"{plugin}: actor loss_agg_mode {passed!r} (verl's default) replaced by {wanted!r}", warned)
        return wanted
    raise ValueError(
        f"{plugin}: actor loss_agg_mode={passed!r} conflicts with the plugin's {wanted!r}; "
        f"leave verl's default or set the plugin's loss_agg_mode param"
    )


def _check_factor(factor):
    if isinstance(factor, bool) or not isinstance(factor, int) or factor < 1:
        raise ValueError(f"verl-dr-grpo: actor loss_scale_factor={factor!r} is not a positive whole number of "
                         f"tokens; Dr-GRPO divides by the generation bound ({BOUND_HINT})")
    return factor


def response_bound(configured, response_mask, padded_to_bound):
    """The divisor: the rollout's generation bound.

    *configured* is the actor's ``loss_scale_factor`` (None when unset). With
    *padded_to_bound* (the legacy trainer: responses padded to ``rollout.response_length``)
    the tensor width is the bound and a differing factor is refused; otherwise the factor is
    the bound and is refused only when a response is longer than it. ``padded_to_bound=None``
    means "not known": a direct call, whose caller pads to the bound unless it says otherwise.
    """
    width = int(response_mask.shape[-1])
    if configured is None:
        if padded_to_bound is False:
            raise ValueError(
                "verl-dr-grpo: the responses are unpadded (verl's default trainer pads each micro-batch to its own "
                f"longest response), so the rollout's response length is not in the batch; set {BOUND_HINT}")
        return width
    factor = _check_factor(configured)
    if padded_to_bound and factor != width:
        raise ValueError(
            f"verl-dr-grpo: actor loss_scale_factor={factor} differs from the rollout's response length {width}; "
            "Dr-GRPO divides by the generation bound: leave loss_scale_factor unset or equal to it")
    longest = int(response_mask.sum(dim=-1).max()) if response_mask.numel() else 0
    if longest > factor:
        raise ValueError(
            f"verl-dr-grpo: actor loss_scale_factor={factor} is shorter than a response of {longest} tokens, so it "
            f"is not the rollout's generation bound; set {BOUND_HINT}")
    return factor


def fixed_length_loss(agg_mode):
    warned = set()

    def dr_grpo_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode=VERL_DEFAULT_AGG,
                     config=None, rollout_is_weights=None):
        from verl.trainer.ppo import core_algos

        mode = effective_agg_mode(loss_agg_mode, agg_mode, warned)
        vanilla = core_algos.POLICY_LOSS_REGISTRY["vanilla"]
        if mode != FIXED:
            return vanilla(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode=mode, config=config,
                           rollout_is_weights=rollout_is_weights)
        info = config.global_batch_info
        configured = info.get("loss_scale_factor")
        if configured is None:
            configured = getattr(config, "loss_scale_factor", None)
        bound = response_bound(configured, response_mask, None)
        had, old = "loss_scale_factor" in info, info.get("loss_scale_factor")
        info["loss_scale_factor"] = bound
        try:
            return vanilla(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode=mode, config=config,
                           rollout_is_weights=rollout_is_weights)
        finally:
            if had:
                info["loss_scale_factor"] = old
            else:
                info.pop("loss_scale_factor", None)

    return dr_grpo_loss


def objective_unit_ppo_loss(loss_name, agg_mode):
    """Wrap verl's ``ppo_loss`` (the actor's loss on both trainers) for the plugin's policy loss.

    The actor config it passes on carries the plugin's aggregation and, for the fixed
    divisor, ``loss_scale_factor`` = the rollout's bound, so the policy-gradient, entropy
    and KL terms are all aggregated in the objective's unit.
    """
    warned = set()

    def dr_grpo_ppo_loss(original, *args, **kwargs):
        call = dict(zip(("config", "model_output", "data", "dp_group"), args))
        call.update(kwargs)
        config, data = call["config"], call["data"]
        if config.policy_loss.get("loss_mode", "vanilla") != loss_name:
            return original(**call)
        mode = effective_agg_mode(config.loss_agg_mode, agg_mode, warned)
        factor = config.loss_scale_factor
        if mode == FIXED:
            mask = data["response_mask"]
            padded = not getattr(mask, "is_nested", False)
            if not padded:
                mask = mask.to_padded_tensor(0)
            factor = response_bound(config.loss_scale_factor, mask, padded)
        if (mode, factor) != (config.loss_agg_mode, config.loss_scale_factor):
            call["config"] = dataclasses.replace(config, loss_agg_mode=mode, loss_scale_factor=factor,
                                                 global_batch_info=dict(config.global_batch_info))
        return original(**call)

    return dr_grpo_ppo_loss


def bound_from_rollout(loss_name, agg_mode):
    """Wrap verl's ``validate_config``: the actor's ``loss_scale_factor`` := ``rollout.response_length``.

    Runs in the driver before the config reaches the workers; a factor that differs from the
    bound is refused there, before any worker starts.
    """

    def dr_grpo_validate_config(original, config, *args, **kwargs):
        result = original(config, *args, **kwargs)
        actor = config.actor_rollout_ref.actor
        if actor.policy_loss.get("loss_mode", "vanilla") != loss_name:
            return result
        if effective_agg_mode(actor.loss_agg_mode, agg_mode, set()) != FIXED:
            return result
        bound = config.actor_rollout_ref.rollout.response_length
        configured = actor.get("loss_scale_factor")
        if configured is None:
            actor.loss_scale_factor = bound
            print(f"verl-dr-grpo: actor loss_scale_factor set to rollout.response_length={bound} "
                  "(Dr-GRPO's divisor: the generation bound)", file=sys.stderr, flush=True)
        elif _check_factor(configured) != bound:
            raise ValueError(
                f"verl-dr-grpo: actor loss_scale_factor={configured} differs from rollout.response_length={bound}; "
                "Dr-GRPO divides by the generation bound: leave loss_scale_factor unset or equal to it")
        return result

    return dr_grpo_validate_config


def _not_initializing(module):
    """Refuse to install while *module* is half-imported (its body imported ``core_algos``, which
    activated this plugin): the function to wrap is not defined yet. verl's trainers import
    ``core_algos`` first (through ``verl.trainer.distillation.losses``), so this happens only
    to a program that imports *module* before anything else of verl's trainer."""
    loaded = sys.modules.get(module)
    if loaded is not None and getattr(getattr(loaded, "__spec__", None), "_initializing", False):
        raise ImportError(f"verl-dr-grpo: {module} is still being imported; import verl.trainer.ppo.core_algos "
                          f"before it so the plugin can wrap its loss")


def install(params):
    from starforge import patching

    estimator = params.get("verl_dr_grpo.adv_estimator", "dr_grpo")
    loss = params.get("verl_dr_grpo.policy_loss", "dr_grpo")
    for key, name in (("adv_estimator", estimator), ("policy_loss", loss)):
        if name in ("grpo", "gae", "vanilla"):
            raise ValueError(f"verl_dr_grpo.{key}={name!r} is one of verl's own names; register under a new one")
    norm = bool(params.get("verl_dr_grpo.norm_adv_by_std", False))
    agg = params.get("verl_dr_grpo.loss_agg_mode", FIXED)
    _not_initializing(LOSSES)
    patching.replace(f"{MODULE}:ADV_ESTIMATOR_REGISTRY[{estimator}]", mean_centred_advantage(norm),
                     when_imported=True, create=True)
    patching.replace(f"{MODULE}:POLICY_LOSS_REGISTRY[{loss}]", fixed_length_loss(agg), when_imported=True, create=True)
    patching.wrap(f"{LOSSES}:ppo_loss", objective_unit_ppo_loss(loss, agg), when_imported=True)
    patching.wrap(f"{CONFIG}:validate_config", bound_from_rollout(loss, agg), when_imported=True)
    if _has_default_trainer():
        patching.wrap(f"{MULTI_TRAJECTORIES}:compute_advantage_for_multi_trajectories",
                      session_final_grouping(estimator, norm), when_imported=True)


def _has_default_trainer():
    """Whether verl's default (v1) trainer can run here: its package imports TransferQueue
    (verl's ``verl-core`` extra). Without it there is no session grouping to patch, and its
    module could not even be imported (``forge plan`` would report the patch as never applied)."""
    import importlib.util

    if "transfer_queue" in sys.modules:
        return True
    try:
        return importlib.util.find_spec("transfer_queue") is not None
    except (ImportError, ValueError):
        return False
