"""dpftrl_tff: DP-FTRL federated learning of keyboard language models in TFF.

Implements and extends Xu, Zhang et al. 2023, "Federated Learning of Gboard
Language Models with Differential Privacy".
"""
