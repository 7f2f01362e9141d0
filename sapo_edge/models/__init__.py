"""Which weights a --model name means: an alias, a folder, a .gguf file (converted once through
backends/) or a Hugging Face id; the offline model's fetch and the cache."""
