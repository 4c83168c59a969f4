"""verl-gspo: GSPO as the paper specifies it, registered in verl's policy-loss registry.

verl ships a ``gspo`` loss that aggregates with the trainer's ``loss_agg_mode`` (default
``token-mean``) and the PPO clip range (0.2). This plugin registers a loss under a new name
(default ``gspo_paper``, selected with ``actor_rollout_ref.actor.policy_loss.loss_mode``) with

- one ratio per response, ``s_i = exp(mean_t (logp - logp_old))`` over its masked tokens, in
  the stop-gradient form ``sg[z_i] + logp - sg[logp]`` (value ``z_i``, clamped above at 10),
  clipped per response to ``[1 - 3e-4, 1 + 4e-4]`` (the paper's range);
- ``seq-mean-token-mean`` aggregation.

verl's actor loss (``verl.workers.utils.losses.ppo_loss``) aggregates its entropy and KL terms
with the actor's ``loss_agg_mode``; for this loss the plugin hands ``ppo_loss`` an actor
config with the plugin's aggregation, so those terms are in the objective's unit too.

Refused: per-token advantages (values that differ within a response: GSPO is defined for
one advantage per response), a trainer ``loss_agg_mode`` other than verl's default or the
plugin's, a trainer clip range other than verl's default (0.2) or the plugin's, and a
non-default ``clip_ratio_c`` (verl's dual clip, which this loss does not read).
Warned (honoured but inert): a token-scale clip range (0.01 or more) with sequence ratios,
an on-policy ratio (old and new log-probs equal: one update per rollout, the ratio is 1
and the clip never acts), and bf16 log-probs (their rounding is far above the clip range).

Checked against verl 0.9.1.
"""

import dataclasses
import sys

MODULE = "verl.trainer.ppo.core_algos"
LOSSES = "verl.workers.utils.losses"
VERL_DEFAULT_AGG = "token-mean"
VERL_DEFAULT_CLIP = 0.2
VERL_DEFAULT_DUAL_CLIP = 3.0
TOKEN_SCALE = 0.01


def _warn_once(message, warned):
    """Print *message* on stderr the first time this installed loss meets it."""
    if message not in warned:
        warned.add(message)
        print(message, file=sys.stderr, flush=True)


def _choose(name, passed, wanted, verl_default, warned):
    if passed is None or passed == wanted:
        return wanted
    if passed == verl_default:
        _warn_once(f"verl-gspo: actor {name} {passed!r} (verl's default) replaced by {wanted!r}", warned)
        return wanted
    raise ValueError(f"verl-gspo: actor {name}={passed!r} conflicts with the plugin's {wanted!r}; "
                     f"leave verl's default or set the plugin's param")


def check_sequence_advantages(advantages, response_mask):
    """Refuse advantages that vary within a response."""
    import torch

    mask = response_mask.bool()
    big = torch.finfo(advantages.dtype).max
    high = torch.where(mask, advantages, torch.full_like(advantages, -big)).amax(dim=-1)
    low = torch.where(mask, advantages, torch.full_like(advantages, big)).amin(dim=-1)
    rows = mask.any(dim=-1)
    spread = (high - low)[rows]
    if spread.numel() and float(spread.max()) > 1e-6 * max(1.0, float(advantages.abs().max())):
        raise ValueError("verl-gspo: per-token advantages (values differ within a response); "
                         "GSPO needs one advantage per response")


def sequence_loss(clip_low, clip_high, agg_mode):
    warned = set()

    def gspo_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode=VERL_DEFAULT_AGG, config=None,
                  rollout_is_weights=None):
        import torch
        from verl.trainer.ppo import core_algos
        from verl.utils import torch_functional as verl_F

        mode = _choose("loss_agg_mode", loss_agg_mode, agg_mode, VERL_DEFAULT_AGG, warned)
        low = _choose("clip_ratio_low", getattr(config, "clip_ratio_low", None), clip_low, VERL_DEFAULT_CLIP, warned)
        high = _choose("clip_ratio_high", getattr(config, "clip_ratio_high", None), clip_high, VERL_DEFAULT_CLIP, warned)
        if max(low, high) >= TOKEN_SCALE:
            _warn_once(f"verl-gspo: warning: clip range {low}/{high} is token-scale; sequence ratios stay near 1, "
                       "so this clip rarely engages (the GSPO paper uses 3e-4/4e-4)", warned)
        dual = getattr(config, "clip_ratio_c", VERL_DEFAULT_DUAL_CLIP)
        if dual != VERL_DEFAULT_DUAL_CLIP:
            raise ValueError(f"verl-gspo: actor clip_ratio_c={dual!r} is verl's dual clip, which GSPO does not have "
                             f"(the sequence log-ratio is capped at 10 instead); leave verl's default")
        check_sequence_advantages(advantages, response_mask)
        if log_prob.dtype == torch.bfloat16:
            _warn_once("verl-gspo: warning: bf16 log-probs: their rounding (about 4e-3 relative) is far above the "
                       "sequence clip range, so clip decisions are dominated by it", warned)
        if torch.equal(log_prob.detach(), old_log_prob):
            _warn_once("verl-gspo: warning: on-policy ratio (old and new log-probs equal: one update per rollout); "
                       "the sequence ratio is 1 and its clip never acts (use ppo_epochs > 1 or several mini-batches)",
                       warned)

        log_ratio = log_prob - old_log_prob
        lengths = torch.sum(response_mask, dim=-1).clamp(min=1)
        seq_log_ratio = torch.sum(log_ratio * response_mask, dim=-1) / lengths
        log_s = log_prob - log_prob.detach() + seq_log_ratio.detach().unsqueeze(-1)
        s = torch.exp(torch.clamp(log_s, max=10.0))
        losses1 = -advantages * s
        losses2 = -advantages * torch.clamp(s, 1 - low, 1 + high)
        pg_losses = torch.maximum(losses1, losses2)
        if rollout_is_weights is not None:
            pg_losses = pg_losses * rollout_is_weights
        info = dict(config.global_batch_info) if config is not None else {}
        pg_loss = core_algos.agg_loss(loss_mat=pg_losses, loss_mask=response_mask, loss_agg_mode=mode, **info)
        metrics = {
            "actor/pg_clipfrac": verl_F.masked_mean(torch.gt(losses2, losses1).float(), response_mask).detach().item(),
            "actor/ppo_kl": verl_F.masked_mean(-log_ratio, response_mask).detach().item(),
            "actor/pg_clipfrac_lower": 0.0,
        }
        return pg_loss, metrics

    return gspo_loss


def objective_unit_ppo_loss(loss_name, agg_mode):
    """Wrap verl's ``ppo_loss``: for this loss, the actor config it passes on carries the plugin's
    aggregation, so the entropy and KL terms are aggregated like the policy-gradient term."""
    warned = set()

    def gspo_ppo_loss(original, *args, **kwargs):
        call = dict(zip(("config", "model_output", "data", "dp_group"), args))
        call.update(kwargs)
        config = call["config"]
        if config.policy_loss.get("loss_mode", "vanilla") == loss_name:
            mode = _choose("loss_agg_mode", config.loss_agg_mode, agg_mode, VERL_DEFAULT_AGG, warned)
            if mode != config.loss_agg_mode:
                call["config"] = dataclasses.replace(config, loss_agg_mode=mode,
                                                     global_batch_info=dict(config.global_batch_info))
        return original(**call)

    return gspo_ppo_loss


def _not_initializing(module):
    """Refuse to install while *module* is half-imported (see verl-dr-grpo: verl's trainers import
    ``core_algos`` before ``verl.workers.utils.losses``, so only a program importing the latter first)."""
    loaded = sys.modules.get(module)
    if loaded is not None and getattr(getattr(loaded, "__spec__", None), "_initializing", False):
        raise ImportError(f"verl-gspo: {module} is still being imported; import verl.trainer.ppo.core_algos "
                          f"before it so the plugin can wrap its loss")


def install(params):
    from starforge import patching

    name = params.get("verl_gspo.policy_loss", "gspo_paper")
    if name in ("vanilla", "gspo"):
        raise ValueError(f"verl_gspo.policy_loss={name!r} is one of verl's own names; register under a new one")
    low = float(params.get("verl_gspo.clip_ratio_low", 3e-4))
    high = float(params.get("verl_gspo.clip_ratio_high", 4e-4))
    for key, value in (("clip_ratio_low", low), ("clip_ratio_high", high)):
        if not 0.0 < value < 1.0:
            raise ValueError(f"verl_gspo.{key} must be in (0, 1), got {value!r}")
    agg = params.get("verl_gspo.loss_agg_mode", "seq-mean-token-mean")
    _not_initializing(LOSSES)
    patching.replace(f"{MODULE}:POLICY_LOSS_REGISTRY[{name}]", sequence_loss(low, high, agg),
                     when_imported=True, create=True)
    patching.wrap(f"{LOSSES}:ppo_loss", objective_unit_ppo_loss(name, agg), when_imported=True)
