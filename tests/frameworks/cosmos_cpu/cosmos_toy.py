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

