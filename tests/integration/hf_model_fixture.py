"""The Hugging Face side of the fine-tune test (hf_finetune_test.cc).

  make OUT FILE...   trains a byte-level BPE tokenizer on FILEs with PyPI's tokenizers
                     (OUT/tokenizer.json) and saves a small random Qwen3-MoE of that
                     vocabulary with transformers' save_pretrained (OUT/model/, sharded,
                     tokenizer.json beside it as a hub folder has it); prints its
                     vocabulary size.
  check EXPORT START TEXT
                     loads EXPORT (trainyard's `export --names hf` folder) and START with
                     from_pretrained, and prints one JSON line: the class, the parameter
                     count and both models' loss on the first 2 x 64 tokens of TEXT
                     encoded with START's tokenizer.json.
"""

import json
import os
import sys

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

import transformers


def make(out, files):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=2048, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train(files, trainer)
    # An end-of-text token after each document, as GPT-2-style models mark them.
    eos = tok.token_to_id("<|endoftext|>")
    tok.post_processor = processors.TemplateProcessing(single="$A <|endoftext|>",
                                                       special_tokens=[("<|endoftext|>", eos)])
    os.makedirs(out, exist_ok=True)
    tok.save(os.path.join(out, "tokenizer.json"))
    vocab = tok.get_vocab_size()
    config = transformers.Qwen3MoeConfig(
        vocab_size=vocab, hidden_size=64, intermediate_size=128, moe_intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, num_experts=8, num_experts_per_tok=2,
        norm_topk_prob=True, rms_norm_eps=1e-6, max_position_embeddings=512,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6}, tie_word_embeddings=False)
    torch.manual_seed(3)
    model = transformers.AutoModelForCausalLM.from_config(config).float()
    folder = os.path.join(out, "model")
    model.save_pretrained(folder, max_shard_size="300KB")
    tok.save(os.path.join(folder, "tokenizer.json"))
    print(vocab)


def check(export, start, text):
    tok = Tokenizer.from_file(os.path.join(start, "tokenizer.json"))
    with open(text, encoding="utf-8") as f:
        ids = tok.encode(f.read()).ids
    t = torch.tensor(ids[:2 * 64 + 1])
    inputs = torch.stack([t[0:64], t[64:128]])
    targets = torch.stack([t[1:65], t[65:129]])

    def loss(model):
        with torch.no_grad():
            logits = model(input_ids=inputs).logits
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1)).item()

    load = dict(attn_implementation="eager", dtype=torch.float32)
    exported = transformers.AutoModelForCausalLM.from_pretrained(export, **load).eval()
    original = transformers.AutoModelForCausalLM.from_pretrained(start, **load).eval()
    print(json.dumps({"class": type(exported).__name__, "params": sum(p.numel() for p in exported.parameters()),
                      "loss_export": loss(exported), "loss_start": loss(original)}))


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3:])
    elif len(sys.argv) == 5 and sys.argv[1] == "check":
        check(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit(__doc__)
