"""Train a tabular softmax policy with GRPO on a toy pattern task: ``python -m toy_grpo.train``.

The policy emits up to ``grpo.max_tokens`` tokens, one categorical per position (logits
``theta[position][token]``), and stops after the end token 0. The reward is the fraction
of the target pattern (``task.target``, default ``[1, 2, 3, 0]``) matched position by
position. Each step samples ``grpo.groups`` groups of ``grpo.group_size`` responses, scores
them, computes group advantages, and takes ``grpo.epochs`` gradient steps on the clipped
policy-gradient loss, with gradients computed analytically:
``d logp(y_t) / d theta[t][v] = [v == y_t] - pi_t(v)``.

Hyperparams come from ``starforge.plugins.hyperparams()`` (flat dotted keys, see
:data:`DEFAULTS`). Deferred plugins registered for the job are installed once the policy
exists, with the context ``policy=`` (the :class:`TabularPolicy`) and ``max_tokens=``.

The environment mechanism: when ``task.environment`` names an environment plugin of the
job, the trainer gets its factory from ``starforge.plugins.load_environment(name,
vocab=, max_tokens=)`` and scores each response by one episode of a fresh environment
(``factory()``; ``reset()``, then ``step(token) -> (observation, reward, done)``), instead of
the pattern reward. It prints ``environment: NAME (...)`` when it does.

Lines printed for every run (tests compare them exactly)::

    rewards[step 0] = [...]
    advantages[step 0] = [...]
    step 10 mean_reward = ... loss = ... clip_fraction = ...
    first_mean_reward = ...        (mean reward over the first grpo.report_steps steps)
    mean_reward = ...              (mean reward over the last grpo.report_steps steps)
"""

from __future__ import annotations

import math
import random
import sys
from typing import Any, Callable, Mapping

from toy_grpo import algorithms

EOS = 0

DEFAULTS: dict = {
    "grpo.seed": 0,
    "grpo.steps": 40,
    "grpo.group_size": 8,
    "grpo.groups": 2,
    "grpo.lr": 2.0,
    "grpo.epochs": 2,
    "grpo.clip_eps": 0.2,
    "grpo.eps": 1e-6,
    "grpo.loss_type": "token-mean",
    "grpo.max_tokens": 6,
    "grpo.estimator": "grpo",
    "grpo.report_steps": 5,
    "task.vocab": 4,
    "task.target": [1, 2, 3, 0],
    "task.environment": "",
}


class TabularPolicy:
    """A softmax over ``vocab`` tokens for each of ``positions`` positions."""

    def __init__(self, positions: int, vocab: int) -> None:
        self.positions = positions
        self.vocab = vocab
        self.logits = [[0.0] * vocab for _ in range(positions)]

    def probs(self, t: int) -> list:
        row = self.logits[t]
        top = max(row)
        e = [math.exp(x - top) for x in row]
        total = sum(e)
        return [x / total for x in e]

    def log_probs(self, response: list) -> list:
        out = []
        for t, token in enumerate(response):
            row = self.logits[t]
            top = max(row)
            out.append(row[token] - top - math.log(sum(math.exp(x - top) for x in row)))
        return out

    def sample(self, rng: random.Random) -> list:
        response = []
        for t in range(self.positions):
            u = rng.random()
            acc = 0.0
            token = self.vocab - 1
            for v, p in enumerate(self.probs(t)):
                acc += p
                if u < acc:
                    token = v
                    break
            response.append(token)
            if token == EOS:
                break
        return response

    def step(self, responses: list, grad_logp: list, lr: float) -> None:
        """Gradient descent on the loss, given d loss / d logp[i][t] for every sampled token."""
        delta = [[0.0] * self.vocab for _ in range(self.positions)]
        for response, grads in zip(responses, grad_logp):
            for t, (token, g) in enumerate(zip(response, grads)):
                if g == 0.0:
                    continue
                for v, p in enumerate(self.probs(t)):
                    delta[t][v] += g * ((1.0 if v == token else 0.0) - p)
        for t in range(self.positions):
            for v in range(self.vocab):
                self.logits[t][v] -= lr * delta[t][v]


def _mean(values: list) -> float:
    return sum(values) / len(values)


def install_deferred_plugins(**ctx: Any) -> list:
    """Install every deferred plugin the job registered, with this trainer's context."""
    from starforge import plugins

    names = list(plugins.registered())
    for name in names:
        plugins.install_deferred(name, **ctx)
    return names


def load_environment(name: str, vocab: int, max_tokens: int, out: Callable[[str], None]) -> Callable[[], Any] | None:
    """The factory of environment plugin *name* (None: no environment, the pattern reward)."""
    if not name:
        return None
    from starforge import plugins

    make_env = plugins.load_environment(name, vocab=vocab, max_tokens=max_tokens)
    if not callable(make_env):
        raise TypeError(f"environment plugin '{name}' returned {type(make_env).__name__}, not a factory")
    out(f"environment: {name} (each response is one episode of a fresh environment)")
    return make_env


def run(params: Mapping[str, Any], out: Callable[[str], None] = print) -> dict:
    """Train with *params* (flat dotted keys; missing keys take :data:`DEFAULTS`)."""
    cfg = {**DEFAULTS, **{k: v for k, v in params.items() if k in DEFAULTS}}
    rng = random.Random(int(cfg["grpo.seed"]))
    steps, report = int(cfg["grpo.steps"]), int(cfg["grpo.report_steps"])
    group_size, groups = int(cfg["grpo.group_size"]), int(cfg["grpo.groups"])
    max_tokens = int(cfg["grpo.max_tokens"])
    target = list(cfg["task.target"])
    policy = TabularPolicy(max_tokens, int(cfg["task.vocab"]))

    for name in install_deferred_plugins(policy=policy, max_tokens=max_tokens):
        out(f"deferred: {name} installed")
    from starforge import patching

    # every patch a plugin of the job applied, deferred ones included (a deferred plugin that
    # patches this trainer's own classes names them under __main__ when run with python -m)
    for rec in patching.records():
        if rec["status"] == "applied" and rec["plugin"]:
            out(f"patched : {rec['target']} ({rec['mode']}) by {rec['plugin'] or 'unattributed'}")

    make_env = load_environment(str(cfg["task.environment"]), int(cfg["task.vocab"]), max_tokens, out)

    history = []
    for step in range(steps):
        responses = [policy.sample(rng) for _ in range(group_size * groups)]
        logp_old = [policy.log_probs(r) for r in responses]
        if make_env is None:
            rewards = algorithms.compute_rewards(responses, target)
        else:
            rewards = [algorithms.episode_reward(make_env(), r) for r in responses]
        estimator = algorithms.ADVANTAGE_ESTIMATORS[cfg["grpo.estimator"]]
        advantages = estimator(rewards, group_size, float(cfg["grpo.eps"]))
        if step == 0:
            out(f"rewards[step 0] = {rewards!r}")
            out(f"advantages[step 0] = {advantages!r}")
        for _ in range(int(cfg["grpo.epochs"])):
            logp = [policy.log_probs(r) for r in responses]
            loss = algorithms.clipped_pg_loss(
                logp, logp_old, advantages, float(cfg["grpo.clip_eps"]), cfg["grpo.loss_type"], max_tokens
            )
            policy.step(responses, loss.grad, float(cfg["grpo.lr"]))
        history.append(_mean(rewards))
        if step % 10 == 0 or step == steps - 1:
            out(f"step {step} mean_reward = {history[-1]!r} loss = {loss.value:.6g} clip_fraction = {loss.clip_fraction:.3f}")
    first, last = _mean(history[:report]), _mean(history[-report:])
    out(f"first_mean_reward = {first!r}")
    out(f"mean_reward = {last!r}")
    return {"first_mean_reward": first, "mean_reward": last, "history": history}


def main() -> int:
    from starforge.plugins import hyperparams

    run(hyperparams())
    return 0


if __name__ == "__main__":
    sys.exit(main())
