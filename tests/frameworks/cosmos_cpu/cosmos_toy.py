"""A toy task for Cosmos-RL's reward path on CPU: each completion is its reward written out
(``"0.75"``), and no tokenizer is loaded (the model name ``cosmos-toy`` resolves to a stand-in
through Cosmos-RL's own tokenizer-loader registry). Importable in spawned workers."""

MODEL = "cosmos-toy"


class ToyTokenizer:
    """What Cosmos-RL's reward path asks of a tokenizer: one token per character."""

    pad_token_id = 0
    eos_token_id = 0

    def __call__(self, text, add_special_tokens=False):
        from types import SimpleNamespace

        return SimpleNamespace(input_ids=[ord(c) for c in text])

    def decode(self, ids):
        return "".join(chr(i) for i in ids)


def register_tokenizer():
    from cosmos_rl.utils import util

    util.register_tokenizer_loader(lambda name: name == MODEL, lambda name: ToyTokenizer())


def reward(to_be_evaluated, reference=None, *args, **kwargs):
    """The completion is its own reward."""
    return float(to_be_evaluated)


def calculator_init(config):
    """A reward worker's initializer: Cosmos-RL's own local calculator with the toy reward."""
    from cosmos_rl.reward.local_calculator import LocalRewardCalculator

    register_tokenizer()
    LocalRewardCalculator.get_instance().setup(config=config, reward_fns=[reward])


def compute_in_worker(config, payloads):
    """In a reward worker: :func:`calculator_init`, then Cosmos-RL's own ``compute_rewards`` as its
    dispatcher submits it. The worker then leaves without the interpreter's teardown (its results
    are sent before it is asked to stop; freeing torch's and Cosmos-RL's modules takes seconds)."""
    import atexit
    import os
    import sys

    from cosmos_rl.reward.dispatcher import RewardDispatcher

    calculator_init(config)

    def leave():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    atexit.register(leave)
    return RewardDispatcher.compute_rewards(payloads, False, 0)
