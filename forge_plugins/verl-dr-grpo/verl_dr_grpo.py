"""verl-dr-grpo: Dr-GRPO through verl's registries in ``verl.trainer.ppo.core_algos``.

verl's trainer takes hard-coded branches for the names ``grpo`` and ``gae`` and sends every
other name through ``get_adv_estimator_fn`` / ``get_policy_loss_fn``, so this plugin adds
entries under new names (default ``dr_grpo`` for both) that the user selects:
``algorithm.adv_estimator=dr_grpo`` and ``actor_rollout_ref.actor.policy_loss.loss_mode=dr_grpo``.

- Estimator: verl's own GRPO outcome advantage with ``norm_adv_by_std_in_grpo=False``:
  ``A_i = r_i - mean(group)``, no std division.
- Policy loss: verl's own ``vanilla`` PPO-clip loss, aggregated with
  ``seq-mean-token-sum-norm``: each response's token-loss sum, averaged over responses,
  divided by the response length of the batch -- the rollout's generation bound
  (``rollout.response_length``: verl pads every response to it). A different
  ``actor.loss_scale_factor`` would be a second divisor that can drift, so it is refused.
- The trainer's ``actor.loss_agg_mode``: verl's default (``token-mean``) is replaced, with a
  warning on stderr; any other value that differs from the plugin's is refused.

The entries are written with ``starforge.patching`` when ``core_algos`` is imported (in
every process that imports it: Ray actors included), never by the launcher itself.
"""

import sys

MODULE = "verl.trainer.ppo.core_algos"
VERL_DEFAULT_AGG = "token-mean"


def _warn_once(message, warned):
    """Print *message* on stderr the first time this installed loss meets it."""
    if message not in warned:
        warned.add(message)
        print(message, file=sys.stderr, flush=True)


def mean_centred_advantage(norm_adv_by_std=False):
    def dr_grpo_advantage(token_level_rewards, response_mask, index=None, epsilon=1e-6, config=None, **kwargs):
        from verl.trainer.ppo import core_algos

        if index is None:
            raise ValueError("verl-dr-grpo: the batch carries no 'uid' (index) to group responses by prompt")
        return core_algos.compute_grpo_outcome_advantage(
            token_level_rewards=token_level_rewards, response_mask=response_mask, index=index, epsilon=epsilon,
            norm_adv_by_std_in_grpo=norm_adv_by_std, config=config,
        )

    return dr_grpo_advantage


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


def fixed_length_loss(agg_mode):
    warned = set()

    def dr_grpo_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode=VERL_DEFAULT_AGG,
                     config=None, rollout_is_weights=None):
        from verl.trainer.ppo import core_algos

        mode = effective_agg_mode(loss_agg_mode, agg_mode, warned)
        vanilla = core_algos.POLICY_LOSS_REGISTRY["vanilla"]
        if mode != "seq-mean-token-sum-norm":
            return vanilla(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode=mode, config=config,
                           rollout_is_weights=rollout_is_weights)
        bound = int(response_mask.shape[-1])  # the rollout's response length: responses are padded to it
        info = config.global_batch_info
        configured = info.get("loss_scale_factor") or getattr(config, "loss_scale_factor", None)
        if configured is not None and int(configured) != bound:
            raise ValueError(
                f"verl-dr-grpo: actor loss_scale_factor={configured} differs from the rollout's response length "
                f"{bound}; Dr-GRPO divides by the generation bound, leave loss_scale_factor unset"
            )
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


def install(params):
    from starforge import patching

    estimator = params.get("verl_dr_grpo.adv_estimator", "dr_grpo")
    loss = params.get("verl_dr_grpo.policy_loss", "dr_grpo")
    for key, name in (("adv_estimator", estimator), ("policy_loss", loss)):
        if name in ("grpo", "gae", "vanilla"):
            raise ValueError(f"verl_dr_grpo.{key}={name!r} is one of verl's own names; register under a new one")
    norm = bool(params.get("verl_dr_grpo.norm_adv_by_std", False))
    agg = params.get("verl_dr_grpo.loss_agg_mode", "seq-mean-token-sum-norm")
    patching.replace(f"{MODULE}:ADV_ESTIMATOR_REGISTRY[{estimator}]", mean_centred_advantage(norm),
                     when_imported=True, create=True)
    patching.replace(f"{MODULE}:POLICY_LOSS_REGISTRY[{loss}]", fixed_length_loss(agg), when_imported=True, create=True)
