"""Writes tests/fixtures/smollm2-tokens.json: how llama.cpp (the GGUF format's
reference implementation, through llama-cpp-python) tokenises sample texts with the
test model's vocabulary. The Rust tokenizer built from the same GGUF metadata must
give the same ids. Run once, by hand:

    pip install llama-cpp-python && python3 scripts/reference-tokens.py MODEL.gguf
"""
import json
import sys

from llama_cpp import Llama

SAMPLES = [
    "Hello world",
    " leading space",
    "12345 apples cost $3.50",
    "Don't you'll we're THEY'RE",
    "multi\n\nline\ttabs  and   spaces   ",
    "unicode: café, naïve, 日本語, emoji 🎉",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "Order 1001 shipped on 2024-05-03.",
    '<tool_call>\n{"name": "cancel_order", "arguments": {"order_id": 42}}\n</tool_call>',
    "Where is my order? I'd like to return it.",
]

llm = Llama(model_path=sys.argv[1], vocab_only=True, verbose=False)
out = [
    {"text": s, "ids": llm.tokenize(s.encode("utf-8"), add_bos=False, special=True)}
    for s in SAMPLES
]
with open("tests/fixtures/smollm2-tokens.json", "w") as f:
    json.dump(out, f, ensure_ascii=False, indent=1)
    f.write("\n")
print(f"wrote {len(out)} samples")
