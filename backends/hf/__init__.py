"""Decoding machinery of the transformers backend: our decoder forward over the model's
own modules, the token rules, greedy and beam search, and long-form windowing."""
