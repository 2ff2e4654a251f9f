"""The models served: Llama/Qwen2 and Mixtral in Flax NNX, their configs, Hugging Face checkpoint
loading, the tokenizer, weight quantization and the shipped model assets. Imports only kernels."""
