"""Pretraining a biLM from raw text: corpus preparation, output vocabulary, the
language-model loss and a resumable training loop (CPU, one GPU or torchrun)."""
