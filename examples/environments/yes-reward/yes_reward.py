"""yes-reward: a TRL reward function, shipped as an environment plugin.

``load_environment("yes-reward", tokenizer=tok)`` calls :func:`make_reward` once per process
and returns the reward function, which TRL's ``GRPOTrainer(reward_funcs=[...])`` calls with
the batch's completions (and the dataset's columns as keyword arguments).
"""


def make_reward(params, **ctx):
    """The reward function for the job's ``yes_reward.word`` (``ctx`` is what the trainer passed)."""
    word = str(params.get("yes_reward.word", "yes"))

    def yes_reward(completions, **kwargs):
        scores = []
        for text in completions:
            if not isinstance(text, str):  # conversational completions: the message content
                text = " ".join(m.get("content", "") for m in text)
            words = text.split()
            scores.append(sum(w == word for w in words) / max(len(words), 1))
        return scores

    return yes_reward
