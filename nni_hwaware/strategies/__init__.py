"""Search strategies: PPO under a budget (multi-trial), hardware-penalised Gumbel-DARTS (one-shot)."""
