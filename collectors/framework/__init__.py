"""What every collector stands on: line framing, the signature matcher, the kernel and torch/NCCL line
grammars, the event vocabulary, redaction, and the registry that finds the collectors. The collectors
themselves (one module per source) sit beside this package; their contract is collectors/base.py."""
