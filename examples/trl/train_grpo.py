"""Three steps of TRL's GRPOTrainer on CPU, on a tiny random model built here.

No downloads: a 2-layer Llama with hidden size 32 and random weights, and a word-level
tokenizer built with the ``tokenizers`` library from a fixed vocabulary. The reward is the
fraction of completion words that are "yes" — or, when ``train.reward_environment`` names
an environment plugin of the job, the reward function that plugin provides
(``starforge.plugins.load_environment(name, tokenizer=...)``, e.g.
examples/environments/yes-reward). The GRPO options come from TRL's defaults unless an
algorithm plugin of the job (``trl-dr-grpo``, ``trl-gspo``) changes them.

Prints, for the tests and for a human comparing runs::

    trainer options: scale_rewards=... loss_type=... importance_sampling_level=... epsilon=.../...
    step N loss = ...
    rewards = [...]            (every reward the reward function returned, in order)
    advantages = [...]         (every advantage GRPOTrainer computed, in the same order: the
                                i-th advantage is the i-th reward's)
    weights checksum = ...     (sum of all parameters after training)
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

WORDS = ["yes", "no", "maybe", "red", "blue", "green", "one", "two", "three", "say", "please"]
PROMPTS = ["say yes", "say no", "please say yes", "one two three", "red blue green", "say maybe"]


def build_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<unk>", "<s>", "</s>"]
    vocab = {w: i for i, w in enumerate(specials + WORDS)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", unk_token="<unk>",
                                   bos_token="<s>", eos_token="</s>", padding_side="left")


def build_model(tokenizer):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64,
                         pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id)
    return LlamaForCausalLM(config)


def hyperparams() -> dict:
    """The job's hyperparams when run by StarForge (read from FORGE_HYPERPARAMS), else {}."""
    import json

    path = os.environ.get("FORGE_HYPERPARAMS")
    if not path:
        return {}
    with open(path) as f:
        return json.load(f)


def main(argv: list) -> int:
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    hp = hyperparams()
    steps = int(hp.get("train.steps", 3))
    # TRL's output_dir is the job's declared output directory (outputs: in forge.yaml, given to
    # the job as FORGE_OUTPUT_DIR), so forge trace and forge audit find what TRL writes there
    out_dir = (hp.get("train.output_dir") or os.environ.get("FORGE_OUTPUT_DIR")
               or os.path.join(os.environ.get("TMPDIR", "/tmp"), "trl-grpo-example"))
    tokenizer = build_tokenizer()
    model = build_model(tokenizer)
    rewards_seen: list = []

    def yes_reward(completions, **kwargs):
        scores = []
        for text in completions:
            words = text.split()
            scores.append(sum(w == "yes" for w in words) / max(len(words), 1))
        return scores

    reward_func = yes_reward
    environment = str(hp.get("train.reward_environment") or "")
    if environment:  # an environment plugin of the job provides the reward function
        from starforge.plugins import load_environment

        reward_func = load_environment(environment, tokenizer=tokenizer)
        print(f"reward: {environment} (environment plugin) provides {reward_func.__name__}", flush=True)

    def recorded(completions, **kwargs):
        scores = reward_func(completions, **kwargs)
        rewards_seen.extend(scores)
        return scores

    recorded.__name__ = reward_func.__name__  # TRL logs each reward function by its name

    args = GRPOConfig(
        output_dir=out_dir, max_steps=steps, per_device_train_batch_size=4, num_generations=4,
        max_completion_length=int(hp.get("train.max_completion_length", 8)), learning_rate=float(hp.get("train.lr", 1e-2)),
        logging_steps=1, save_strategy="no", report_to=[], seed=0, use_cpu=True, bf16=False,
        temperature=1.0, disable_tqdm=True, dataloader_num_workers=0,
    )
    dataset = Dataset.from_dict({"prompt": PROMPTS * 2})
    trainer = GRPOTrainer(model=model, reward_funcs=[recorded], args=args, train_dataset=dataset,
                          processing_class=tokenizer)
    print(f"trainer options: scale_rewards={trainer.scale_rewards} loss_type={trainer.loss_type} "
          f"importance_sampling_level={trainer.importance_sampling_level} "
          f"epsilon={trainer.epsilon_low}/{trainer.epsilon_high} max_completion_length={trainer.max_completion_length}",
          flush=True)

    # Advantages as GRPOTrainer computes them, one per completion in the order the reward
    # function scored them: TRL shuffles a generation batch after this, before the loss sees it.
    advantages_seen: list = []
    generate_and_score = trainer._generate_and_score_completions

    def recording_scores(generation_batch):
        output = generate_and_score(generation_batch)
        advantages_seen.extend(output["advantages"].reshape(-1).tolist())
        return output

    trainer._generate_and_score_completions = recording_scores
    trainer.train()
    for entry in trainer.state.log_history:
        if "loss" in entry:
            print(f"step {entry['step']} loss = {entry['loss']!r}")
    print(f"rewards = {rewards_seen!r}")
    print(f"advantages = {advantages_seen!r}")
    with torch.no_grad():
        checksum = sum(float(p.double().sum()) for p in model.parameters())
    print(f"weights checksum = {checksum!r}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
