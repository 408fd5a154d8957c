"""The model under test and the device it runs on: HF classifier, encoder + linear head, Python callable.
Reads a local model folder (config.json, *.safetensors, tokenizer files), a head ``.safetensors``, the runtime
(torch, /proc, NVML) and the shipped ``rocm_snapshots/``; writes only a trained head (``save_head``)."""
