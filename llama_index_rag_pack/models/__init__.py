"""Models: the embedding backends (ONNX Runtime, PyTorch, OpenAI-compatible endpoints), the local
LLM on llama.cpp, and the settings that resolve the defaults (which model, which LLM, where the
data lives)."""
